package supervisor

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// SocketMode is the API socket's file mode: owner root and the configured group.
const SocketMode = 0o660

// Listen makes the API socket at path, mode 0660, owned by root and by group
// (a name or a number; empty keeps root's group). A socket left by a service
// that is gone is replaced; one that still answers is an error, as is any other
// file at path.
func Listen(path, group string) (_ net.Listener, retErr error) {
	gid := -1
	if group != "" {
		var err error
		if gid, err = SocketGroupID(group); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating the socket's directory: %w", err)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	defer func() {
		if retErr != nil {
			ln.Close()
		}
	}()
	if err := os.Chmod(path, SocketMode); err != nil {
		return nil, fmt.Errorf("setting the mode of %s: %w", path, err)
	}
	if err := os.Lchown(path, 0, gid); err != nil {
		return nil, fmt.Errorf("setting the owner of %s: %w", path, err)
	}
	return ln, nil
}

// SocketGroupID is the gid of the socket's group: a gid, or a group's name.
func SocketGroupID(group string) (int, error) {
	if n, err := strconv.Atoi(group); err == nil && n >= 0 {
		return n, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, fmt.Errorf("socket group %q: %w (create it, or give a gid)", group, err)
	}
	return strconv.Atoi(g.Gid)
}

// CheckSocket reports, changing nothing, why Listen would refuse path: a
// file there that is not a socket, or a service that answers on it. brig
// serve asks before its start makes anything: a second service on a socket in
// use had made its state directory, its journal and its cgroup parent first
// (the operator probe of 2026-12-06).
func CheckSocket(path string) error {
	_, err := staleSocket(path)
	return err
}

func removeStaleSocket(path string) error {
	stale, err := staleSocket(path)
	if err != nil || !stale {
		return err
	}
	return os.Remove(path)
}

// staleSocket reports whether path holds a socket no one answers on, and
// errs where it holds anything else or a live one.
func staleSocket(path string) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if fi.Mode().Type() != os.ModeSocket {
		return false, fmt.Errorf("%s exists and is not a socket; remove it or choose another --socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return false, fmt.Errorf("%s answers: another brig serve is running there", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return false, fmt.Errorf("checking whether %s is in use: %w", path, err)
	}
	return true, nil
}
