package rootfs

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail/pid1"
)

func TestParseLanguage(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Language
		wantErr bool
	}{
		{"python", "python", Python, false},
		{"javascript", "javascript", JavaScript, false},
		{"empty", "", "", true},
		{"capitalised", "Python", "", true},
		{"alias", "js", "", true},
		{"versioned", "python3", "", true},
		{"padded", " python", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLanguage(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrUnknownLanguage) {
					t.Errorf("got %q, %v; want ErrUnknownLanguage", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
			if got.String() != tt.in {
				t.Errorf("String: got %q, want %q", got.String(), tt.in)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"python", "Python 3.11.2\n", "3.11.2"},
		{"node", "v20.20.2\n", "20.20.2"},
		{"bare", "18.20.4", "18.20.4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseVersion(tt.in); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRootArgv(t *testing.T) {
	r := &Root{Interpreter: "/usr/bin/python3", Args: interpreterArgs(Python)}
	if got, want := r.Argv("/sandbox/main.py"), []string{"/usr/bin/python3", "-u", "/sandbox/main.py"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got, want := JavaScript.ScriptName(), "main.js"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// mergedUsr reports whether this host's /bin is a link into /usr.
func mergedUsr() bool {
	fi, err := os.Lstat("/bin")
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}

func TestHostSkeleton(t *testing.T) {
	testutil.RequireRoot(t)
	state := t.TempDir()
	h, err := NewHost(state, HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if h.Name() != "host" {
		t.Errorf("got name %q, want host", h.Name())
	}
	if want := filepath.Join(state, "rootfs", "host"); h.Dir() != want {
		t.Errorf("got dir %q, want %q", h.Dir(), want)
	}
	dir := h.Dir()

	t.Run("top level", func(t *testing.T) {
		got := dirNames(t, dir)
		// Nothing of the host's /root, /home, /var, /run or /tmp: /var is the
		// skeleton's own, with only an empty sticky tmp.
		want := []string{"dev", "etc", "proc", "sandbox", "tmp", "usr", "var"}
		vars, err := os.ReadDir(filepath.Join(dir, "var"))
		if err != nil || len(vars) != 1 || vars[0].Name() != "tmp" {
			t.Errorf("var: got %v, %v, want tmp alone", vars, err)
		}
		if fi, err := os.Stat(filepath.Join(dir, "var", "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
			t.Errorf("var/tmp: got %v, %v, want a sticky 1777 folder", fi, err)
		}
		if ents, err := os.ReadDir(filepath.Join(dir, "var", "tmp")); err != nil || len(ents) != 0 {
			t.Errorf("var/tmp: got %v, %v, want it empty", ents, err)
		}
		for _, d := range []string{"bin", "sbin", "lib", "lib64"} {
			if _, err := os.Lstat("/" + d); err == nil {
				want = append(want, d)
			}
		}
		sort.Strings(want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})

	t.Run("merged usr links", func(t *testing.T) {
		for _, d := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
			hostTarget, err := os.Readlink(d)
			if err != nil {
				continue // a real directory on this host; it is bound instead
			}
			got, err := os.Readlink(filepath.Join(dir, d))
			if err != nil || got != hostTarget {
				t.Errorf("%s: got link %q, %v; want %q as on the host", d, got, err, hostTarget)
			}
		}
	})

	t.Run("binds", func(t *testing.T) {
		r, err := h.Root(Python)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, b := range r.Binds {
			if b.Source != b.Target {
				t.Errorf("bind %v: want the host folder at its own path", b)
			}
			got[b.Target] = true
			p := placeIn(dir, r.View, b.Target)
			if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
				t.Errorf("mount point %s: got %v, want a directory", b.Target, err)
			}
			if v := r.View; v != nil && p != filepath.Join(dir, b.Target) {
				if got := xattr(p, xattrRedirect); got != strings.TrimPrefix(b.Source, v.Source) {
					t.Errorf("%s in the view's top layer: got redirect %q, want its path in %s", b.Target, got, v.Source)
				}
			}
			for _, o := range r.Binds {
				if o != b && strings.HasPrefix(b.Target+"/", o.Target+"/") {
					t.Errorf("bind %s lies inside bind %s: each must be its own mount point on the lower layer", b.Target, o.Target)
				}
			}
		}
		// What a host keeps of its own never shows; /usr is never bound whole.
		for _, never := range []string{"/usr", "/usr/local", "/usr/src", "/usr/include", "/usr/games", "/usr/libexec", "/usr/lib", "/usr/share"} {
			if got[never] {
				t.Errorf("%s is bound, want it left out", never)
			}
			for _, b := range r.Binds {
				if strings.HasPrefix(b.Target, "/usr/local/") {
					t.Errorf("%s is bound, want nothing of /usr/local", b.Target)
				}
			}
		}
		if _, err := os.Lstat(filepath.Join(dir, "usr/local")); !os.IsNotExist(err) {
			t.Errorf("usr/local in the skeleton: got %v, want it absent", err)
		}
		// What the interpreters need, where this host has it.
		for _, want := range []string{"/usr/bin", "/usr/lib/python3", "/usr/lib/python3.11", "/usr/share/zoneinfo", "/usr/lib/node_modules"} {
			if fi, err := os.Lstat(want); err == nil && fi.IsDir() && !got[want] {
				t.Errorf("%s: not bound, want it (binds %v)", want, r.Binds)
			}
		}
		if mergedUsr() {
			for _, d := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
				if got[d] {
					t.Errorf("%s is bound on a merged-/usr host, want a link", d)
				}
			}
		}
		// Folders whose links are all a run needs are copied as links, not bound:
		// the loader's, and OpenSSL's to the certificates.
		for _, l := range []string{"/usr/lib64/ld-linux-x86-64.so.2", "/usr/lib/ssl/cert.pem", "/usr/lib/ssl/certs"} {
			target, err := os.Readlink(l)
			if err != nil {
				continue
			}
			if got[filepath.Dir(l)] {
				t.Errorf("%s is bound, want its links copied", filepath.Dir(l))
			}
			if got, err := os.Readlink(placeIn(dir, r.View, l)); err != nil || got != target {
				t.Errorf("%s: got %q, %v; want a link to %q", l, got, err, target)
			}
		}
	})

	t.Run("view", func(t *testing.T) {
		r, err := h.Root(Python)
		if err != nil {
			t.Fatal(err)
		}
		if why, _ := h.ViewOff(); r.View == nil || *r.View != (View{Source: "/usr", Target: "/usr"}) || why != "" {
			t.Fatalf("got view %+v (%q), want /usr's (the skeleton is not in /usr, on a filesystem with trusted attributes)", r.View, why)
		}
		// Every folder of the top layer is a bound part, redirected, or
		// opaque: nothing else of the host's /usr shows through.
		top := filepath.Join(dir, "usr", ViewDir)
		parts := 0
		err = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			target := "/usr" + strings.TrimPrefix(p, top)
			redirect, opaque := xattr(p, xattrRedirect), xattr(p, xattrOpaque)
			bound := slices.Contains(r.Binds, Bind{Source: target, Target: target})
			switch {
			case bound && redirect != "" && opaque == "":
				parts++
			case !bound && redirect == "" && opaque == "y":
			default:
				t.Errorf("%s: bound %v, redirect %q, opaque %q; want a bound part redirected and anything else opaque", target, bound, redirect, opaque)
			}
			return nil
		})
		if err != nil || parts == 0 || parts != len(r.Binds) {
			t.Errorf("%d parts redirected (%v), want every bind's (%d)", parts, err, len(r.Binds))
		}
		// Where overlayfs would take the layers as overlapping, each part is a
		// view of its own.
		for _, d := range []string{"/usr", "/usr/local/brig/rootfs/host", "/"} {
			if v, why, hint := usrView(t.TempDir(), d); v != nil || why == "" || hint == "" {
				t.Errorf("a skeleton at %s: got view %+v (%q, %q), want none, why and what to do", d, v, why, hint)
			}
		}
	})

	t.Run("lower layer is root's", func(t *testing.T) { checkRootsOnly(t, dir) })

	t.Run("layout", func(t *testing.T) { checkLayout(t, dir) })

	t.Run("made-up etc", func(t *testing.T) {
		for name, want := range etcFiles {
			b, err := os.ReadFile(filepath.Join(dir, "etc", name))
			if err != nil || string(b) != want {
				t.Errorf("etc/%s: got %q, %v; want brig's %q", name, b, err, want)
			}
		}
		for _, f := range []string{"shadow", "gshadow", "sudoers", "ssh", "machine-id", "apt", "passwd-"} {
			if _, err := os.Lstat(filepath.Join(dir, "etc", f)); !os.IsNotExist(err) {
				t.Errorf("etc/%s: got %v, want it absent", f, err)
			}
		}
		// No host account but the ones brig writes.
		ours := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSpace(etcFiles["passwd"]), "\n") {
			ours[strings.SplitN(l, ":", 2)[0]] = true
		}
		skel, _ := os.ReadFile(filepath.Join(dir, "etc/passwd"))
		hostPasswd, err := os.Open("/etc/passwd")
		if err != nil {
			t.Fatal(err)
		}
		defer hostPasswd.Close()
		sc := bufio.NewScanner(hostPasswd)
		for sc.Scan() {
			name := strings.SplitN(sc.Text(), ":", 2)[0]
			if name != "" && !ours[name] && strings.Contains(string(skel), "\n"+name+":") {
				t.Errorf("etc/passwd has the host's account %q", name)
			}
		}
		// The copies are the host's files, byte for byte.
		for _, rel := range []string{"ld.so.cache", "ssl/certs/ca-certificates.crt"} {
			want, err := os.ReadFile(filepath.Join("/etc", rel))
			if err != nil {
				continue
			}
			if got, _ := os.ReadFile(filepath.Join(dir, "etc", rel)); !reflect.DeepEqual(got, want) {
				t.Errorf("etc/%s: got %d bytes, want the host's %d", rel, len(got), len(want))
			}
		}
	})

	// A copy keeps the host file's modification time, and so the bytecode
	// Python cached in /usr for a module that is a link into /etc (Debian's
	// sitecustomize) stays valid inside the root: with the copy's own time
	// every interpreter compiled the module from source.
	t.Run("copies keep their times", func(t *testing.T) {
		copies := 0
		err := filepath.WalkDir(filepath.Join(dir, "etc"), func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			if _, ours := etcFiles[strings.TrimPrefix(rel, "etc/")]; ours {
				if got, _ := os.Lstat(p); !got.ModTime().Equal(madeUpTime) {
					t.Errorf("%s (brig's): modified %v, want %v", rel, got.ModTime(), madeUpTime)
				}
				return nil
			}
			host, err := os.Lstat("/" + rel)
			if err != nil {
				return err
			}
			copies++
			if got, _ := os.Lstat(p); !got.ModTime().Equal(host.ModTime()) {
				t.Errorf("%s: modified %v, want the host's %v", rel, got.ModTime(), host.ModTime())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if copies == 0 {
			t.Fatal("no copy of a host file in the made-up etc")
		}
		checked := 0
		links, _ := filepath.Glob("/usr/lib/python3*/*.py")
		for _, link := range links {
			target, err := os.Readlink(link)
			if err != nil || !strings.HasPrefix(target, "/etc/") {
				continue
			}
			name := strings.TrimSuffix(filepath.Base(link), ".py")
			pycs, _ := filepath.Glob(filepath.Join(filepath.Dir(link), "__pycache__", name+".cpython-*.pyc"))
			for _, pyc := range pycs {
				checked++
				if why := stalePyc(pyc, filepath.Join(dir, target)); why != "" {
					t.Errorf("%s (%s -> %s) inside the root: %s", pyc, link, target, why)
				}
			}
		}
		t.Logf("%d copies, %d cached modules linked into /etc checked", copies, checked)
	})
}

// stalePyc says why Python would not take the timestamp-checked bytecode at
// pyc as the compiled source (empty if it would): the header's source mtime
// (seconds, 32 bits) and size must be the source's (PEP 552).
func stalePyc(pyc, source string) string {
	b, err := os.ReadFile(pyc)
	if err != nil || len(b) < 16 {
		return fmt.Sprintf("reading its header: %v (%d bytes)", err, len(b))
	}
	if flags := binary.LittleEndian.Uint32(b[4:8]); flags != 0 {
		return "" // hash-based: not checked against the time
	}
	fi, err := os.Stat(source)
	if err != nil {
		return err.Error()
	}
	mtime, size := binary.LittleEndian.Uint32(b[8:12]), binary.LittleEndian.Uint32(b[12:16])
	if mtime != uint32(fi.ModTime().Unix()) || size != uint32(fi.Size()) {
		return fmt.Sprintf("cached for a source modified at %d, %d bytes; the source is %d, %d bytes",
			mtime, size, uint32(fi.ModTime().Unix()), fi.Size())
	}
	return ""
}

// An unchanged skeleton stays where it is, times and all: another brig process
// may be mounting it.
func TestHostSkeletonUnchangedStays(t *testing.T) {
	testutil.RequireRoot(t)
	state := t.TempDir()
	// skeleton writes the skeleton and returns its directory's inode.
	skeleton := func() uint64 {
		t.Helper()
		h, err := NewHost(state, HostConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Stat(h.Dir(), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	before := skeleton()
	after := skeleton()
	if after != before {
		t.Errorf("the skeleton was replaced (inode %d, then %d), want the unchanged one kept", before, after)
	}
	// A copy whose time differs from the host's (one written by a brig that
	// did not keep it), or one of brig's own files with another time, is
	// replaced.
	for _, rel := range []string{"etc/ld.so.cache", "etc/passwd"} {
		if err := os.Chtimes(filepath.Join(state, "rootfs", "host", rel), time.Time{}, time.Now().Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		again := skeleton()
		if again == after {
			t.Errorf("%s modified at another time: the skeleton was kept, want it replaced", rel)
		}
		after = again
	}
}

func TestHostRoot(t *testing.T) {
	testutil.RequireRoot(t)
	h, err := NewHost(t.TempDir(), HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		lang     Language
		interp   string
		args     []string
		versionR string
	}{
		{Python, "/usr/bin/python3", []string{"-u"}, `^3\.\d+\.\d+`},
		{JavaScript, "/usr/bin/node", nil, `^\d+\.\d+\.\d+$`},
	}
	for _, tt := range tests {
		t.Run(string(tt.lang), func(t *testing.T) {
			if _, err := os.Stat(tt.interp); err != nil {
				t.Fatalf("this host has no %s: %v (Hint: apt-get install python3 nodejs)", tt.interp, err)
			}
			r, err := h.Root(tt.lang)
			if err != nil {
				t.Fatal(err)
			}
			if r.Interpreter != tt.interp || !reflect.DeepEqual(r.Args, tt.args) || r.Lower != h.Dir() || r.Language != tt.lang {
				t.Errorf("got %+v, want interpreter %s, args %v, lower %s", r, tt.interp, tt.args, h.Dir())
			}
			if !regexp.MustCompile(tt.versionR).MatchString(r.Version) {
				t.Errorf("got version %q, want one matching %s", r.Version, tt.versionR)
			}
			out, err := exec.Command(tt.interp, "--version").Output()
			if err != nil {
				t.Fatal(err)
			}
			if want := parseVersion(string(out)); r.Version != want {
				t.Errorf("got version %q, want %q", r.Version, want)
			}
		})
	}
	if _, err := h.Root("ruby"); !errors.Is(err, ErrUnknownLanguage) {
		t.Errorf("ruby: got %v, want ErrUnknownLanguage", err)
	}
}

func TestHostRefusesInterpreterOutsideBinds(t *testing.T) {
	tests := []struct {
		name, path string
		ok         bool
	}{
		{"under /usr/bin", "/usr/bin/python3", true},
		{"under /usr/local", "/usr/local/bin/python3", false},
		{"/usr itself is not bound", "/usr/python3", false},
		{"pyenv shim under /root", "/root/.pyenv/shims/python3", false},
		{"/opt", "/opt/python/bin/python3", false},
		{"climbs out of /usr/bin", "/usr/bin/../local/bin/python3", false},
		{"sibling with /usr/bin as prefix", "/usr/binx/python3", false},
		{"relative", "usr/bin/python3", false},
		{"the bind itself", "/usr/bin", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The check needs no skeleton, so it runs without root.
			h := &Host{
				binds:    []Bind{{Source: "/usr/bin", Target: "/usr/bin"}, {Source: "/usr/lib/python3", Target: "/usr/lib/python3"}},
				interp:   map[Language]string{Python: tt.path},
				versions: map[Language]string{Python: "3.11.2"},
			}
			_, err := h.Root(Python)
			if tt.ok != (err == nil) {
				t.Errorf("got %v, want ok: %v", err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "outside the folders") {
				t.Errorf("got %v, want it to say the interpreter is outside the bound folders", err)
			}
		})
	}
}

func TestHostRewriteIsAtomic(t *testing.T) {
	testutil.RequireRoot(t)
	state := t.TempDir()
	h, err := NewHost(state, HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(h.Dir(), "etc", "stray")
	if err := os.WriteFile(stray, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Runs starting while the skeleton is rewritten must always find a whole one.
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
			if _, err := os.Stat(filepath.Join(h.Dir(), "etc", "passwd")); err != nil {
				missing++
			}
		}
	}()
	for i := 0; i < 20; i++ {
		if _, err := NewHost(state, HostConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if missing > 0 {
		t.Errorf("a reader found no etc/passwd %d times while the skeleton was rewritten, want 0", missing)
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("a file of the old skeleton: got %v, want it gone", err)
	}
	ents, _ := os.ReadDir(filepath.Join(state, "rootfs"))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !reflect.DeepEqual(names, []string{"host"}) {
		t.Errorf("got %v beside the skeleton, want only host (no .host- temp or .old dirs)", names)
	}
}

// BenchmarkBinds measures what the host root's folders cost each sandbox, in a
// mount namespace of the benchmark's own: the jail's one view of the parts of
// /usr (pid1.MountView, the host root's View), and, beside it, a read-only
// view of each (pid1.ReadOnlyView, an overlay of its own, moved into place),
// which the jail made before, a bind of each (MS_BIND|MS_REC, then
// mount_setattr read-only, nosuid, nodev on the tree), which it made before
// its views, and the one bind of all of /usr it made before it bound parts;
// each with its unmount.
func BenchmarkBinds(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.CheckLeaks(b)
	h, err := NewHost(b.TempDir(), HostConfig{})
	if err != nil {
		b.Fatal(err)
	}
	if h.view == nil {
		b.Fatal("the host rootfs has no view of /usr here")
	}
	for _, d := range []string{"usrall", "empty", "stage"} {
		if err := os.Mkdir(filepath.Join(h.Dir(), d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for _, bm := range []struct {
		name  string
		binds []Bind
		mode  string
	}{
		{"all of /usr", []Bind{{Source: "/usr", Target: "/usrall"}}, "bind"},
		{fmt.Sprintf("parts of /usr (%d binds)", len(h.binds)), h.binds, "bind"},
		{fmt.Sprintf("parts of /usr (%d views)", len(h.binds)), h.binds, "views"},
		{fmt.Sprintf("parts of /usr (one view of %d)", len(h.binds)), []Bind{{Source: "/usr", Target: "/usrall"}}, "view"},
	} {
		b.Run(bm.name, func(b *testing.B) {
			errc := make(chan error, 1)
			go func() {
				// Left locked: the thread, in its own mount namespace, ends with
				// the goroutine.
				runtime.LockOSThread()
				errc <- bindLoop(b, h.Dir(), h.view, bm.binds, bm.mode)
			}()
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
		})
	}
}

func bindLoop(b *testing.B, root string, view *View, binds []Bind, mode string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return fmt.Errorf("unsharing the mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, bd := range binds {
			dst := placeIn(root, view, bd.Target)
			switch mode {
			case "view":
				v := &pid1.View{Source: view.Source, Target: view.Target, Dir: ViewDir}
				if err := pid1.MountView(v, root, filepath.Join(root, "stage"), filepath.Join(root, bd.Target)); err != nil {
					return err
				}
				continue
			case "views":
				fd, err := pid1.ReadOnlyView(bd.Source, filepath.Join(root, "empty"))
				if err != nil {
					return err
				}
				err = unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
				unix.Close(fd)
				if err != nil {
					return err
				}
				continue
			}
			if err := unix.Mount(bd.Source, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("binding %s: %w", bd.Source, err)
			}
			if err := unix.MountSetattr(unix.AT_FDCWD, dst, unix.AT_RECURSIVE, attr); err != nil {
				return err
			}
		}
		for j := len(binds) - 1; j >= 0; j-- {
			dst := placeIn(root, view, binds[j].Target)
			if mode == "view" {
				dst = filepath.Join(root, binds[j].Target)
			}
			if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
				return err
			}
		}
	}
	return nil
}

// placeIn is where the skeleton at dir holds target: in view's top layer if
// view shows it.
func placeIn(dir string, view *View, target string) string {
	if view != nil && strings.HasPrefix(target+"/", view.Target+"/") {
		return filepath.Join(dir, view.Target, ViewDir, strings.TrimPrefix(target, view.Target))
	}
	return filepath.Join(dir, target)
}

// xattr is path's extended attribute name, "" when it has none.
func xattr(path, name string) string {
	buf := make([]byte, 4096)
	n, err := unix.Lgetxattr(path, name, buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// A temporary skeleton that a brig killed while it wrote one left beside the
// skeleton is removed at the next start once it is old; a fresh one (another
// brig process writing its skeleton now) is left alone.
func TestHostRemovesStaleTemps(t *testing.T) {
	state := t.TempDir()
	if _, err := NewHost(state, HostConfig{}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(state, "rootfs")
	stale, fresh := filepath.Join(dir, ".host-123"), filepath.Join(dir, ".host-456")
	for _, d := range []string{stale, fresh} {
		if err := os.MkdirAll(filepath.Join(d, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := NewHost(state, HostConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale temporary skeleton: got %v, want it removed", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("the fresh temporary skeleton: got %v, want it left", err)
	}
}

// TestCopyAlternatives: of Debian's alternatives, only the links to a program
// a run sees are copied, as links: the others would dangle, and their targets
// name software the view of /usr leaves out (a JVM's version and place).
func TestCopyAlternatives(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "alternatives")
	for name, target := range map[string]string{
		"awk":  "/usr/bin/mawk",
		"java": "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
		"rel":  "../bin/x",
	} {
		if err := os.Symlink(target, filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(src, "README"), []byte("not a link\n"), 0o644)
	shown := func(p string) bool { return strings.HasPrefix(p, "/usr/bin/") }
	if err := copyAlternatives(src, dst, shown); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, dst); !slices.Equal(names, []string{"awk"}) {
		t.Errorf("got %v copied, want [awk] alone", names)
	}
	if got, err := os.Readlink(filepath.Join(dst, "awk")); err != nil || got != "/usr/bin/mawk" {
		t.Errorf("got awk -> %q (%v), want the host's link", got, err)
	}
	// A host without the folder has nothing to copy.
	if err := copyAlternatives(filepath.Join(src, "none"), filepath.Join(t.TempDir(), "a"), shown); err != nil {
		t.Errorf("a host without alternatives: %v", err)
	}
}

// dirNames lists the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
