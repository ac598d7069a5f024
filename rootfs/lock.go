package rootfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockPoll is how often a builder waiting for another one's lock tries again. flock(2)
// can't wait on a context, so the wait is a poll of LOCK_NB.
const lockPoll = 250 * time.Millisecond

// lockBuild takes an exclusive flock on path (created if missing), waiting until
// another builder, in this process or another, lets go of it or ctx ends. unlock
// removes the file, before it lets go: a builder that was waiting on the removed
// file finds, once it holds the lock, that path names another file or none, and
// locks afresh, so two builders never hold locks on two files of one path.
func lockBuild(ctx context.Context, path string, progress func(string)) (unlock func(), err error) {
	if err := mkdirRoot(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("creating the folder of build lock %q: %w", path, err)
	}
	told := false
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("opening build lock %q: %w", path, err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			if !samePath(f, path) { // removed by its last holder: lock what path names now
				f.Close()
				continue
			}
			return func() {
				os.Remove(path)
				f.Close() // drops the flock
			}, nil
		}
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return nil, fmt.Errorf("locking %q: %w", path, err)
		}
		if !told {
			progress(fmt.Sprintf("waiting for another build holding %s", path))
			told = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for build lock %q: %w", path, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

// samePath reports whether path still names the file f has open.
func samePath(f *os.File, path string) bool {
	open, err := f.Stat()
	if err != nil {
		return false
	}
	now, err := os.Stat(path)
	return err == nil && os.SameFile(open, now)
}
