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
// another builder, in this process or another, lets go of it or ctx ends. The lock
// file is left in place: removing it would let a third builder lock a new file while
// the second still holds the old one.
func lockBuild(ctx context.Context, path string, progress func(string)) (unlock func(), err error) {
	if err := mkdirRoot(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("creating the folder of build lock %q: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening build lock %q: %w", path, err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("locking %q: %w", path, err)
		}
		if !told {
			progress(fmt.Sprintf("waiting for another build holding %s", path))
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for build lock %q: %w", path, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}
