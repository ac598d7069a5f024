// Package pathwalk resolves a path one component at a time, as the kernel
// does, for callers that must see each folder and link on the way: the
// rootfs, whose links resolve inside its root; and safedir, which checks who
// may change each.
package pathwalk

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinks bounds the links followed, as the kernel's 40.
const maxLinks = 40

// Resolve returns the host path that p names inside the tree at root ("/"
// for the host's own), following links as the kernel would after
// chroot(root): an absolute link target starts again at root, and ".." never
// climbs above it. visit, when not nil, is called for each component passed,
// with its path inside root, its Lstat and whether components follow it (a
// link's target's components among them); an error it returns ends the walk.
func Resolve(root, p string, visit func(name string, st *unix.Stat_t, more bool) error) (string, error) {
	links := 0
	resolved := "/" // inside the root, without links
	rest := strings.Split(strings.TrimPrefix(path.Clean("/"+p), "/"), "/")
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			resolved = path.Dir(resolved)
			continue
		}
		next := path.Join(resolved, c)
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(root, next), &st); err != nil {
			return "", &os.PathError{Op: "lstat", Path: filepath.Join(root, next), Err: err}
		}
		link := st.Mode&unix.S_IFMT == unix.S_IFLNK
		if visit != nil {
			if err := visit(next, &st, link || len(rest) > 0); err != nil {
				return "", err
			}
		}
		if !link {
			resolved = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("too many levels of symbolic links at %s", next)
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			resolved = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return filepath.Join(root, resolved), nil
}
