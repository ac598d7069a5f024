package rootfs_test

import (
	"bufio"
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/brig-sandbox/brig/rootfs"
	"github.com/brig-sandbox/brig/rootfs/rootfstest"
)

// TestRealBuild builds (or reuses) the cached rootfs of each language with the host's
// Debian mirror and checks what a sandbox will find in it. The first run on a machine
// downloads and takes about two minutes; later runs only check.
func TestRealBuild(t *testing.T) {
	tests := []struct {
		lang     rootfs.Language
		interp   string
		versionR string
		foreign  []string // files of the other language that must be absent
		foreignP []string // and its packages
		run      []string // a program that exercises the interpreter's standard library
		runOut   string
	}{
		{
			lang:     rootfs.Python,
			interp:   "/usr/bin/python3",
			versionR: `^3\.\d+\.\d+$`,
			foreign:  []string{"/usr/bin/node", "/usr/bin/nodejs"},
			foreignP: []string{"nodejs", "libnode"},
			run: []string{"/usr/bin/python3", "-c", `import json, sqlite3, ssl, urllib.request, pwd, os
ctx = ssl.create_default_context()
print(json.dumps({"cas": ctx.cert_store_stats()["x509_ca"] > 100, "user": pwd.getpwuid(os.getuid()).pw_name}))`},
			runOut: `{"cas": true, "user": "nobody"}`,
		},
		{
			lang:     rootfs.JavaScript,
			interp:   "/usr/bin/node",
			versionR: `^\d+\.\d+\.\d+$`,
			foreign:  []string{"/usr/bin/python3", "/usr/bin/python"},
			foreignP: []string{"python3", "libpython3"},
			run: []string{"/usr/bin/node", "-e", `const os = require("os"), tls = require("tls"), crypto = require("crypto");
console.log(JSON.stringify({cas: tls.rootCertificates.length > 100, user: os.userInfo().username, sha: crypto.createHash("sha256").update("").digest("hex").slice(0, 8)}))`},
			runOut: `{"cas":true,"user":"nobody","sha":"e3b0c442"}`,
		},
	}
	for _, tt := range tests {
		t.Run(string(tt.lang), func(t *testing.T) {
			t.Parallel() // two debootstraps on a first run; a mirror serves both
			m := rootfstest.Ensure(t, tt.lang)
			dir := rootfstest.Dir(tt.lang)

			t.Run("manifest", func(t *testing.T) {
				if m.FormatVersion != rootfs.ManifestFormat || m.Language != tt.lang || m.Interpreter != tt.interp || m.Variant != "minbase" {
					t.Errorf("got %+v, want format %d, %s, %s, minbase", m, rootfs.ManifestFormat, tt.lang, tt.interp)
				}
				if !regexp.MustCompile(tt.versionR).MatchString(m.Version) {
					t.Errorf("got version %q, want one matching %s", m.Version, tt.versionR)
				}
				if m.Suite != hostCodename(t) {
					t.Errorf("got suite %q, want the host's %q", m.Suite, hostCodename(t))
				}
				if !strings.HasPrefix(m.Mirror, "http") || m.Created.IsZero() {
					t.Errorf("got mirror %q created %v, want the host's mirror and a time", m.Mirror, m.Created)
				}
				onDisk, err := rootfs.ReadManifest(dir)
				if err != nil || !reflect.DeepEqual(onDisk, m) {
					t.Errorf("ReadManifest: got %+v, %v; want %+v", onDisk, err, m)
				}
			})

			t.Run("provider", func(t *testing.T) {
				b, err := rootfs.OpenBuilt(map[rootfs.Language]string{tt.lang: dir})
				if err != nil {
					t.Fatal(err)
				}
				r, err := b.Root(tt.lang)
				if err != nil {
					t.Fatal(err)
				}
				if r.Lower != dir || r.Binds != nil || r.Interpreter != tt.interp || r.Version != m.Version {
					t.Errorf("got %+v, want lower %s, no binds, %s %s", r, dir, tt.interp, m.Version)
				}
			})

			t.Run("one language", func(t *testing.T) {
				for _, f := range tt.foreign {
					if _, err := os.Lstat(filepath.Join(dir, f)); !os.IsNotExist(err) {
						t.Errorf("%s: got %v, want it absent", f, err)
					}
				}
				for _, p := range installed(t, dir) {
					for _, bad := range tt.foreignP {
						if strings.HasPrefix(p, bad) {
							t.Errorf("package %s is installed", p)
						}
					}
				}
			})

			t.Run("interpreter runs chrooted", func(t *testing.T) {
				cmd := exec.Command(tt.run[0], tt.run[1:]...)
				cmd.Dir = "/"
				cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/sandbox", "LC_ALL=C.UTF-8"}
				cmd.SysProcAttr = &syscall.SysProcAttr{
					Chroot:     dir,
					Credential: &syscall.Credential{Uid: 65534, Gid: 65534, NoSetGroups: true},
				}
				out, err := cmd.CombinedOutput()
				if err != nil || strings.TrimSpace(string(out)) != tt.runOut {
					t.Errorf("got %q, %v; want %s", out, err, tt.runOut)
				}
			})

			t.Run("pruned", func(t *testing.T) {
				for _, d := range []string{"var/lib/apt/lists", "var/cache", "root", "home", "usr/share/man", "var/log", "dev"} {
					ents, err := os.ReadDir(filepath.Join(dir, d))
					if err != nil || len(ents) > 0 {
						t.Errorf("%s: got %d entries, %v; want it empty", d, len(ents), err)
					}
				}
				for _, f := range []string{"etc/shadow", "etc/gshadow", "etc/passwd-", "etc/machine-id", "debootstrap"} {
					if _, err := os.Lstat(filepath.Join(dir, f)); !os.IsNotExist(err) {
						t.Errorf("%s: got %v, want it absent", f, err)
					}
				}
				filepath.WalkDir(filepath.Join(dir, "usr/share/doc"), func(p string, e fs.DirEntry, err error) error {
					if err == nil && !e.IsDir() && e.Type().IsRegular() && e.Name() != "copyright" {
						t.Errorf("%s: want only copyright files in usr/share/doc", p)
						return filepath.SkipAll
					}
					return nil
				})
			})

			t.Run("etc", func(t *testing.T) {
				passwd, _ := os.ReadFile(filepath.Join(dir, "etc/passwd"))
				var names []string
				for _, l := range strings.Split(strings.TrimSpace(string(passwd)), "\n") {
					names = append(names, strings.SplitN(l, ":", 2)[0])
				}
				if !reflect.DeepEqual(names, []string{"root", "sandbox", "nobody"}) || !strings.Contains(string(passwd), "sandbox:x:1000:1000:") {
					t.Errorf("etc/passwd: got %q, want brig's root, sandbox (1000) and nobody", passwd)
				}
				if b, _ := os.ReadFile(filepath.Join(dir, "etc/resolv.conf")); !strings.HasPrefix(string(b), "nameserver 127.0.0.1\n") {
					t.Errorf("etc/resolv.conf: got %q, want brig's", b)
				}
				for _, f := range []string{"etc/ld.so.cache", "etc/ssl/certs/ca-certificates.crt"} {
					if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
						t.Errorf("%s: got %v, want the tree's own", f, err)
					}
				}
				fi, err := os.Stat(filepath.Join(dir, "sandbox"))
				if err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 || fi.Mode().Perm() != 0o755 {
					t.Errorf("sandbox: got %v, want it root's, 0755 (the init gives each run's copy to the run)", err)
				}
				if fi, err := os.Stat(filepath.Join(dir, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 {
					t.Errorf("tmp: got %v, want it sticky", err)
				}
			})

			t.Run("lower layer is root's", func(t *testing.T) {
				rootfs.CheckRootsOnly(t, dir)
				if err := rootfs.CheckLower(dir); err != nil {
					t.Error(err)
				}
			})

			t.Run("ensure again", func(t *testing.T) {
				var wg sync.WaitGroup
				got := make([]*rootfs.Manifest, 2)
				errs := make([]error, 2)
				for i := range got {
					wg.Add(1)
					go func() {
						defer wg.Done()
						got[i], errs[i] = rootfs.EnsureBuilt(context.Background(), rootfs.BuildOptions{Language: tt.lang, Dir: dir}, nil)
					}()
				}
				wg.Wait()
				for i := range got {
					if errs[i] != nil || !reflect.DeepEqual(got[i], m) {
						t.Errorf("caller %d: got %+v, %v; want the existing build %+v", i, got[i], errs[i], m)
					}
				}
			})

			t.Logf("%s rootfs: %s, %d MB", tt.lang, dir, treeSize(dir)>>20)
		})
	}
}

func hostCodename(t *testing.T) string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VERSION_CODENAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	t.Fatal("/etc/os-release has no VERSION_CODENAME")
	return ""
}

// installed lists the tree's installed packages from dpkg's status.
func installed(t *testing.T, dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "var/lib/dpkg/status"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "Package: "); ok {
			out = append(out, p)
		}
	}
	return out
}

// treeSize is the tree's size in bytes, counting each hard-linked file once.
func treeSize(dir string) int64 {
	var n int64
	seen := map[uint64]bool{}
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		if !seen[st.Ino] {
			seen[st.Ino] = true
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}
