package cgroup

import (
	"bufio"
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

// Small helpers over cgroupfs files. They use os.ReadDir, which takes entry
// types from getdents, rather than filepath.Walk, which would lstat every
// control file of every group.

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// readKey reads the value of key from a flat-keyed file such as cgroup.events
// ("populated 1"). ok is false when the key is absent.
func readKey(path, key string) (v int64, ok bool, err error) {
	b, err := os.ReadFile(path)
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
	f, err := os.Open(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("parsing %q: %w", f.Name(), err)
		}
		pids = append(pids, pid)
	}
	f.Close()
	if err := sc.Err(); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		if e.IsDir() {
			sub, err := procsTree(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, err
			}
			pids = append(pids, sub...)
		}
	}
	return pids, nil
}

// subgroups lists the names of the groups directly below dir.
func subgroups(dir string) ([]string, error) {
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
// once the groups are empty. The kernel can answer EBUSY for a moment after the
// last task left, so that is retried briefly. A group already gone is not an
// error.
func rmdirTree(dir string) error {
	subs, err := subgroups(dir)
	if err != nil {
		return fmt.Errorf("listing %q: %w", dir, err)
	}
	for _, s := range subs {
		if err := rmdirTree(filepath.Join(dir, s)); err != nil {
			return err
		}
	}
	delay := time.Millisecond
	for try := 0; ; try++ {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || try == 6 {
			return fmt.Errorf("removing cgroup %q: %w", dir, err)
		}
		time.Sleep(delay)
		delay *= 2
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
