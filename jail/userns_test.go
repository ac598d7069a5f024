package jail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/rootfs"
)

// hostIDOf reads the host id a run's uid_map or gid_map maps 1000 to. The map
// must hold exactly two ids: 0 (the init's) and 1000, each to one host id.
func hostIDOf(tb testing.TB, idMap string) uint32 {
	tb.Helper()
	ids, _ := hostIDsOf(tb, idMap)
	return ids
}

// hostIDsOf reads what a run's id map maps 1000 and 0 to.
func hostIDsOf(tb testing.TB, idMap string) (program, root uint32) {
	tb.Helper()
	lines := strings.Split(strings.TrimSpace(idMap), "\n")
	got := map[string]uint32{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 || f[2] != "1" {
			tb.Fatalf("id map %q: want lines mapping one id each", idMap)
		}
		id, err := strconv.ParseUint(f[1], 10, 32)
		if err != nil {
			tb.Fatal(err)
		}
		got[f[0]] = uint32(id)
	}
	if len(lines) != 2 || got["1000"] == 0 || got["0"] == 0 {
		tb.Fatalf("id map %q: want exactly 0 and 1000 mapped", idMap)
	}
	return got["1000"], got["0"]
}

// TestUserNamespaceIDs: the program is 1000 inside a user namespace of its own
// whose only mapping is to host ids of the configured range, which no other
// sandbox alive at the same time has, and its init holds another id of the range.
func TestUserNamespaceIDs(t *testing.T) {
	l := newTestLauncher(t, 2)
	r := IDRange{}.withDefaults()
	code := pyTrial + `
r['ids'] = '%d %d %d %d' % (os.getuid(), os.geteuid(), os.getgid(), os.getegid())
r['groups'] = repr(os.getgroups())
r['uid_map'] = open('/proc/self/uid_map').read().strip()
r['gid_map'] = open('/proc/self/gid_map').read().strip()
r['setgroups'] = open('/proc/self/setgroups').read().strip()
r['userns'] = os.readlink('/proc/self/ns/user')
r['init uid'] = [l.split()[1] for l in open('/proc/1/status') if l.startswith('Uid:')][0]
r['sandbox owner'] = str(os.stat('/sandbox').st_uid)
r['main owner'] = str(os.stat('/sandbox/main.py').st_uid)
r['setuid 0'] = trial(lambda: os.setuid(0))
r['chown to root'] = trial(lambda: os.chown('/sandbox/main.py', 0, 0))
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def unshare_user():
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        raise OSError(ctypes.get_errno(), 'unshare')
r['unshare user'] = trial(unshare_user)
` + pyDump
	const n = 3
	gots := make([]map[string]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each run holds its sandbox for a moment, so that the runs overlap.
			gots[i] = probe(t, l, rootfs.Python, "import time; time.sleep(0.3)\n"+code)
		}()
	}
	wg.Wait()
	seen := map[uint32]int{}
	for i, got := range gots {
		checkProbe(t, got, []check{
			{name: "ids inside", key: "ids", want: "1000 1000 1000 1000"},
			{name: "no groups", key: "groups", want: "[]"},
			{name: "sandbox dir is the program's", key: "sandbox owner", want: "1000"},
			{name: "program file is the program's", key: "main owner", want: "1000"},
			{name: "cannot become root", key: "setuid 0", want: "EPERM"},
			{name: "cannot give a file to root", key: "chown to root", want: "EPERM"},
			{name: "no nested user namespace", key: "unshare user", want: "EPERM"},
		})
		uid, rootUID := hostIDsOf(t, got["uid_map"])
		gid, rootGID := hostIDsOf(t, got["gid_map"])
		if !r.Contains(uid) || uid != gid || !r.Contains(rootUID) || rootUID != rootGID || rootUID == uid {
			t.Errorf("run %d: host uid %d gid %d, root %d:%d; want two ids of the range %s, the same for uid and gid",
				i, uid, gid, rootUID, rootGID, r)
		}
		// The init holds the id the namespace's 0 maps to: it appears as root.
		if got["init uid"] != "0" {
			t.Errorf("run %d: init uid seen from inside %s, want 0 (the run's second id)", i, got["init uid"])
		}
		seen[uid]++
		seen[rootUID]++
	}
	for id, c := range seen {
		if c > 1 {
			t.Errorf("host id %d was given to %d sandboxes alive at once, want 1", id, c)
		}
	}
	if gots[0]["userns"] == gots[1]["userns"] {
		t.Errorf("two runs share the user namespace %s", gots[0]["userns"])
	}
}

// runningProgram starts code (which must print "ready" once it is set up) and
// returns the program's host pid and host uid once it has; stop ends the run.
func runningProgram(t *testing.T, l *Launcher, code string) (pid int, uid uint32, stop func() *Result) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	var out strings.Builder
	var mu sync.Mutex
	done := make(chan *Result, 1)
	go func() {
		spec := Spec{Language: rootfs.Python, Code: code, Timeout: 60 * time.Second,
			MemoryBytes: api.DefaultMemoryMiB << 20, OnStdout: func(s string) {
				mu.Lock()
				defer mu.Unlock()
				out.WriteString(s)
				if i := strings.Index(out.String(), "ready "); i >= 0 && strings.HasSuffix(out.String(), "\n") {
					select {
					case ready <- strings.TrimSpace(out.String()[i+len("ready "):]):
					default:
					}
				}
			}}
		res, err := launch(ctx, l, spec)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		if err := checkPath(l, spec, res); err != nil {
			t.Error(err)
		}
		done <- res
	}()
	stop = func() *Result { cancel(); return <-done }
	var line string
	select {
	case line = <-ready:
	case res := <-done:
		t.Fatalf("the run ended before it was ready: %+v", res)
	case <-time.After(30 * time.Second):
		stop()
		t.Fatal("the run did not get ready in 30 s")
	}
	uid = hostIDOf(t, line)
	// The program's host pid: the process of that host uid running the script.
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name()), &st) == nil && st.Uid == uid {
			pid = p
			break
		}
	}
	if pid == 0 {
		stop()
		t.Fatalf("no host process of uid %d", uid)
	}
	return pid, uid, stop
}

// TestHostUserCannotReachRun: a host process of the account that used to share
// the program's uid (1000) can neither signal, trace nor read a run.
func TestHostUserCannotReachRun(t *testing.T) {
	l := newTestLauncher(t, 0)
	pid, _, stop := runningProgram(t, l, `import os, time
print('ready', open('/proc/self/uid_map').read().strip(), flush=True)
time.sleep(60)
`)
	defer stop()
	attacker := `
import ctypes, errno, os, sys
pid = int(sys.argv[1])
def trial(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
libc = ctypes.CDLL(None, use_errno=True)
def ptrace_attach():
    if libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
r = {
    'kill': trial(lambda: os.kill(pid, 0)),
    'environ': trial(lambda: open('/proc/%d/environ' % pid, 'rb').read()),
    'mem': trial(lambda: open('/proc/%d/mem' % pid, 'rb').read(1)),
    'cwd': trial(lambda: os.listdir('/proc/%d/cwd/' % pid)),
    'root': trial(lambda: os.listdir('/proc/%d/root/' % pid)),
    'fd': trial(lambda: os.listdir('/proc/%d/fd' % pid)),
    'ptrace': trial(ptrace_attach),
}
print(' '.join('%s=%s' % kv for kv in sorted(r.items())))
`
	cmd := exec.Command("/usr/bin/python3", "-c", attacker, strconv.Itoa(pid))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the attacker failed: %v: %s", err, out)
	}
	for _, kv := range strings.Fields(string(out)) {
		k, v, _ := strings.Cut(kv, "=")
		if v != "EPERM" && v != "EACCES" {
			t.Errorf("host uid 1000 on the run's program: %s got %s, want EPERM or EACCES", k, v)
		}
	}
	if !strings.Contains(string(out), "ptrace=") {
		t.Fatalf("attacker output %q has no ptrace result", out)
	}
}

// TestRunsDoNotShareUIDCounters: a run that fills its count of file
// descriptors in flight over Unix sockets (RLIMIT_NOFILE of them), of queued
// signals (RLIMIT_SIGPENDING) and of inotify instances leaves a run alive at the
// same time able to do all three.
// Pending signals are also charged to the owner of each run's user namespace, up
// the chain, and kill(2) queues past the limit: the run's own host id owns its
// namespace, so that one run's flood counts against no one else.
func TestRunsDoNotShareUIDCounters(t *testing.T) {
	l := newTestLauncher(t, 0)
	const fill = `
import array, errno, os, signal, socket
def send(sock, n):
    fds = array.array('i', [sock.fileno()] * n)
    sock.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
def fds_in_flight(limit, per_msg=253):
    a, b = socket.socketpair()
    a.setblocking(False)
    sent = 0
    while sent < limit:
        try:
            send(a, per_msg)
        except OSError as e:
            return sent, errno.errorcode.get(e.errno, str(e.errno)), (a, b)
        sent += per_msg
    return sent, 'none', (a, b)
def queue_signals(limit, send):
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
    n = 0
    while n < limit:
        try:
            send(signal.SIGRTMIN)
        except OSError as e:
            return n, errno.errorcode.get(e.errno, str(e.errno))
        n += 1
    return n, 'none'
# kill(2) queues past RLIMIT_SIGPENDING (the kernel counts, but does not
# limit, signals of kill's kind); pthread_kill (tgkill) stops at the limit.
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def inotify_instances(limit):
    fds = []
    while len(fds) < limit:
        fd = libc.inotify_init1(0)
        if fd < 0:
            return fds, errno.errorcode.get(ctypes.get_errno(), '?')
        fds.append(fd)
    return fds, 'none'
by_kill = lambda sig: os.kill(os.getpid(), sig)
by_tgkill = lambda sig: signal.pthread_kill(threading.get_ident(), sig)
import threading
`
	_, _, stop := runningProgram(t, l, fill+`
import time
fds, fds_err, keep = fds_in_flight(100000)
flood, _ = queue_signals(100000, by_kill)
sigs, sigs_err = queue_signals(200000, by_tgkill)
watchers, watchers_err = inotify_instances(100000)
print('filled', fds, fds_err, sigs, sigs_err, flood, len(watchers), watchers_err, flush=True)
print('ready', open('/proc/self/uid_map').read().strip(), flush=True)
time.sleep(60)
`)
	other := run(t, l, rootfs.Python, fill+`
fds, fds_err, keep = fds_in_flight(4 * 253)
sigs, sigs_err = queue_signals(500, by_tgkill)
watchers, watchers_err = inotify_instances(10)
print('other', fds, fds_err, sigs, sigs_err, len(watchers), watchers_err)
`)
	first := stop()
	var fds, sigs, flood, watchers int
	var fdsErr, sigsErr, watchersErr string
	if _, err := fmt.Sscanf(first.Stdout, "filled %d %s %d %s %d %d %s", &fds, &fdsErr, &sigs, &sigsErr, &flood, &watchers, &watchersErr); err != nil {
		t.Fatalf("first run's output %q (stderr %q): %v", first.Stdout, first.Stderr, err)
	}
	if fdsErr != "ETOOMANYREFS" || sigsErr != "EAGAIN" || flood != 100000 || watchersErr != "EMFILE" {
		t.Fatalf("the first run: %d fds in flight (%s), %d signals queued by kill, %d more by tgkill (%s), %d inotify instances (%s); want ETOOMANYREFS, 100000, EAGAIN and EMFILE",
			fds, fdsErr, flood, sigs, sigsErr, watchers, watchersErr)
	}
	if want := "other 1012 none 500 none 10 none\n"; other.Stdout != want {
		t.Errorf("the concurrent run: got %q (stderr %q), want %q", other.Stdout, other.Stderr, want)
	}
}

// TestMountTableRevealsNoHostPath: the run's mount table names no directory of
// the host's state directory, not even for a read-only mount the service
// adds (a package layer, named by its key in the state directory), and
// /proc's masked entries read as nothing.
func TestMountTableRevealsNoHostPath(t *testing.T) {
	state := t.TempDir()
	p, err := rootfs.NewHost(state, rootfs.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l := newTestLauncherWith(t, state, p, 0)
	if !l.detachedViews {
		var uts unix.Utsname
		unix.Uname(&uts)
		release := unix.ByteSliceToString(uts.Release[:])
		var major, minor int
		fmt.Sscanf(release, "%d.%d", &major, &minor)
		if major > 6 || major == 6 && minor >= 15 {
			t.Fatalf("the launcher found detached mounts refused as overlay layers, which this kernel (%s) takes", release)
		}
		t.Skipf("this kernel (%s) refuses detached mounts as overlay layers (Linux 6.15 takes them): package layers are mounted by path, as TestMountsByPath has them", release)
	}
	const key = "c0ffee5eed"
	layer := filepath.Join(state, "packages", "layers", key, "root")
	if err := os.MkdirAll(layer, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layer, "mod.py"), []byte("VALUE = 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := run(t, l, rootfs.Python, `import sys; sys.path.insert(0, '/opt/layer'); import mod; print(mod.VALUE)
print(open('/proc/self/mountinfo').read()); print(open('/proc/mounts').read())`, func(s *Spec) {
		s.Mounts = []Mount{{Source: layer, Target: "/opt/layer"}}
	})
	if !res.Succeeded() || !strings.HasPrefix(res.Stdout, "42\n") {
		t.Fatalf("got %s %q (stderr %q)", res.End, res.Stdout, res.Stderr)
	}
	if !strings.Contains(res.Stdout, " /opt/layer ") {
		t.Fatalf("the mount table has no /opt/layer:\n%s", res.Stdout)
	}
	for _, leak := range []string{state, filepath.Base(filepath.Dir(state)), "/var/lib/brig", "scratch", key, "packages"} {
		if strings.Contains(res.Stdout, leak) {
			t.Errorf("the mount table names %q:\n%s", leak, res.Stdout)
		}
	}
	// The state directory's own name (t.TempDir's "001") as a path element:
	// as a substring it also matches mount ids and sizes.
	if re := regexp.MustCompile(`(^|[\s/,=])` + regexp.QuoteMeta(filepath.Base(state)) + `($|[\s/,])`); re.MatchString(res.Stdout) {
		t.Errorf("the mount table names %q as a path element:\n%s", filepath.Base(state), res.Stdout)
	}
	var checks []check
	code := pyTrial
	for _, f := range pid1.MaskedProcFiles {
		if _, err := os.Stat(filepath.Join("/proc", f)); err != nil {
			continue
		}
		code += fmt.Sprintf("r[%q] = trial(lambda: len(open('/proc/%s', 'rb').read()))\n", f, f)
		checks = append(checks, check{name: f, key: f, wantAny: []string{"0", "EACCES"}})
	}
	for _, d := range pid1.MaskedProcDirs {
		if _, err := os.Stat(filepath.Join("/proc", d)); err != nil {
			continue
		}
		code += fmt.Sprintf("r[%q] = trial(lambda: len(os.listdir('/proc/%s')))\n", d, d)
		checks = append(checks, check{name: d, key: d, want: "0"})
	}
	if len(checks) == 0 {
		t.Fatal("no masked /proc entry exists on this host")
	}
	checkProbe(t, probe(t, l, rootfs.Python, code+pyDump), checks)
}

// TestMountsByPath: where the kernel refuses detached mounts as overlay
// layers (before Linux 6.15), a read-only mount is a view by path, and works.
func TestMountsByPath(t *testing.T) {
	l := newTestLauncher(t, 0)
	l.detachedViews = false
	layer := t.TempDir()
	if err := os.WriteFile(filepath.Join(layer, "mod.py"), []byte("VALUE = 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := run(t, l, rootfs.Python, `import sys; sys.path.insert(0, '/opt/layer'); import mod; print(mod.VALUE)
print(any(' /opt/layer ' in l and 'lowerdir=/' in l and 'lowerdir+' not in l for l in open('/proc/self/mountinfo')))`, func(s *Spec) {
		s.Mounts = []Mount{{Source: layer, Target: "/opt/layer"}}
	})
	if !res.Succeeded() || res.Stdout != "42\nTrue\n" {
		t.Fatalf("got %s %q (stderr %q), want 42 and the mount by path", res.End, res.Stdout, res.Stderr)
	}
}

// TestPty: each run has a devpts of its own, so pty and os.openpty work, numbered
// from 0 whatever the host has open; TIOCSTI and TIOCSETD (a line discipline,
// which the kernel may load as a module) stay refused on it.
func TestPty(t *testing.T) {
	l := newTestLauncher(t, 0)
	got := probe(t, l, rootfs.Python, pyTrial+`
import fcntl, pty, termios
m, s = os.openpty()
r['name'] = os.ttyname(s)
os.write(m, b'hi\n')
r['echo'] = os.read(s, 10).decode().strip()
r['tiocsti'] = trial(lambda: fcntl.ioctl(s, termios.TIOCSTI, b'x'))
r['tiocsetd'] = trial(lambda: fcntl.ioctl(s, termios.TIOCSETD, bytes(4)))
r['tiocgetd'] = trial(lambda: fcntl.ioctl(s, termios.TIOCGETD, bytes(4)) and None)
pid, fd = pty.fork()
if pid == 0:
    os.write(1, b'child')
    os._exit(0)
r['pty.fork'] = os.read(fd, 10).decode()
os.waitpid(pid, 0)
`+pyDump)
	checkProbe(t, got, []check{
		{name: "openpty", key: "name", want: "/dev/pts/0"},
		{name: "round trip", key: "echo", want: "hi"},
		{name: "TIOCSTI refused", key: "tiocsti", want: "EPERM"},
		{name: "TIOCSETD refused", key: "tiocsetd", want: "EPERM"},
		{name: "TIOCGETD allowed", key: "tiocgetd", want: "ok"},
		{name: "pty.fork", key: "pty.fork", want: "child"},
	})
}

// TestIDAllocator: ids are unique while held, their order tells nothing of how
// many were handed out between two, and a second allocator (another brig
// process) never gets a block the first holds.
func TestIDAllocator(t *testing.T) {
	dir := t.TempDir()
	r := IDRange{First: 1 << 20, Count: 4 * 2 * idBlockSlots} // four blocks
	a, err := newIDAllocator(r, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := newIDAllocator(r, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	seen := map[int]bool{}
	var held []runIDs
	for range idBlockSlots + 1 { // one more than a block: a second block is claimed
		ids, err := a.get()
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []int{ids.UID, ids.InitUID} {
			if seen[id] || !r.Contains(uint32(id)) {
				t.Fatalf("id %d: given twice or outside %s", id, r)
			}
			seen[id] = true
		}
		held = append(held, ids)
	}
	if !IDsInUse(r, dir, uint32(held[0].UID)) {
		t.Errorf("IDsInUse(%d): got false, want true while its block is held", held[0].UID)
	}
	// b gets the two blocks a does not hold, then none.
	for range 2 * idBlockSlots {
		ids, err := b.get()
		if err != nil {
			t.Fatal(err)
		}
		if seen[ids.UID] {
			t.Fatalf("the second allocator got id %d, which the first holds", ids.UID)
		}
		seen[ids.UID] = true
	}
	if _, err := b.get(); !errors.Is(err, ErrNoIDs) {
		t.Fatalf("a full range: got %v, want ErrNoIDs", err)
	}
	// A freed id may be handed out again; one still held may not.
	a.put(held[0])
	for range idBlockSlots { // a's two blocks, full again
		ids, err := a.get()
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range held[1:] {
			if ids.UID == h.UID {
				t.Fatalf("id %d handed out while still held", ids.UID)
			}
		}
	}
	a.close()
	if IDsInUse(r, dir, uint32(held[0].UID)) {
		t.Errorf("IDsInUse after the allocator closed: got true, want false")
	}

	// A run that reads its own host id twice must not learn how many sandboxes
	// were made in between: the next id is not the last one's neighbour.
	c, err := newIDAllocator(r, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	steps := map[int]int{}
	last := -1
	const rounds = 200
	for range rounds {
		ids, err := c.get()
		if err != nil {
			t.Fatal(err)
		}
		if last >= 0 {
			steps[ids.UID-last]++
		}
		last = ids.UID
		c.put(ids)
	}
	for step, n := range steps {
		if n > rounds/4 {
			t.Errorf("%d of %d ids were %d after the one before: handed out in an order a run can count by", n, rounds, step)
		}
	}
}

// TestCheckIDRange: `brig check` fails on an account, a subordinate range, a
// process or a file owner in the range, and not on the ids a brig process holds.
func TestCheckIDRange(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	r := IDRange{First: 3 << 20, Count: 2 * 2 * idBlockSlots} // two blocks
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	clean := []string{write("passwd", "root:x:0:0::/root:/bin/sh\n"), write("group", "root:x:0:\n")}
	noSub := []string{write("subuid", "alice:100000:65536\n")}
	files := filepath.Join(dir, "files")
	if err := os.Mkdir(files, 0o755); err != nil {
		t.Fatal(err)
	}
	lockDir := filepath.Join(dir, "locks")
	a, err := newIDAllocator(r, lockDir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	held, err := a.get() // the first block is a brig process's now
	if err != nil {
		t.Fatal(err)
	}
	failing := func(checks []Check) []string {
		var names []string
		for _, c := range checks {
			if !c.OK {
				names = append(names, c.Name)
			}
		}
		return names
	}
	if got := failing(checkIDRange(r, lockDir, []string{files}, nil, clean, noSub)); len(got) != 0 {
		t.Fatalf("a clean host: got failures %v, want none", got)
	}
	stranger := int(r.First) + 2*2*idBlockSlots - 1 // in the second block, which no one holds

	t.Run("account", func(t *testing.T) {
		p := write("passwd2", fmt.Sprintf("svc:x:%d:0::/:/bin/sh\n", stranger))
		if got := failing(checkIDRange(r, lockDir, nil, nil, []string{p}, noSub)); len(got) != 1 || got[0] != "id range: accounts" {
			t.Errorf("got failures %v, want the accounts check", got)
		}
	})
	t.Run("subordinate range", func(t *testing.T) {
		p := write("subuid2", fmt.Sprintf("bob:%d:10\n", int(r.First)-5))
		if got := failing(checkIDRange(r, lockDir, nil, nil, clean, []string{p})); len(got) != 1 || got[0] != "id range: accounts" {
			t.Errorf("got failures %v, want the accounts check", got)
		}
	})
	t.Run("file owner", func(t *testing.T) {
		p := filepath.Join(files, "owned")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(p)
		if err := os.Chown(p, held.UID, 0); err != nil { // even a held id: a file outlives the run
			t.Fatal(err)
		}
		checks := checkIDRange(r, lockDir, []string{files}, nil, clean, noSub)
		if got := failing(checks); len(got) != 1 || got[0] != "id range: files" {
			t.Errorf("got failures %v, want the files check", got)
		}
		// A folder skipped (the package cache's staging, which its cache
		// clears before any run) is not walked.
		staging := filepath.Join(files, "staging")
		if err := os.Mkdir(staging, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(staging)
		if err := os.Rename(p, filepath.Join(staging, "owned")); err != nil {
			t.Fatal(err)
		}
		if got := failing(checkIDRange(r, lockDir, []string{files}, []string{staging}, clean, noSub)); len(got) != 0 {
			t.Errorf("got failures %v with the owned file in a skipped folder, want none", got)
		}
		if got := failing(checkIDRange(r, lockDir, []string{files}, nil, clean, noSub)); len(got) != 1 {
			t.Errorf("got failures %v with the owned file in a folder not skipped, want the files check", got)
		}
	})
	t.Run("process", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			uid  int
			want int
		}{{"a stranger's", stranger, 1}, {"a held id's", held.UID, 0}} {
			cmd := exec.Command("/bin/sleep", "30")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(tc.uid), Gid: uint32(tc.uid)}}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			got := failing(checkIDRange(r, lockDir, nil, nil, clean, noSub))
			cmd.Process.Kill()
			cmd.Wait()
			if len(got) != tc.want {
				t.Errorf("%s process: got failures %v, want %d", tc.name, got, tc.want)
			}
		}
	})
}

// TestWhatProgramsExpect: what the host rootfs binds of /usr is enough for
// certificates, a shell and the usual tools, /usr/local and the like are not
// there, and directory entries agree with stat (CPython's scandir test).
func TestWhatProgramsExpect(t *testing.T) {
	l := newTestLauncher(t, 0)
	// hostHas is code to run where the host has path, which a run should then see.
	hostHas := func(path, code string) string {
		if _, err := os.Stat(path); err != nil {
			return ""
		}
		return code
	}
	for _, tc := range []struct {
		name string
		lang rootfs.Language
		code string
	}{
		{"python", rootfs.Python, `
import os, ssl, subprocess
assert ssl.create_default_context().cert_store_stats()["x509_ca"] > 100
assert "python3" in subprocess.run(["ls", "/usr/bin"], capture_output=True, text=True, check=True).stdout
assert subprocess.run(["/bin/sh", "-c", "echo sh"], capture_output=True, text=True, check=True).stdout == "sh\n"
# Debian's alternatives and its public tables (the environment probe: awk and
# which were "not found", a service name unresolvable).
if os.path.lexists("/usr/bin/awk"):
    assert subprocess.run(["/bin/sh", "-c", "echo 1 2 3 | awk '{print $2}'"], capture_output=True, text=True, check=True).stdout == "2\n"
if os.path.lexists("/usr/bin/which"):
    assert subprocess.run(["which", "python3"], capture_output=True, text=True, check=True).stdout == "/usr/bin/python3\n"
import socket, platform
assert socket.getservbyname("https") == 443 and socket.getprotobyname("tcp") == 6
assert socket.getaddrinfo("localhost", "http", type=socket.SOCK_STREAM)[0][4][1] == 80
assert platform.freedesktop_os_release()["ID"]
for p in ["/usr/local", "/usr/src", "/usr/include"]:
    assert not os.path.lexists(p), p
for d in ["/tmp", "/sandbox"]:
    os.mkdir(d + "/dir")
    open(d + "/file", "w").close()
    for e in os.scandir(d):
        assert e.inode() == os.stat(e.path, follow_symlinks=False).st_ino, (e.path, e.inode(), os.stat(e.path).st_ino)
` + hostHas("/usr/share/python-wheels", `
import glob  # what venv's ensurepip installs (python3 -m venv failed)
assert glob.glob("/usr/share/python-wheels/pip-*.whl")
`) + hostHas("/usr/lib/terminfo/x/xterm", `
assert subprocess.run(["tput", "-T", "xterm", "cols"], capture_output=True, text=True, check=True).stdout == "80\n"
`) + `
print("ok")
`},
		{"javascript", rootfs.JavaScript, `require("assert")(require("tls").rootCertificates.length > 100); require("child_process").execSync("ls /"); console.log("ok")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, l, tc.lang, tc.code)
			if !res.Succeeded() || res.Stdout != "ok\n" {
				t.Errorf("got %s %q (stderr %q), want ok", res.End, res.Stdout, res.Stderr)
			}
		})
	}
}

// TestUsrShowsOnlyItsParts: a run's /usr holds the host rootfs's bound parts
// and the links it copies, and nothing else of the host's /usr; with the
// rootfs's View, all of it is one mount (the parts are not mounts of their
// own), read-only, nosuid and nodev.
func TestUsrShowsOnlyItsParts(t *testing.T) {
	l := newTestLauncher(t, 0)
	root := rootOf(t, l, rootfs.Python)
	if root.View == nil {
		t.Fatal("the host rootfs has no view of /usr on this host (its state directory is inside /usr, or takes no trusted attributes)")
	}
	res := run(t, l, rootfs.Python, `
import json, os
shown = {}
for d in ["/usr", "/usr/lib", "/usr/share"]:
    for e in os.scandir(d):
        links = e.is_dir(follow_symlinks=False) and all(c.is_symlink() for c in os.scandir(e.path))
        shown[e.path] = links
mounts = [l.split()[4] + " " + l.split()[5] for l in open("/proc/self/mountinfo") if l.split()[4].startswith("/usr")]
print(json.dumps({"shown": shown, "mounts": mounts}))
`)
	var got struct {
		Shown  map[string]bool
		Mounts []string
	}
	if err := json.Unmarshal([]byte(res.Stdout), &got); err != nil || !res.Succeeded() {
		t.Fatalf("got %s %q (stderr %q): %v", res.End, res.Stdout, res.Stderr, err)
	}
	for p, links := range got.Shown {
		ok := links // a folder of links, copied (/usr/lib64, /usr/lib/ssl)
		for _, b := range root.Binds {
			ok = ok || b.Target == p || strings.HasPrefix(b.Target, p+"/")
		}
		if !ok {
			t.Errorf("%s shows in the run, want only the bound parts of /usr", p)
		}
	}
	for _, b := range root.Binds {
		listed := slices.Contains([]string{"/usr", "/usr/lib", "/usr/share"}, filepath.Dir(b.Target))
		if _, ok := got.Shown[b.Target]; listed && !ok {
			t.Errorf("%s: not in the run, want it shown", b.Target)
		}
	}
	// /usr, and over the interpreters their copies (copies.go).
	want := []string{"/usr"}
	for _, c := range l.copiesFor(root) {
		want = append(want, c.Target)
	}
	var points []string
	for _, m := range got.Mounts {
		point, opts, _ := strings.Cut(m, " ")
		points = append(points, point)
		if !strings.HasPrefix(opts, "ro,nosuid,nodev,") {
			t.Errorf("%s: mounted %s, want read-only, nosuid and nodev", point, opts)
		}
	}
	if !slices.Equal(points, want) {
		t.Errorf("got the mounts %q under /usr, want %q", got.Mounts, want)
	}
}

// TestAttach: Spec.Attach gets the init of the run's own network namespace (from
// the pool too), its environment reaches the program, and its failure ends the
// run before the program starts.
func TestAttach(t *testing.T) {
	for _, pool := range []int{0, 1} {
		t.Run(fmt.Sprintf("pool=%d", pool), func(t *testing.T) {
			l := newTestLauncher(t, pool)
			var netns string
			res := run(t, l, rootfs.Python, `import os; print(os.readlink('/proc/self/ns/net'), os.environ['HTTP_PROXY'])`, func(s *Spec) {
				s.Attach = func(pid int) (map[string]string, error) {
					var err error
					netns, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
					return map[string]string{"HTTP_PROXY": "http://127.0.0.1:3128"}, err
				}
			})
			if want := netns + " http://127.0.0.1:3128\n"; !res.Succeeded() || res.Stdout != want {
				t.Errorf("got %s %q (stderr %q), want %q", res.End, res.Stdout, res.Stderr, want)
			}
			host, _ := os.Readlink("/proc/self/ns/net")
			if netns == "" || netns == host {
				t.Errorf("Attach saw network namespace %q, want the run's own (the host's is %q)", netns, host)
			}
			res = run(t, l, rootfs.Python, `print("ran")`, func(s *Spec) {
				s.Attach = func(int) (map[string]string, error) { return nil, errors.New("no proxy today") }
			})
			if res.End != EndInternal || res.Step != "network" || res.Stdout != "" || !strings.Contains(res.Message, "no proxy today") {
				t.Errorf("a failed Attach: got %s step %q stdout %q message %q, want internal at step network, no output", res.End, res.Step, res.Stdout, res.Message)
			}
			res = run(t, l, rootfs.Python, `print("ran")`, func(s *Spec) {
				s.Attach = func(int) (map[string]string, error) { return map[string]string{"PATHX": "1"}, nil }
			})
			if res.End != EndInternal || res.Stdout != "" {
				t.Errorf("Attach setting a name brig does not reserve: got %s stdout %q, want internal", res.End, res.Stdout)
			}
		})
	}
}

// TestMounts: a run sees a read-only mount it can't write or remount and a
// writable one whose files land on the host, in a pooled sandbox too; the host
// directory of the read-only one is unchanged afterwards.
func TestMounts(t *testing.T) {
	for _, pool := range []int{0, 1} {
		t.Run(fmt.Sprintf("pool=%d", pool), func(t *testing.T) {
			l := newTestLauncher(t, pool)
			layer, staging := t.TempDir(), t.TempDir()
			if err := os.WriteFile(filepath.Join(layer, "mod.py"), []byte("VALUE = 42\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			before := treeDigest(t, layer)
			got := probe(t, l, rootfs.Python, pyTrial+`
import sys
sys.path.insert(0, '/opt/brig/layer')
import mod
r['import'] = str(mod.VALUE)
r['write layer'] = trial(lambda: write('/opt/brig/layer/mod.py', b'VALUE = 0'))
r['new in layer'] = trial(lambda: write('/opt/brig/layer/x.py'))
r['write staging'] = trial(lambda: write('/tmp/staging/out.txt', b'from the run'))
r['staging owner'] = str(os.stat('/tmp/staging').st_uid)
`+pyDump, func(s *Spec) {
				s.Mounts = []Mount{{Source: staging, Target: "/tmp/staging", Writable: true}, {Source: layer, Target: "/opt/brig/layer"}}
			})
			checkProbe(t, got, []check{
				{name: "import from the layer", key: "import", want: "42"},
				{name: "layer file read-only", key: "write layer", wantAny: []string{"EROFS", "EACCES"}},
				{name: "no new file in the layer", key: "new in layer", wantAny: []string{"EROFS", "EACCES"}},
				{name: "staging writable", key: "write staging", want: "ok"},
				{name: "staging the program's", key: "staging owner", want: "1000"},
			})
			if b, err := os.ReadFile(filepath.Join(staging, "out.txt")); err != nil || string(b) != "from the run" {
				t.Errorf("the staging file on the host: got %q, %v", b, err)
			}
			if after := treeDigest(t, layer); after != before {
				t.Errorf("the layer changed: digest %s, was %s", after, before)
			}
			res := run(t, l, rootfs.Python, "print(1)", func(s *Spec) {
				s.Mounts = []Mount{{Source: layer, Target: "relative"}}
			})
			if res.End != EndInternal || res.Step != "mounts" {
				t.Errorf("a relative mount target: got %s step %q, want internal at mounts", res.End, res.Step)
			}
		})
	}
}
