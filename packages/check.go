package packages

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrBadLayer matches the error CheckLayer returns for a layer it refuses.
var ErrBadLayer = errors.New("layer refused")

// LayerError is an entry of a layer that CheckLayer refuses.
type LayerError struct {
	Path   string // relative to the layer
	Reason string
}

func (e *LayerError) Error() string {
	return fmt.Sprintf("checking layer: %s %s", e.Path, e.Reason)
}

func (e *LayerError) Is(target error) bool { return target == ErrBadLayer }

// maxSymlinkHops bounds how many links CheckLayer follows to resolve one, as
// the kernel's MAXSYMLINKS (40) does.
const maxSymlinkHops = 40

// CheckLayer refuses a layer (a *LayerError) that holds a setuid or setgid
// entry, a device, a fifo, a socket, a non-directory with more than one link
// (a hard link may be shared with a file outside the layer, which publishing
// would then chown), or a symlink that is absolute or whose target, resolved
// inside the layer, leaves it.
//
// Publishing runs it before it changes owners: chown clears the setuid and
// setgid bits of files, which would hide that the installer made one.
func CheckLayer(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("checking layer %s: %w", dir, err)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return fmt.Errorf("checking layer %s: %w", dir, err)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("checking layer %s: %w", dir, err)
		}
		if reason := badMode(fi); reason != "" {
			return &LayerError{Path: rel, Reason: reason}
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if reason := symlinkEscapes(dir, rel); reason != "" {
				return &LayerError{Path: rel, Reason: reason}
			}
		}
		return nil
	})
}

// badMode says what is wrong with an entry's type or mode bits, or "".
func badMode(fi fs.FileInfo) string {
	m := fi.Mode()
	switch {
	case m&fs.ModeSetuid != 0:
		return "is setuid"
	case m&fs.ModeSetgid != 0:
		return "is setgid"
	case m&fs.ModeDevice != 0:
		return "is a device"
	case m&fs.ModeNamedPipe != 0:
		return "is a fifo"
	case m&fs.ModeSocket != 0:
		return "is a socket"
	case m&fs.ModeIrregular != 0:
		return "is of an unknown type"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && !fi.IsDir() && st.Nlink > 1 {
		return fmt.Sprintf("has %d hard links", st.Nlink)
	}
	return ""
}

// symlinkEscapes resolves the symlink at rel inside root the way the kernel
// would, following the links it meets, and says why it is refused, or "".
//
// It is written here because checking the target alone, lexically, is not
// enough: with a -> "../x", a link "d/b" -> "a/../.." looks inside the layer
// lexically ("d/b/../a/../.." is ".") but leaves it once a is followed.
// filepath-securejoin, the library for this, clamps a path to the root rather
// than report that it would leave it.
func symlinkEscapes(root, rel string) string {
	// resolved holds the components walked so far, none of them a symlink;
	// pending, those left to walk.
	var resolved []string
	if d := filepath.Dir(rel); d != "." {
		resolved = strings.Split(d, string(filepath.Separator))
	}
	target, err := os.Readlink(filepath.Join(root, rel))
	if err != nil {
		return fmt.Sprintf("can't be read (%v)", err)
	}
	if filepath.IsAbs(target) {
		return fmt.Sprintf("points to the absolute path %q: links in a layer are relative", target)
	}
	pending := strings.Split(target, "/")
	for hops := 0; len(pending) > 0; {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(resolved) == 0 {
				return fmt.Sprintf("points to %q, outside the layer", target)
			}
			resolved = resolved[:len(resolved)-1]
			continue
		}
		next := filepath.Join(append([]string{root}, append(resolved, c)...)...)
		fi, err := os.Lstat(next)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			// A missing entry or a file: the rest is lexical from here.
			resolved = append(resolved, c)
			continue
		}
		if hops++; hops > maxSymlinkHops {
			return fmt.Sprintf("points to %q through more than %d links", target, maxSymlinkHops)
		}
		t, err := os.Readlink(next)
		if err != nil {
			return fmt.Sprintf("can't be resolved (%v)", err)
		}
		if filepath.IsAbs(t) {
			return fmt.Sprintf("points to %q through a link to the absolute path %q", target, t)
		}
		pending = append(strings.Split(t, "/"), pending...)
	}
	return ""
}
