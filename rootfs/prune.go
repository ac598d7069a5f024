package rootfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ErrPrivateKey is returned when a built tree still holds a private key after pruning.
var ErrPrivateKey = errors.New("private key in the built rootfs")

// pruneEmptied are the directories of a built tree whose contents go: what a sandbox
// must not see (root's and users' homes, logs naming the build host), what only apt
// needs (its lists and caches, 90 MB of a fresh tree), runtime folders the jail mounts
// its own over (/dev holds debootstrap's device nodes), and documentation.
var pruneEmptied = []string{
	"root",
	"home",
	"tmp",
	"var/tmp",
	"run",
	"dev",
	"var/cache",
	"var/lib/apt/lists",
	"var/log",
	"usr/share/man",
	"usr/share/info",
	"usr/share/locale",
	"usr/share/lintian",
}

// pruneGlobs are the files of a built tree that go: host keys and identifiers, and
// account files that the made-up passwd and group replace (shadow entries for users
// that no longer exist, and the "-" backups of the Debian originals).
var pruneGlobs = []string{
	"etc/ssh/ssh_host_*",
	"etc/machine-id",
	"var/lib/dbus/machine-id",
	"etc/shadow",
	"etc/shadow-",
	"etc/gshadow",
	"etc/gshadow-",
	"etc/passwd-",
	"etc/group-",
	"var/lib/dpkg/*-old",
	"debootstrap",
}

// docKept is the one file of each /usr/share/doc/<package> that stays: the license.
const docKept = "copyright"

// prune removes pruneEmptied's contents, pruneGlobs and the documentation but the
// copyright files from the tree at root.
func prune(root string) error {
	for _, rel := range pruneEmptied {
		if err := emptyDir(root, rel); err != nil {
			return err
		}
	}
	for _, g := range pruneGlobs {
		dir, err := realDir(root, path.Dir(g))
		if err != nil || dir == "" {
			if err != nil {
				return err
			}
			continue
		}
		matches, err := filepath.Glob(filepath.Join(dir, path.Base(g)))
		if err != nil {
			return err
		}
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
	}
	return pruneDocs(root)
}

func pruneDocs(root string) error {
	doc, err := realDir(root, "usr/share/doc")
	if err != nil || doc == "" {
		return err
	}
	pkgs, err := os.ReadDir(doc)
	if err != nil {
		return err
	}
	for _, p := range pkgs {
		if !p.IsDir() {
			// Links from one package's doc folder to another's stay; they are tiny.
			continue
		}
		files, err := os.ReadDir(filepath.Join(doc, p.Name()))
		if err != nil {
			return err
		}
		for _, f := range files {
			if f.Name() == docKept {
				continue
			}
			if err := os.RemoveAll(filepath.Join(doc, p.Name(), f.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// realDir returns root/rel when each of rel's components is a real directory, ""
// when one is missing, and an error when one is anything else, such as a symlink: brig
// writes and removes inside the tree only through paths that can't lead out of it.
func realDir(root, rel string) (string, error) {
	p := root
	for _, c := range strings.Split(path.Clean(rel), "/") {
		if c == "." || c == "" {
			continue
		}
		p = filepath.Join(p, c)
		fi, err := os.Lstat(p)
		if os.IsNotExist(err) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		if !fi.IsDir() {
			return "", fmt.Errorf("%s in the built tree is not a directory (%s)", strings.TrimPrefix(p, root), fi.Mode().Type())
		}
	}
	return p, nil
}

// emptyDir removes everything in root/rel, keeping the directory itself.
func emptyDir(root, rel string) error {
	dir, err := realDir(root, rel)
	if err != nil || dir == "" {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// writeBuiltEtc writes brig's made-up /etc files over the tree's, keeping the rest of
// the tree's /etc (its loader cache, its certificate bundle, its Python settings). The
// tree's files are removed first so that writing never follows a link.
func writeBuiltEtc(root string) error {
	for _, d := range []string{"etc", "proc", "dev", "tmp", "sandbox"} {
		if _, err := realDir(root, d); err != nil {
			return err
		}
	}
	etc := filepath.Join(root, "etc")
	for name := range etcFiles {
		if err := os.Remove(filepath.Join(etc, name)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return writeEtc(etc, nil, nil)
}

// privateKeyDirs are where a private key could sit in a fresh Debian tree.
var privateKeyDirs = []string{"etc", "root", "home"}

// noPrivateKeys fails with ErrPrivateKey if a file under privateKeyDirs holds a PEM
// private key: pruning removed the known places, and this catches a package that
// made one somewhere else.
func noPrivateKeys(root string) error {
	for _, d := range privateKeyDirs {
		dir, err := realDir(root, d)
		if err != nil || dir == "" {
			if err != nil {
				return err
			}
			continue
		}
		err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !e.Type().IsRegular() {
				return nil
			}
			fi, err := e.Info()
			if err != nil || fi.Size() > 1<<20 {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if bytes.Contains(b, []byte("PRIVATE KEY-----")) {
				return fmt.Errorf("%w: %s", ErrPrivateKey, strings.TrimPrefix(p, root))
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
