package rootfs

import (
	"bytes"
	"fmt"
	"golang.org/x/sys/unix"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Default interpreter paths of the host provider. They are Debian's: the python3
// first on PATH may be a pyenv shim under /root, which no sandbox may see.
const (
	DefaultPythonPath = "/usr/bin/python3"
	DefaultNodePath   = "/usr/bin/node"
)

// SandboxUID and SandboxGID are the identity the program runs as, and own /sandbox.
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
	dir    string
	binds  []Bind
	interp map[Language]string

	mu       sync.Mutex
	versions map[Language]string // guarded by mu; filled on first use
}

// systemDirs are the host folders an interpreter may need. On a merged-/usr host the
// four top-level ones are symlinks into /usr and are recreated as symlinks instead.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib64"}

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
	}
	if h.interp[Python] == "" {
		h.interp[Python] = DefaultPythonPath
	}
	if h.interp[JavaScript] == "" {
		h.interp[JavaScript] = DefaultNodePath
	}
	if err := h.writeSkeleton(); err != nil {
		return nil, fmt.Errorf("writing the host rootfs skeleton at %q: %w", h.dir, err)
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
		return nil, fmt.Errorf("%w %q", ErrUnknownLanguage, lang)
	}
	if !h.visible(path) {
		return nil, fmt.Errorf("the %s interpreter %q is outside the folders the host rootfs binds (%v): configure one under /usr", lang, path, h.binds)
	}
	v, err := h.version(lang, path)
	if err != nil {
		return nil, err
	}
	return &Root{
		Language:    lang,
		Lower:       h.dir,
		Binds:       h.binds,
		Interpreter: path,
		Args:        interpreterArgs(lang),
		Version:     v,
	}, nil
}

func (h *Host) visible(path string) bool {
	for _, b := range h.binds {
		if rel, err := filepath.Rel(b.Target, path); err == nil && rel != ".." && !filepath.IsAbs(rel) && (len(rel) < 3 || rel[:3] != "../") {
			return true
		}
	}
	return false
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
	if err := os.MkdirAll(filepath.Dir(h.dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(h.dir), ".host-")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	h.binds = nil
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case os.IsNotExist(err):
			continue
		case err != nil:
			return err
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(tmp, d)); err != nil {
				return err
			}
		case fi.IsDir():
			if err := os.Mkdir(filepath.Join(tmp, d), 0o755); err != nil {
				return err
			}
			h.binds = append(h.binds, Bind{Source: d, Target: d})
		}
	}
	if err := writeLayout(tmp); err != nil {
		return err
	}
	if err := writeEtc(filepath.Join(tmp, "etc"), hostEtcCopies); err != nil {
		return err
	}
	// An identical skeleton stays: another brig process (the service, a `brig run
	// --local`) may be mounting it right now.
	if same, err := sameTree(tmp, h.dir); err == nil && same {
		return os.RemoveAll(tmp)
	}
	// One exchange, so that a run starting now finds the old skeleton or the new
	// one, never none.
	return publish(tmp, h.dir)
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
				desc += " " + string(body)
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

// writeLayout creates the mount points and writable folders every root has.
func writeLayout(root string) error {
	for _, d := range []struct {
		path string
		mode os.FileMode
		uid  int
	}{
		{"proc", 0o555, 0},
		{"dev", 0o755, 0},
		{"tmp", os.ModeSticky | 0o777, 0}, // os.FileMode has its own sticky bit; 0o1777 would drop it
		{"sandbox", 0o755, SandboxUID},
	} {
		p := filepath.Join(root, d.path)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
		if err := os.Lchown(p, d.uid, d.uid); err != nil {
			return err
		}
	}
	return nil
}

// hostEtcCopies are host files that are safe to show (public certificates, the
// loader's cache of /usr's libraries, time zone, Python's and OpenSSL's own settings)
// and that interpreters need; everything else in the made-up /etc is written by brig.
var hostEtcCopies = []string{
	"ssl/certs/ca-certificates.crt",
	"ssl/openssl.cnf",
	"ld.so.cache",
	"localtime",
	"python3",
	"python3.11",
}

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

// writeEtc writes the made-up /etc into dir, copying copies (paths relative to /etc)
// from the host where they exist.
func writeEtc(dir string, copies []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, body := range etcFiles {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	for _, rel := range copies {
		if err := copyTree(filepath.Join("/etc", rel), filepath.Join(dir, rel)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("copying /etc/%s: %w", rel, err)
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
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		if err := os.MkdirAll(dst, fi.Mode().Perm()); err != nil {
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
		return os.WriteFile(dst, b, fi.Mode().Perm())
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
