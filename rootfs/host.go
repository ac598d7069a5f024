package rootfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Default interpreter paths of the host provider. They are Debian's: the python3
// first on PATH may be a pyenv shim under /root, which no sandbox may see.
const (
	DefaultPythonPath = "/usr/bin/python3"
	DefaultNodePath   = "/usr/bin/node"
)

// SandboxUID and SandboxGID are the identity the program has inside its run's user
// namespace, named "sandbox" by the made-up /etc/passwd. Nothing in a lower layer is
// owned by them: the init gives each run's own /sandbox (on the run's tmpfs) to the
// run's id when the run starts.
const (
	SandboxUID = 1000
	SandboxGID = 1000
)

// HostConfig configures the host provider.
type HostConfig struct {
	// Dir is where the skeleton is written; zero means <stateDir>/rootfs/host.
	Dir string
	// Python and Node are the interpreters' paths on the host; zero means
	// DefaultPythonPath and DefaultNodePath. Each must lie in a bound folder.
	Python, Node string
}

// Host is the provider that binds the host's system folders read-only.
type Host struct {
	dir string
	// ownParent is set when dir's parent is <stateDir>/rootfs, which brig owns.
	ownParent bool
	binds     []Bind
	view      *View // nil: each of binds is a mount of its own, for viewOff
	// viewOff says why there is no view, and what would give one.
	viewOff, viewHint string
	interp            map[Language]string

	mu       sync.Mutex
	versions map[Language]string // guarded by mu; filled on first use
}

// topDirs are the host's top-level system folders. On a merged-/usr host they are
// links into /usr and are recreated as the same links, so /bin/sh is /usr/bin/sh; on
// a host without merged /usr they are bound whole, as that host's /bin and /lib hold
// what its /usr/bin and /usr/lib do on the other.
var topDirs = []string{"/bin", "/sbin", "/lib", "/lib64"}

// usrParts are the parts of the host's /usr a run sees, and why each is there. Each
// folder a pattern matches on the host is shown read-only through an overlay, whose
// inodes are the sandbox's and not the host's: all of them through one, the View of
// /usr (usrView), or, where it can't be, each through one of its own (the jail's
// pid1.ReadOnlyView). Each overlay is a mount every sandbox makes and unmakes
// (BenchmarkBinds, on this project's 2-core Debian 12 host: the one view 0.13 to
// 0.14 ms per sandbox, 8 views 0.79 ms, 8 binds 0.21 to 0.24 ms, all of /usr as one
// bind 0.03 ms).
// A folder that holds only symlinks (/usr/lib64, the x86-64 loader's link), or whose
// links alone are needed (links), is copied into the skeleton as its links instead,
// which costs no mount.
//
// Everything else in /usr stays out: /usr/local (where a host keeps software of its
// own: databases, cloud tools, compilers), /usr/src, /usr/include, /usr/games,
// /usr/libexec, and the other folders of /usr/lib and /usr/share (a JVM, LLVM, a
// cloud SDK, a database's server). /usr/bin and /usr/sbin are bound whole because a
// program may spawn any basic tool (subprocess.run(["ls"]), a shell pipeline) and a
// list of single files would be one mount per file; a tool there whose files live in
// a folder left out (gcloud, git's helpers) does not work. Also left out:
// /usr/share/ca-certificates, since the made-up /etc/ssl/certs holds a copy of the
// bundle, not the per-CA links into that folder.
var usrParts = []struct {
	pattern, why string
	links        bool
}{
	{pattern: "/usr/bin", why: "the interpreters, /bin/sh (a link into it on a merged-/usr host) and the tools a program may spawn"},
	{pattern: "/usr/sbin", why: "ldconfig, which ctypes.util.find_library runs"},
	{pattern: "/usr/lib64", why: "the x86-64 program loader's link"},
	{pattern: "/usr/lib/*-linux-*", why: "the shared libraries, the loader and glibc's gconv modules (Debian's multiarch folder)"},
	{pattern: "/usr/lib/python3", why: "Debian's python3 dist-packages"},
	{pattern: "/usr/lib/python3.*", why: "Python's standard library, lib-dynload and test package"},
	{pattern: "/usr/lib/node_modules", why: "npm and corepack, as Node's own package installs them"},
	{pattern: "/usr/lib/node", why: "a folder on Node's global require path"},
	{pattern: "/usr/lib/nodejs", why: "Debian's Node modules"},
	{pattern: "/usr/share/nodejs", why: "Debian's Node modules"},
	{pattern: "/usr/lib/ssl", links: true, why: "OpenSSL's folder: its cert.pem, certs and openssl.cnf links lead to what the made-up /etc/ssl holds (its misc scripts stay out)"},
	{pattern: "/usr/lib/locale", why: "the compiled C.UTF-8 locale of every run's LANG: Debian's glibc has none built in, and setlocale(LC_ALL, \"\") fails without it"},
	{pattern: "/usr/share/zoneinfo", why: "time zones: /etc/localtime's target, Python's zoneinfo"},
	{pattern: "/usr/share/python-wheels", why: "the wheels Debian's ensurepip installs into a venv (python3 -m venv failed without them)"},
	{pattern: "/usr/lib/terminfo", why: "the terminal descriptions of the common terminals (curses, tput -T xterm)"},
	{pattern: "/usr/share/terminfo", why: "the terminal descriptions' other folder"},
}

// NewHost writes the skeleton (made-up /etc, mount points) under cfg.Dir or
// <stateDir>/rootfs/host, replacing any earlier one, and returns the provider.
func NewHost(stateDir string, cfg HostConfig) (*Host, error) {
	h := &Host{
		dir:      cfg.Dir,
		interp:   map[Language]string{Python: cfg.Python, JavaScript: cfg.Node},
		versions: map[Language]string{},
	}
	if h.dir == "" {
		h.dir = filepath.Join(stateDir, "rootfs", "host")
		h.ownParent = true
	}
	if h.interp[Python] == "" {
		h.interp[Python] = DefaultPythonPath
	}
	if h.interp[JavaScript] == "" {
		h.interp[JavaScript] = DefaultNodePath
	}
	if err := h.writeSkeleton(); err != nil {
		hint := ""
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EROFS) || errors.Is(err, unix.EDQUOT) {
			// The state directory's disk (the operator probe of 2026-12-06
			// got ENOSPC's words alone).
			hint = ": free the state directory's disk, or give --state-dir (state_dir) a writable folder on one with room"
		}
		return nil, fmt.Errorf("writing the host rootfs skeleton at %q: %w%s", h.dir, err, hint)
	}
	return h, nil
}

// Name implements Provider.
func (h *Host) Name() string { return "host" }

// Dir is the skeleton's directory.
func (h *Host) Dir() string { return h.dir }

// Root implements Provider.
func (h *Host) Root(lang Language) (*Root, error) {
	path, ok := h.interp[lang]
	if !ok {
		return nil, fmt.Errorf("%w language %q", ErrUnknownLanguage, lang)
	}
	if !h.visible(path) {
		return nil, fmt.Errorf("the %s interpreter %q is outside the folders the host rootfs binds (%v): configure one in a bound folder such as /usr/bin", lang, path, h.binds)
	}
	v, err := h.version(lang, path)
	if err != nil {
		return nil, err
	}
	return &Root{
		Language:    lang,
		Lower:       h.dir,
		Binds:       h.binds,
		View:        h.view,
		Interpreter: path,
		Args:        interpreterArgs(lang),
		Version:     v,
	}, nil
}

func (h *Host) visible(path string) bool {
	for _, b := range h.binds {
		if within(path, b.Target) {
			return true
		}
	}
	return false
}

// within reports whether the absolute path a is b or inside it.
func within(a, b string) bool {
	rel, err := filepath.Rel(b, a)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func (h *Host) version(lang Language, path string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v := h.versions[lang]; v != "" {
		return v, nil
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("running %s --version: %w (is %s installed? Hint: run `brig check`)", path, err, lang)
	}
	v := parseVersion(string(out))
	h.versions[lang] = v
	return v, nil
}

// writeSkeleton builds the lower layer in a temporary directory and renames it into
// place, so that a run never sees a half-written skeleton.
func (h *Host) writeSkeleton() (retErr error) {
	if err := mkdirRoot(filepath.Dir(h.dir)); err != nil {
		return err
	}
	if h.ownParent {
		// <state>/rootfs is brig's: a folder others could write would let them
		// swap the skeleton.
		if err := setOwnerMode(filepath.Dir(h.dir), dirMode); err != nil {
			return err
		}
	}
	removeStaleTemps(filepath.Dir(h.dir), ".host-")
	tmp, err := os.MkdirTemp(filepath.Dir(h.dir), ".host-")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			os.RemoveAll(tmp)
		}
	}()
	// MkdirTemp made it 0700; the skeleton's root is the root folder of every run.
	if err := setOwnerMode(tmp, dirMode); err != nil {
		return err
	}
	view, off, hint := usrView(tmp, h.dir)
	binds, err := hostBinds(tmp, view)
	if err != nil {
		return err
	}
	if err := writeLayout(tmp); err != nil {
		return err
	}
	shown := func(path string) bool {
		return slices.ContainsFunc(binds, func(b Bind) bool { return within(path, b.Target) })
	}
	if err := writeEtc(filepath.Join(tmp, "etc"), hostEtcCopies, shown); err != nil {
		return err
	}
	if err := CheckLower(tmp); err != nil {
		return err
	}
	h.binds, h.view, h.viewOff, h.viewHint = binds, view, off, hint
	// An identical skeleton stays: another brig process (the service, a `brig run
	// --local`) may be mounting it right now.
	if same, err := sameTree(tmp, h.dir); err == nil && same {
		return os.RemoveAll(tmp)
	}
	// One exchange, so that a run starting now finds the old skeleton or the new
	// one, never none.
	return publish(tmp, h.dir)
}

// staleTempAge is the age past which a temporary skeleton is a crash's
// leftover, not another brig process's skeleton being written (which takes
// milliseconds).
const staleTempAge = 10 * time.Minute

// removeStaleTemps removes the temporary folders named prefix* in dir that a
// brig killed while it wrote (or swapped) a skeleton left there; every start
// would otherwise leave them for good.
func removeStaleTemps(dir, prefix string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleTempAge {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// usrView is the View of /usr whose top layer the skeleton at tmp (to be
// published at dir) holds; or nil, why not and what would give one, where it
// can't be: where overlayfs would refuse the layers as overlapping (the
// skeleton inside /usr, or /usr inside it), or where the skeleton's
// filesystem keeps no trusted extended attributes. Then each part of /usr is
// a view of its own, which shows the same and costs each sandbox more
// (usrParts).
func usrView(tmp, dir string) (*View, string, string) {
	const usr = "/usr"
	for _, d := range []string{tmp, dir} {
		if within(d, usr) || within(usr, d) {
			return nil, fmt.Sprintf("the host rootfs's skeleton %s and /usr are one inside the other, which overlayfs refuses as layers of one mount", dir),
				"put the state directory (--state-dir, sandbox.state_dir) outside /usr"
		}
	}
	probe := filepath.Join(tmp, ".xattr")
	if err := mkdirRoot(probe); err != nil {
		return nil, err.Error(), ""
	}
	defer os.Remove(probe)
	if err := unix.Setxattr(probe, xattrOpaque, []byte("y"), 0); err != nil {
		return nil, fmt.Sprintf("the filesystem of the host rootfs's skeleton %s keeps no trusted extended attributes (%v)", dir, err),
			"put the state directory on a filesystem that does (ext4, xfs, btrfs, tmpfs)"
	}
	return &View{Source: usr, Target: usr}, "", ""
}

// ViewOff says why the host rootfs has no View of /usr, and what would give
// it one; "" when it has one. Without it each sandbox mounts each part of
// /usr as an overlay of its own: the same folders, at a higher cost.
func (h *Host) ViewOff() (why, hint string) { return h.viewOff, h.viewHint }

// The overlayfs attributes of a View's top layer.
const (
	xattrOpaque   = "trusted.overlay.opaque"
	xattrRedirect = "trusted.overlay.redirect"
)

// hostBinds makes, in the skeleton at tmp, the links and mount points of topDirs and
// usrParts, and returns the binds of the folders this host has. With view, the
// parts of /usr go into its top layer (View) instead: a folder redirected to
// the host's for each bound part, a part's links as links, every other folder
// opaque.
func hostBinds(tmp string, view *View) ([]Bind, error) {
	var binds []Bind
	for _, d := range topDirs {
		fi, err := os.Lstat(d)
		switch {
		case os.IsNotExist(err):
			continue
		case err != nil:
			return nil, err
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return nil, err
			}
			if err := os.Symlink(target, filepath.Join(tmp, d)); err != nil {
				return nil, err
			}
		case fi.IsDir():
			if err := mkdirRoot(filepath.Join(tmp, d)); err != nil {
				return nil, err
			}
			binds = append(binds, Bind{Source: d, Target: d})
		}
	}
	// Where each part of /usr goes: its mount point in the skeleton, or its
	// place in the view's top layer.
	place := func(m string) string { return filepath.Join(tmp, m) }
	if view != nil {
		top := filepath.Join(tmp, view.Target, ViewDir)
		if err := mkdirRoot(top); err != nil {
			return nil, err
		}
		place = func(m string) string { return filepath.Join(top, strings.TrimPrefix(m, view.Source)) }
	}
	for _, part := range usrParts {
		matches, err := filepath.Glob(part.pattern)
		if err != nil {
			return nil, err
		}
		for _, m := range matches {
			fi, err := os.Lstat(m)
			if err != nil || !fi.IsDir() {
				continue // a link or a file: only real folders are bound
			}
			dst := place(m)
			links, err := onlyLinks(m)
			if err != nil {
				return nil, err
			}
			if links || part.links {
				if err := copyLinks(m, dst); err != nil {
					return nil, err
				}
				continue
			}
			if err := mkdirRoot(dst); err != nil {
				return nil, err
			}
			if view != nil {
				// Its path in the host folder, from the layer's root.
				if err := unix.Setxattr(dst, xattrRedirect, []byte(strings.TrimPrefix(m, view.Source)), 0); err != nil {
					return nil, fmt.Errorf("redirecting %q to the host's: %w", dst, err)
				}
			}
			binds = append(binds, Bind{Source: m, Target: m})
		}
	}
	if view != nil {
		return binds, markOpaque(filepath.Join(tmp, view.Target, ViewDir))
	}
	return binds, nil
}

// markOpaque marks opaque every folder of the view's top layer at top that
// is not redirected: what the host has there never shows.
func markOpaque(top string) error {
	return filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if _, err := unix.Lgetxattr(p, xattrRedirect, nil); err == nil {
			return filepath.SkipDir // the host's folder, shown whole
		}
		return unix.Setxattr(p, xattrOpaque, []byte("y"), 0)
	})
}

// copyLinks makes dst a folder holding the symlinks of src (not what they lead to,
// and nothing else of src).
func copyLinks(src, dst string) error {
	if err := mkdirRoot(dst); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Type()&os.ModeSymlink == 0 {
			continue
		}
		if err := copyTree(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// onlyLinks reports whether dir holds nothing but symlinks (and at least one).
func onlyLinks(dir string) (bool, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		if e.Type()&os.ModeSymlink == 0 {
			return false, nil
		}
	}
	return len(ents) > 0, nil
}

// sameTree reports whether two small trees hold the same names, modes, owners,
// link targets and file contents.
func sameTree(a, b string) (bool, error) {
	describe := func(root string) (map[string]string, error) {
		m := map[string]string{}
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return err
			}
			desc := fmt.Sprintf("%o %d:%d", st.Mode, st.Uid, st.Gid)
			for _, x := range []string{xattrOpaque, xattrRedirect} {
				buf := make([]byte, 4096)
				if n, err := unix.Lgetxattr(p, x, buf); err == nil {
					desc += " " + x + "=" + string(buf[:n])
				}
			}
			switch {
			case d.Type()&os.ModeSymlink != 0:
				t, err := os.Readlink(p)
				if err != nil {
					return err
				}
				desc += " -> " + t
			case d.Type().IsRegular():
				body, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				// The time too: a copy's is the host file's (copyTree).
				desc += fmt.Sprintf(" %d.%09d %s", st.Mtim.Sec, st.Mtim.Nsec, body)
			}
			m[rel] = desc
			return nil
		})
		return m, err
	}
	ma, err := describe(a)
	if err != nil {
		return false, err
	}
	mb, err := describe(b)
	if err != nil {
		return false, err
	}
	if len(ma) != len(mb) {
		return false, nil
	}
	for k, v := range ma {
		if mb[k] != v {
			return false, nil
		}
	}
	return true, nil
}

// writeLayout creates the mount points and writable folders every root has, all
// owned by root: nothing in a lower layer belongs to a run's id.
func writeLayout(root string) error {
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		{"proc", 0o555},
		{"dev", 0o755},
		{"tmp", os.ModeSticky | 0o777}, // os.FileMode has its own sticky bit; 0o1777 would drop it
		// Where the FHS puts temporary files that programs (compilers, editors,
		// package tools) expect to find writable; on the run's upper layer as
		// the rest of the root.
		{"var", 0o755},
		{"var/tmp", os.ModeSticky | 0o777},
		// Root's, like the rest of the lower layer: the init gives the run's own
		// copy (on the run's tmpfs) to the run's id.
		{"sandbox", 0o755},
	} {
		p := filepath.Join(root, d.path)
		if err := mkdirRoot(p); err != nil {
			return err
		}
		if err := setOwnerMode(p, d.mode); err != nil {
			return err
		}
	}
	return nil
}

// hostEtcCopies are host files that are safe to show (public certificates, the
// loader's cache of /usr's libraries, time zone, Python's and OpenSSL's own
// settings, the public tables of services, protocols and MIME types, the
// release's name) and that programs need; everything else in the made-up /etc
// is written by brig, but for Debian's alternatives (copyAlternatives). The
// environment probe of 2026-12-06 found a service name ("https")
// unresolvable though nsswitch.conf names the files. A link is copied as a
// link, but for those in hostEtcResolved, whose target is not shown
// (os-release is a link into /usr/lib).
var hostEtcCopies = []string{
	"ssl/certs/ca-certificates.crt",
	"ssl/openssl.cnf",
	"ld.so.cache",
	"localtime",
	"timezone",
	"python3",
	"python3.11",
	"services",
	"protocols",
	"mime.types",
	"debian_version",
	"os-release",
}

// hostEtcResolved are the hostEtcCopies copied as the file a link leads to.
var hostEtcResolved = map[string]bool{"os-release": true}

// etcFiles are the made-up /etc: an unprivileged "sandbox" user at SandboxUID with
// its home at /sandbox, and name resolution through files first.
var etcFiles = map[string]string{
	"passwd":        fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:%d:%d:sandbox:/sandbox:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", SandboxUID, SandboxGID),
	"group":         fmt.Sprintf("root:x:0:\nsandbox:x:%d:\nnogroup:x:65534:\n", SandboxGID),
	"hosts":         "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	"resolv.conf":   "nameserver 127.0.0.1\noptions ndots:0 attempts:1 timeout:2\n",
	"nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n",
	"hostname":      "sandbox\n",
	"shells":        "/bin/sh\n/bin/bash\n",
}

// madeUpTime is the modification time of the files brig writes into a skeleton,
// fixed (as a reproducible build's are) so that an unchanged skeleton is
// identical to the one a service wrote before (sameTree), times included.
var madeUpTime = time.Unix(0, 0)

// writeEtc writes the made-up /etc into dir, copying copies (paths relative to /etc)
// from the host where they exist, and the alternatives whose programs shown
// says a run sees (none when shown is nil).
func writeEtc(dir string, copies []string, shown func(path string) bool) error {
	if err := mkdirRoot(dir); err != nil {
		return err
	}
	for name, body := range etcFiles {
		if err := writeFileRoot(filepath.Join(dir, name), []byte(body), 0o644, madeUpTime); err != nil {
			return err
		}
	}
	for _, rel := range copies {
		src := filepath.Join("/etc", rel)
		if hostEtcResolved[rel] {
			// A regular file, or nothing: a file the host's link does not
			// lead to (gone, looped, a folder) is not worth a failed start.
			resolved, err := filepath.EvalSymlinks(src)
			if err != nil {
				continue
			}
			if fi, err := os.Stat(resolved); err != nil || !fi.Mode().IsRegular() {
				continue
			}
			src = resolved
		}
		if err := copyTree(src, filepath.Join(dir, rel)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("copying /etc/%s: %w", rel, err)
		}
	}
	if shown != nil {
		return copyAlternatives("/etc/alternatives", filepath.Join(dir, "alternatives"), shown)
	}
	return nil
}

// copyAlternatives copies the links of Debian's alternatives folder src that
// lead to a program shown says a run sees: the links by which /usr/bin's awk,
// which and nodejs reach theirs, which the environment probe of 2026-12-06
// found "not found". The others stay out: their targets name the versions and
// places of software the view of /usr leaves out (a JVM, a database's
// server), and would dangle (the second review of 2026-12-06).
func copyAlternatives(src, dst string, shown func(path string) bool) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return nil // a host without alternatives
	}
	for _, e := range ents {
		if e.Type()&os.ModeSymlink == 0 {
			continue
		}
		target, err := os.Readlink(filepath.Join(src, e.Name()))
		if err != nil || !filepath.IsAbs(target) || !shown(target) {
			continue
		}
		if err := copyTree(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return fmt.Errorf("copying /etc/alternatives/%s: %w", e.Name(), err)
		}
	}
	return nil
}

// copyTree copies a file, a symlink or a directory of them. Symlinks are copied as
// links (a link into /usr keeps working inside the root).
func copyTree(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if err := mkdirRoot(filepath.Dir(dst)); err != nil {
		return err
	}
	// A copy is never writable by others nor setuid, whatever the host's file is.
	mode := fi.Mode().Perm() &^ 0o022
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		if err := os.Mkdir(dst, mode); err != nil && !os.IsExist(err) {
			return err
		}
		if err := setOwnerMode(dst, mode); err != nil {
			return err
		}
		ents, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := copyTree(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte("PRIVATE KEY")) {
			return fmt.Errorf("%s holds a private key; refusing to copy it into a sandbox", src)
		}
		// The host's modification time too: Python takes a module's cached
		// bytecode only if its source's size and mtime match, and Debian's
		// /usr/lib/python3.11/sitecustomize.py is a link to
		// /etc/python3.11/sitecustomize.py, whose cache in /usr was made from
		// the host's copy. With the copy's own time every interpreter compiled
		// it from source, and that first compile() builds the ast module's
		// classes: 1.5 to 1.9 ms of CPU a cold Python start.
		return writeFileRoot(dst, b, mode, fi.ModTime())
	}
	return nil
}

// HostArgv is the command line that runs script with the host's own interpreter
// for lang, as the host rootfs runs it by default: what a bare run of the same
// program executes, for benchmarks.
func HostArgv(lang Language, script string) []string {
	r := Root{Interpreter: DefaultPythonPath, Args: interpreterArgs(lang)}
	if lang == JavaScript {
		r.Interpreter = DefaultNodePath
	}
	return r.Argv(script)
}
