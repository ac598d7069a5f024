package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Small helpers over cgroupfs files, on the per-run path. They read and write
// with plain open, read/write and close: os.Open would also register each
// kernfs file with the runtime's epoll (kernfs files are pollable) and
// deregister it on close, doubling the syscalls of a control file read. And
// they look for groups below a group through the directory's link count
// (kernfs keeps it at 2 + subdirectories) before listing it, since a run's
// group has none.

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// openSmall opens a control file, again when a signal interrupted the open,
// as os.Open does.
func openSmall(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// readSmall reads a whole control file.
func readSmall(path string) ([]byte, error) {
	fd, err := openSmall(path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// writeSmall writes data to a control file in one write, as cgroupfs wants,
// and writes it again when a signal interrupted it, as os.File's Write does:
// v1's memory.limit_in_bytes gives up with EINTR at once if the writing thread
// has a signal pending (mem_cgroup_resize_max), which in a Go process is any
// moment (the runtime preempts goroutines with SIGURG; the service gets a
// SIGCHLD for every run's end). Unretried, 1 of about 3,000 groups' limits
// failed so (BenchmarkCreateSetLimitsDelete), and with them the run.
func writeSmall(path string, data string) error {
	fd, err := openSmall(path, unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for {
		_, err := unix.Write(fd, []byte(data))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "write", Path: path, Err: err}
		}
		return nil
	}
}

// readInt reads a control file holding one integer, such as cpuacct.usage.
func readInt(path string) (int64, error) {
	b, err := readSmall(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parsing %q: %w", path, err)
	}
	return v, nil
}

// readKey reads the value of key from a flat-keyed file such as cgroup.events
// ("populated 1"). ok is false when the key is absent.
func readKey(path, key string) (v int64, ok bool, err error) {
	b, err := readSmall(path)
	if err != nil {
		return 0, false, err
	}
	for line := range bytes.Lines(b) {
		k, val, found := strings.Cut(strings.TrimSpace(string(line)), " ")
		if found && k == key {
			v, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return 0, false, fmt.Errorf("parsing %q in %q: %w", key, path, err)
			}
			return v, true, nil
		}
	}
	return 0, false, nil
}

// procsTree lists the processes in the group at dir and in every group below
// it. A group that does not exist holds none.
func procsTree(dir string) ([]int, error) {
	b, err := readSmall(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parsing %q: %w", filepath.Join(dir, "cgroup.procs"), err)
		}
		pids = append(pids, pid)
	}
	subs, err := subgroups(dir)
	if err != nil {
		return nil, err
	}
	for _, s := range subs {
		sub, err := procsTree(filepath.Join(dir, s))
		if err != nil {
			return nil, err
		}
		pids = append(pids, sub...)
	}
	return pids, nil
}

// subgroups lists the names of the groups directly below dir, none when dir
// does not exist.
func subgroups(dir string) ([]string, error) {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, &fs.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if st.Nlink <= 2 {
		return nil, nil
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// rmdirTree removes the group at dir and every group below it, deepest first.
// cgroupfs removes a group's control files with it, so rmdir is all it takes
// once the groups are empty. rmdir says EBUSY both for groups below and, for a
// moment after the last task left, for the kernel still releasing it; so the
// first rmdir is tried straight away, and on EBUSY the groups below are
// removed or the call retried after a short sleep. A group already gone is not
// an error.
func rmdirTree(dir string) error {
	delay := time.Millisecond
	for try := 0; ; try++ {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		// Up to about a second in all: a group whose last process has just died
		// stays busy until the kernel has finished its exit, which takes longer
		// on a loaded host (63 ms was seen to be too little with the CPUs busy).
		if !errors.Is(err, unix.EBUSY) || try == 10 {
			return fmt.Errorf("removing cgroup %q: %w", dir, err)
		}
		subs, err := subgroups(dir)
		if err != nil {
			return fmt.Errorf("listing %q: %w", dir, err)
		}
		for _, s := range subs {
			if err := rmdirTree(filepath.Join(dir, s)); err != nil {
				return err
			}
		}
		if len(subs) == 0 {
			time.Sleep(delay)
			delay *= 2
		}
	}
}

// pollUntil calls done every few milliseconds until it reports true, fails,
// or the deadline passes; it reports whether done became true.
func pollUntil(deadline time.Time, done func() (bool, error)) (bool, error) {
	delay := 500 * time.Microsecond
	for {
		ok, err := done()
		if ok || err != nil {
			return ok, err
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		time.Sleep(delay)
		delay = min(2*delay, 20*time.Millisecond)
	}
}
