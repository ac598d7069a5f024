package rootfs

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// fakeVersions are what the test binary prints when it runs as a fake interpreter
// inside a fake built tree (see TestMain).
var fakeVersions = map[string]string{
	"python3": "Python 3.99.1",
	"node":    "v99.2.3",
}

// TestMain lets the test binary stand in for an interpreter: copied into a fake tree
// as python3.11 (reached through the python3 link) or node, it prints a version.
func TestMain(m *testing.M) {
	if v, ok := fakeVersions[filepath.Base(os.Args[0])]; ok && len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println(v)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestBuildOptionsValidate(t *testing.T) {
	cwd, _ := os.Getwd()
	tests := []struct {
		name    string
		opts    BuildOptions
		wantDir string
		wantErr string
	}{
		{"ok", BuildOptions{Language: Python, Dir: "/var/lib/brig/rootfs/python"}, "/var/lib/brig/rootfs/python", ""},
		{"relative dir made absolute", BuildOptions{Language: JavaScript, Dir: "js/"}, filepath.Join(cwd, "js"), ""},
		{"mirror and suite", BuildOptions{Language: Python, Dir: "/x", Mirror: "https://mirror.test/debian", Suite: "trixie"}, "/x", ""},
		{"unknown language", BuildOptions{Language: "ruby", Dir: "/x"}, "", "unknown language"},
		{"no dir", BuildOptions{Language: Python}, "", "no rootfs directory"},
		{"root dir", BuildOptions{Language: Python, Dir: "/../"}, "", "can't be /"},
		{"glob in the name", BuildOptions{Language: Python, Dir: "/x/py*"}, "", "glob character"},
		{"mirror scheme", BuildOptions{Language: Python, Dir: "/x", Mirror: "ftp://mirror.test/debian"}, "", "only http, https and file"},
		{"mirror without host", BuildOptions{Language: Python, Dir: "/x", Mirror: "http:///debian"}, "", "no host"},
		{"suite with a shell word", BuildOptions{Language: Python, Dir: "/x", Suite: "bookworm;reboot"}, "", "not a Debian release name"},
		{"missing keyring", BuildOptions{Language: Python, Dir: "/x", Keyring: "/nonexistent.gpg"}, "", "keyring"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			err := o.validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("got %v, want an error saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.Dir != tt.wantDir {
				t.Errorf("got dir %q, want %q", o.Dir, tt.wantDir)
			}
		})
	}
}

func TestDebootstrapArgs(t *testing.T) {
	tests := []struct {
		name string
		opts BuildOptions
		want string
	}{
		{
			"python",
			BuildOptions{Language: Python, Suite: "bookworm", Mirror: "http://mirror.test/debian"},
			"--variant=minbase --components=main --include=python3,ca-certificates --force-check-gpg bookworm /t http://mirror.test/debian",
		},
		{
			"javascript with keyring",
			BuildOptions{Language: JavaScript, Suite: "trixie", Mirror: "http://mirror.test/debian", Keyring: "/k.gpg"},
			"--variant=minbase --components=main --include=nodejs,ca-certificates --force-check-gpg --keyring=/k.gpg trixie /t http://mirror.test/debian",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(debootstrapArgs(tt.opts, "/t"), " "); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDebootstrapEnv(t *testing.T) {
	got := debootstrapEnv([]string{"HOME=/root", "PATH=/home/u/bin", "LANG=de_DE.UTF-8", "http_proxy=http://proxy.test:3128"})
	want := []string{"HOME=/root", "http_proxy=http://proxy.test:3128", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestLineWriter(t *testing.T) {
	var out bytes.Buffer
	lw := &lineWriter{w: &out, keep: 2}
	for _, chunk := range []string{"I: Retrieving", " Release\r\nI: Valid", "ating\nW: slow\nE: gone"} {
		lw.Write([]byte(chunk))
	}
	if got, want := out.String(), "I: Retrieving Release\nI: Validating\nW: slow\n"; got != want {
		t.Errorf("before flush: got %q, want %q", got, want)
	}
	lw.flush()
	if got, want := out.String(), "I: Retrieving Release\nI: Validating\nW: slow\nE: gone\n"; got != want {
		t.Errorf("after flush: got %q, want %q", got, want)
	}
	if got, want := lw.tail(), "W: slow\nE: gone"; got != want {
		t.Errorf("tail: got %q, want %q", got, want)
	}
}

// debianTree writes what a fresh debootstrap leaves that prune must remove or keep.
func debianTree(t *testing.T, root string) {
	t.Helper()
	writeFiles(t, root, [][2]string{
		{"root/.bashrc", "# root's\n"},
		{"root/.ssh/id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY-----\n"},
		{"home/user/notes", "x"},
		{"var/lib/apt/lists/mirror_dists_bookworm_InRelease", "x"},
		{"var/cache/apt/pkgcache.bin", "x"},
		{"var/cache/debconf/config.dat", "x"},
		{"var/log/dpkg.log", "x"},
		{"usr/share/doc/python3/copyright", "license"},
		{"usr/share/doc/python3/changelog.Debian.gz", "x"},
		{"usr/share/man/man1/python3.1.gz", "x"},
		{"usr/share/locale/de/LC_MESSAGES/dpkg.mo", "x"},
		{"etc/ssh/ssh_host_ed25519_key", "-----BEGIN OPENSSH PRIVATE KEY-----\n"},
		{"etc/ssh/ssh_config", "Host *\n"},
		{"etc/shadow", "root:*:19000:0:99999:7:::\n"},
		{"etc/passwd", "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"},
		{"etc/passwd-", "root:x:0:0:root:/root:/bin/bash\n"},
		{"etc/machine-id", "0123456789abcdef\n"},
		{"etc/ld.so.cache", "the tree's own"},
		{"etc/ssl/certs/ca-certificates.crt", "-----BEGIN CERTIFICATE-----\n"},
		{"etc/resolv.conf", "nameserver 10.0.0.1\n"},
		{"dev/null", ""},
		{"tmp/debootstrap-leftover", "x"},
		{"var/lib/dpkg/status", "Package: python3\nStatus: install ok installed\n"},
		{"var/lib/dpkg/status-old", "x"},
		{"debootstrap/debootstrap.log", "x"},
	})
}

func TestPrune(t *testing.T) {
	testutil.RequireRoot(t) // writeBuiltEtc makes its files root's
	root := t.TempDir()
	debianTree(t, root)
	if err := prune(root); err != nil {
		t.Fatal(err)
	}
	if err := writeBuiltEtc(root); err != nil {
		t.Fatal(err)
	}
	gone := []string{
		"root/.bashrc", "root/.ssh", "home/user", "var/lib/apt/lists/mirror_dists_bookworm_InRelease",
		"var/cache/apt", "var/cache/debconf", "var/log/dpkg.log", "usr/share/doc/python3/changelog.Debian.gz",
		"usr/share/man/man1", "usr/share/locale/de", "etc/ssh/ssh_host_ed25519_key", "etc/shadow", "etc/passwd-",
		"etc/machine-id", "dev/null", "tmp/debootstrap-leftover", "var/lib/dpkg/status-old", "debootstrap",
	}
	for _, p := range gone {
		if _, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("%s: got %v, want it removed", p, err)
		}
	}
	kept := map[string]string{
		"usr/share/doc/python3/copyright":   "license",
		"etc/ssh/ssh_config":                "Host *\n",
		"etc/ld.so.cache":                   "the tree's own",
		"etc/ssl/certs/ca-certificates.crt": "-----BEGIN CERTIFICATE-----\n",
		"var/lib/dpkg/status":               "Package: python3\nStatus: install ok installed\n",
		"etc/passwd":                        etcFiles["passwd"],
		"etc/group":                         etcFiles["group"],
		"etc/resolv.conf":                   etcFiles["resolv.conf"],
		"etc/hosts":                         etcFiles["hosts"],
		"etc/nsswitch.conf":                 etcFiles["nsswitch.conf"],
	}
	for p, want := range kept {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || string(b) != want {
			t.Errorf("%s: got %q, %v; want %q", p, b, err, want)
		}
	}
	for _, d := range []string{"root", "var/cache", "var/lib/apt/lists", "dev", "tmp"} {
		if fi, err := os.Stat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			t.Errorf("%s: got %v, want the emptied directory kept", d, err)
		}
	}
	if err := noPrivateKeys(root); err != nil {
		t.Errorf("after pruning: got %v, want no private key", err)
	}
}

func TestPruneStaysInTheTree(t *testing.T) {
	tests := []struct {
		name string
		link string // a path in the tree made a link to a directory outside it
		run  func(root string) error
	}{
		{"emptied folder is a link", "var/cache", prune},
		{"parent of an emptied folder is a link", "usr/share", prune},
		{"parent of a pruned file is a link", "etc/ssh", prune},
		{"etc is a link", "etc", writeBuiltEtc},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, outside := t.TempDir(), t.TempDir()
			writeFiles(t, outside, [][2]string{{"keep", "x"}, {"ssh_host_rsa_key", "x"}, {"passwd", "host's"}, {"man/x", "x"}})
			p := filepath.Join(root, tt.link)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.Symlink(outside, p); err != nil {
				t.Fatal(err)
			}
			if err := tt.run(root); err == nil {
				t.Error("got no error, want one refusing the link")
			}
			for _, f := range []string{"keep", "ssh_host_rsa_key", "passwd", "man/x"} {
				if _, err := os.Stat(filepath.Join(outside, f)); err != nil {
					t.Errorf("outside the tree, %s: got %v, want it untouched", f, err)
				}
			}
		})
	}
}

func TestWriteBuiltEtcReplacesLinks(t *testing.T) {
	testutil.RequireRoot(t) // writeBuiltEtc makes its files root's
	root, outside := t.TempDir(), t.TempDir()
	writeFiles(t, outside, [][2]string{{"passwd", "host's\n"}})
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	if err := os.Symlink(filepath.Join(outside, "passwd"), filepath.Join(root, "etc/passwd")); err != nil {
		t.Fatal(err)
	}
	if err := writeBuiltEtc(root); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "passwd")); string(b) != "host's\n" {
		t.Errorf("the link's target: got %q, want it untouched", b)
	}
	fi, err := os.Lstat(filepath.Join(root, "etc/passwd"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Errorf("etc/passwd: got %v, %v; want a regular file", fi, err)
	}
}

func TestNoPrivateKeys(t *testing.T) {
	tests := []struct {
		name, path, body string
		wantErr          bool
	}{
		{"certificate", "etc/ssl/certs/x.pem", "-----BEGIN CERTIFICATE-----\n", false},
		{"pem key in etc", "etc/ssl/private/x.key", "-----BEGIN PRIVATE KEY-----\n", true},
		{"rsa key in root", "root/key", "-----BEGIN RSA PRIVATE KEY-----\n", true},
		{"openssh key in home", "home/u/.ssh/id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY-----\n", true},
		{"outside the checked folders", "usr/share/doc/x/example.key", "-----BEGIN PRIVATE KEY-----\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, [][2]string{{tt.path, tt.body}})
			err := noPrivateKeys(root)
			if got := errors.Is(err, ErrPrivateKey); got != tt.wantErr {
				t.Errorf("got %v, want ErrPrivateKey: %v", err, tt.wantErr)
			}
		})
	}
}

func TestPublish(t *testing.T) {
	parent := t.TempDir()
	dst := filepath.Join(parent, "python")
	mk := func(gen string) string {
		tmp, err := os.MkdirTemp(parent, ".python.build-")
		if err != nil {
			t.Fatal(err)
		}
		writeFiles(t, tmp, [][2]string{{ManifestName, gen}, {"usr/bin/python3", gen}})
		return tmp
	}
	if err := publish(mk("1"), dst); err != nil {
		t.Fatalf("first publish: %v", err)
	}
	// A reader of dst must always find a whole build while it is replaced.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var missing int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := os.Stat(filepath.Join(dst, ManifestName)); err != nil {
				missing++
			}
		}
	}()
	for i := 2; i <= 50; i++ {
		if err := publish(mk(fmt.Sprint(i)), dst); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	if missing > 0 {
		t.Errorf("a reader found no manifest %d times, want 0", missing)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, ManifestName)); string(b) != "50" {
		t.Errorf("got build %q, want 50", b)
	}
	ents, _ := os.ReadDir(parent)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("got %v in the parent, want only python", names)
	}
}

func TestLockBuild(t *testing.T) {
	p := filepath.Join(t.TempDir(), "python.lock")
	nop := func(string) {}
	unlock, err := lockBuild(context.Background(), p, nop)
	if err != nil {
		t.Fatal(err)
	}
	var said []string
	ctx, cancel := context.WithTimeout(context.Background(), 3*lockPoll)
	defer cancel()
	if _, err := lockBuild(ctx, p, func(s string) { said = append(said, s) }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("while held: got %v, want context.DeadlineExceeded", err)
	}
	if len(said) != 1 || !strings.Contains(said[0], "waiting for another build") {
		t.Errorf("got progress %q, want one line saying it waits", said)
	}
	done := make(chan error, 1)
	go func() {
		u, err := lockBuild(context.Background(), p, nop)
		if err == nil {
			u()
		}
		done <- err
	}()
	time.Sleep(lockPoll / 2)
	unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after unlock: got %v, want the lock", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("after unlock: still waiting after 5s")
	}

	// Builders that come and go, each removing the file at its unlock, are
	// never two at once, and leave no file.
	var holders, overlaps atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				u, err := lockBuild(context.Background(), p, nop)
				if err != nil {
					t.Error(err)
					return
				}
				if holders.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(10 * time.Millisecond)
				holders.Add(-1)
				u()
			}
		}()
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Errorf("got %d times a builder took the lock while another held it, want none", n)
	}
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the lock file after the last unlock: got %v, want it removed", err)
	}
	// A builder that opened the file just before its holder removed it must
	// not keep the lock it then gets on the removed file.
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !samePath(f, p) {
		t.Error("samePath: got false for the file the path names")
	}
	os.Remove(p)
	if samePath(f, p) {
		t.Error("samePath: got true for a removed file")
	}
	os.WriteFile(p, nil, 0o600)
	if samePath(f, p) {
		t.Error("samePath: got true for a removed file whose path names a new one")
	}
}

func TestEnsureBuiltReusesValidBuild(t *testing.T) {
	// A valid build is root's alone (CheckLower), which only root can make.
	testutil.RequireRoot(t)
	dir := fakeBuilt(t, Python)
	want := fakeManifest(Python)
	for _, suite := range []string{"", "bookworm"} {
		// A valid build is returned before anything that needs root or the network.
		got, err := EnsureBuilt(context.Background(), BuildOptions{Language: Python, Dir: dir, Suite: suite}, nil)
		if err != nil {
			t.Fatalf("suite %q: %v", suite, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("suite %q: got %+v, want %+v", suite, got, want)
		}
	}
}

// fakeDebootstrap puts a debootstrap on PATH that records its arguments in
// <dir>/args, prints progress, and runs body with $target set to the target and $seed
// to a tree holding a fake python3.11 (see seedInterpreter).
func fakeDebootstrap(t *testing.T, body string) (argsFile string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	seed := seedInterpreter(t, self)
	bin := t.TempDir()
	argsFile = filepath.Join(bin, "args")
	script := fmt.Sprintf(`#!/bin/sh
set -e
echo "$@" > %q
target=$(echo "$@" | awk '{print $(NF-1)}')
seed=%q
echo "I: Retrieving InRelease"
echo "I: Checking Release signature" >&2
%s
`, argsFile, seed, body)
	if err := os.WriteFile(filepath.Join(bin, "debootstrap"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":/usr/sbin:/usr/bin:/sbin:/bin")
	return argsFile
}

// seedInterpreter copies the test binary, which prints a version when run as python3
// or node (see TestMain), into a seed tree at usr/bin/python3.11, with the loader and
// libraries it needs when it is dynamically linked (as -race makes it), at the paths
// the loader looks in without an ld.so.cache.
func seedInterpreter(t *testing.T, self string) string {
	t.Helper()
	seed := t.TempDir()
	copyFile := func(src, dst string) {
		t.Helper()
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(seed, filepath.Dir(dst)), 0o755)
		if err := os.WriteFile(filepath.Join(seed, dst), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(self, "/usr/bin/python3.11")
	f, err := elf.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			loader := strings.TrimRight(string(b), "\x00")
			copyFile(loader, loader)
		}
	}
	libs, _ := f.ImportedLibraries()
	dirs, _ := filepath.Glob("/usr/lib/*-linux-gnu")
	dirs = append(dirs, "/usr/lib64", "/usr/lib")
	for _, lib := range libs {
		found := false
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
				copyFile(filepath.Join(d, lib), filepath.Join(d, lib))
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("the test binary needs %s, found in none of %v", lib, dirs)
		}
	}
	return seed
}

// fakePythonTree is the shell that makes a fake debootstrap's tree for Python.
const fakePythonTree = `
mkdir -p "$target/usr/bin" "$target/var/lib/dpkg" "$target/etc/ssh" "$target/root" "$target/var/cache/apt" "$target/var/lib/apt/lists" "$target/dev" "$target/proc" "$target/tmp"
cp -a "$seed/." "$target/"
ln -s python3.11 "$target/usr/bin/python3"
ln -s usr/bin "$target/bin"
printf 'Package: python3\nStatus: install ok installed\n\n' > "$target/var/lib/dpkg/status"
echo "-----BEGIN OPENSSH PRIVATE KEY-----" > "$target/etc/ssh/ssh_host_ed25519_key"
echo "daemon:x:1:1::/:/bin/false" > "$target/etc/passwd"
echo x > "$target/root/.bash_history"
echo x > "$target/var/cache/apt/pkgcache.bin"
echo x > "$target/var/lib/apt/lists/InRelease"
: > "$target/dev/null"
echo "I: Base system installed successfully."
`

func TestBuildWithFakeDebootstrap(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CheckLeaks(t)
	argsFile := fakeDebootstrap(t, fakePythonTree)
	parent := t.TempDir()
	dir := filepath.Join(parent, "python")
	var progress bytes.Buffer
	opts := BuildOptions{Language: Python, Dir: dir, Suite: "bookworm", Mirror: "http://mirror.test/debian"}

	for round := 1; round <= 2; round++ { // the second replaces the first
		progress.Reset()
		m, err := Build(context.Background(), opts, &progress)
		if err != nil {
			t.Fatalf("round %d: %v\nprogress:\n%s", round, err, progress.String())
		}
		if m.Version != "3.99.1" || m.Interpreter != "/usr/bin/python3" || m.Suite != "bookworm" || m.Mirror != opts.Mirror || m.Variant != "minbase" || m.Language != Python {
			t.Errorf("round %d: got manifest %+v", round, m)
		}
		for _, want := range []string{"I: Retrieving InRelease\n", "I: Checking Release signature\n", "I: Base system installed successfully.\n"} {
			if !strings.Contains(progress.String(), want) {
				t.Errorf("round %d: progress has no %q:\n%s", round, want, progress.String())
			}
		}
		args, _ := os.ReadFile(argsFile)
		if !strings.HasPrefix(string(args), "--variant=minbase --components=main --include=python3,ca-certificates --force-check-gpg bookworm "+filepath.Join(parent, ".python.build-")) {
			t.Errorf("round %d: debootstrap got %q", round, args)
		}
		b, err := OpenBuilt(map[Language]string{Python: dir})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if r, _ := b.Root(Python); r.Version != "3.99.1" || r.Lower != dir || r.Binds != nil {
			t.Errorf("round %d: got root %+v", round, r)
		}
	}
	for _, p := range []string{"etc/ssh/ssh_host_ed25519_key", "root/.bash_history", "var/cache/apt", "var/lib/apt/lists/InRelease", "dev/null"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Errorf("%s: got %v, want it removed", p, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "etc/passwd")); string(b) != etcFiles["passwd"] {
		t.Errorf("etc/passwd: got %q, want brig's", b)
	}
	checkLayout(t, dir)
	checkRootsOnly(t, dir)
	ents, _ := os.ReadDir(parent)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "python" {
		t.Errorf("got %v beside the build, want [python]: its lock file removed", names)
	}
}

func TestBuildFailureLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	tests := []struct {
		name    string
		body    string
		cancel  time.Duration // cancel the build after this long; zero: don't
		wantErr error
		wantIn  string
	}{
		{
			name:   "debootstrap fails",
			body:   `mkdir -p "$target/debootstrap"; echo "bad signature on InRelease" > "$target/debootstrap/debootstrap.log"; echo "E: Release signed by unknown key" >&2; exit 1`,
			wantIn: "E: Release signed by unknown key",
		},
		{
			name:    "tree holds both languages",
			body:    fakePythonTree + `printf 'Package: nodejs\nStatus: install ok installed\n' >> "$target/var/lib/dpkg/status"`,
			wantErr: ErrForeignInterpreter,
		},
		{
			name:   "no interpreter",
			body:   `mkdir -p "$target/var/lib/dpkg"; : > "$target/var/lib/dpkg/status"`,
			wantIn: "no /usr/bin/python3",
		},
		{
			name:    "cancelled",
			body:    `mkdir -p "$target/var"; sleep 60 & wait`,
			cancel:  500 * time.Millisecond,
			wantErr: context.Canceled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testutil.CheckLeaks(t)
			fakeDebootstrap(t, tt.body)
			parent := t.TempDir()
			dir := filepath.Join(parent, "python")
			// An older build stays in place when a new one fails.
			old := fakeBuilt(t, Python)
			if err := os.Rename(old, dir); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel > 0 {
				time.AfterFunc(tt.cancel, cancel)
			}
			start := time.Now()
			_, err := Build(ctx, BuildOptions{Language: Python, Dir: dir, Suite: "bookworm", Mirror: "http://mirror.test/debian"}, nil)
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || !strings.Contains(err.Error(), tt.wantIn) {
				t.Fatalf("got %v, want %v saying %q", err, tt.wantErr, tt.wantIn)
			}
			if tt.cancel > 0 && time.Since(start) > 10*time.Second {
				t.Errorf("a cancelled build took %s to return", time.Since(start))
			}
			if m, err := ReadManifest(dir); err != nil || !reflect.DeepEqual(m, fakeManifest(Python)) {
				t.Errorf("the older build: got %+v, %v; want it untouched", m, err)
			}
			ents, _ := os.ReadDir(parent)
			for _, e := range ents {
				if strings.Contains(e.Name(), ".build-") {
					t.Errorf("left behind %s", e.Name())
				}
			}
		})
	}
}

// checkLayout checks the mount points and writable folders every root has.
func checkLayout(t *testing.T, root string) {
	t.Helper()
	tests := []struct {
		path string
		mode os.FileMode
		uid  uint32
	}{
		{"proc", 0o555 | os.ModeDir, 0},
		{"dev", 0o755 | os.ModeDir, 0},
		{"tmp", 0o777 | os.ModeDir | os.ModeSticky, 0},
		// Root's: the init gives each run's copy to the run's id.
		{"sandbox", 0o755 | os.ModeDir, 0},
	}
	for _, tt := range tests {
		fi, err := os.Lstat(filepath.Join(root, tt.path))
		if err != nil {
			t.Errorf("%s: %v", tt.path, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != tt.mode || st.Uid != tt.uid || st.Gid != tt.uid {
			t.Errorf("%s: got %v owned by %d:%d, want %v owned by %d:%d", tt.path, fi.Mode(), st.Uid, st.Gid, tt.mode, tt.uid, tt.uid)
		}
	}
}

func TestResolveSource(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, [][2]string{
		{"apt/sources.list.d/debian.sources", deb822Bookworm},
		{"os-release", "VERSION_CODENAME=bookworm\n"},
	})
	tests := []struct {
		name               string
		opts               BuildOptions
		wantMirror, wantSu string
	}{
		{"all from the host", BuildOptions{}, "http://mirror.test/debian", "bookworm"},
		{"suite option", BuildOptions{Suite: "trixie"}, "http://mirror.test/debian", "trixie"},
		{"mirror option", BuildOptions{Mirror: "http://other.mirror.test/debian"}, "http://other.mirror.test/debian", "bookworm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			if err := o.resolveSource(filepath.Join(dir, "os-release"), filepath.Join(dir, "apt")); err != nil {
				t.Fatal(err)
			}
			if o.Mirror != tt.wantMirror || o.Suite != tt.wantSu {
				t.Errorf("got %q %q, want %q %q", o.Mirror, o.Suite, tt.wantMirror, tt.wantSu)
			}
		})
	}
}

// TestCheckReplaceable: a build replaces its directory, so it goes only into
// a missing or empty one, or over an earlier build (manifest.json at the top).
func TestCheckReplaceable(t *testing.T) {
	base := t.TempDir()
	empty := filepath.Join(base, "empty")
	built := filepath.Join(base, "built")
	other := filepath.Join(base, "other")
	for _, d := range []string{empty, built, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(built, ManifestName), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "journal.db"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(base, "missing"), empty, built} {
		if err := checkReplaceable(d, Python); err != nil {
			t.Errorf("%s: got %v, want it accepted", d, err)
		}
	}
	err := checkReplaceable(other, Python)
	if err == nil || !strings.Contains(err.Error(), "no "+ManifestName) || !strings.Contains(err.Error(), "rootfs/python") {
		t.Errorf("a directory of something else: got %v, want a refusal that says why and what to give", err)
	}
}
