package jail

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/jail/reaper"
	"github.com/brig-sandbox/brig/rootfs"
)

// TestNamespacesFromInside: the program is an unprivileged user that sees only its
// own processes, host name, network, IPC objects and cgroup.
func TestNamespacesFromInside(t *testing.T) {
	l := newTestLauncher(t, 0)
	// A System V segment on the host, which the run's IPC namespace must not show.
	const shmKey = 0x62726967 // "brig"
	id, err := unix.SysvShmGet(shmKey, 4096, unix.IPC_CREAT|unix.IPC_EXCL|0o600)
	if err != nil {
		t.Fatalf("creating a host shm segment: %v", err)
	}
	t.Cleanup(func() { unix.SysvShmCtl(id, unix.IPC_RMID, nil) })
	hostShm, _ := os.ReadFile("/proc/sysvipc/shm")
	if !strings.Contains(string(hostShm), fmt.Sprint(shmKey)) {
		t.Fatalf("host /proc/sysvipc/shm does not show key %d: the IPC check would prove nothing", shmKey)
	}

	// A host TCP listener on loopback and an abstract unix socket: both belong to
	// the host's network namespace, which the run's must not reach.
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	abstract := fmt.Sprintf("@brig-adversary-%d", os.Getpid())
	unixLn, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer unixLn.Close()

	got := probe(t, l, rootfs.Python, pyTrial+`
import socket
def connect_tcp():
    s = socket.create_connection(('127.0.0.1', `+fmt.Sprint(tcp.Addr().(*net.TCPAddr).Port)+`), timeout=2)
    s.close()
r['host tcp'] = trial(connect_tcp)
def connect_abstract():
    s = socket.socket(socket.AF_UNIX)
    try: s.connect('\0' + `+pyString(abstract[1:])+`)
    finally: s.close()
r['host abstract socket'] = trial(connect_abstract)
r['ids'] = '%d/%d/%d %d/%d/%d' % (os.getresuid() + os.getresgid())
r['groups'] = repr(os.getgroups())
r['home'] = os.environ.get('HOME', '')
r['expanduser'] = os.path.expanduser('~')
r['cwd'] = os.getcwd()
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
r['pids'] = ' '.join(str(p) for p in pids)
r['me'] = str(os.getpid())
r['ppid'] = str(os.getppid())
r['kernel ppid'] = [l.split()[1] for l in open('/proc/self/status') if l.startswith('PPid:')][0]
r['pid1 argv'] = ' '.join(a.decode() for a in open('/proc/1/cmdline', 'rb').read().split(b'\0') if a)
r['hostname'] = socket.gethostname()
r['nodename'] = os.uname().nodename
r['proc hostname'] = open('/proc/sys/kernel/hostname').read().strip()
r['etc hostname'] = open('/etc/hostname').read().strip()
r['interfaces'] = ' '.join(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]))
r['sys exists'] = str(os.path.lexists('/sys'))
def loopback():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)
    c = socket.create_connection(s.getsockname(), timeout=2)
    a, _ = s.accept(); c.sendall(b'ping'); v = a.recv(4).decode()
    for x in (a, c, s): x.close()
    return v
r['loopback'] = trial(loopback)
def outside():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try: u.connect(('1.1.1.1', 53))
    finally: u.close()
r['route out'] = trial(outside)
r['shm segments'] = str(len(open('/proc/sysvipc/shm').read().splitlines()) - 1)
r['cgroup paths'] = ' '.join(sorted(set(l.split(':', 2)[2] for l in open('/proc/self/cgroup').read().splitlines())))
`+pyDump)
	pid := got["me"]
	// The program's parent is the init (1), but on the warm path: a warm
	// Python program's is the zygote that forked it, outside the run's pid
	// namespace, which the kernel gives as 0 (an accepted difference);
	// os.getppid() says 1 there too, as cold (zygote.py).
	kernelPPid := "1"
	if testWarm {
		kernelPPid = "0"
	}
	// Pid 1 is the reaper where it is on (rootbuild.go): in a zygote's
	// sandbox, and in any other, whose program it starts; else the Go init.
	pid1Argv := "brig " + pid1.InitArg
	if l.reaper != nil && (testWarm || !programReaperOff) {
		pid1Argv = "brig " + reaper.Arg
	}
	checkProbe(t, got, []check{
		{name: "uid and gid 1000", key: "ids", want: "1000/1000/1000 1000/1000/1000"},
		{name: "no supplementary groups", key: "groups", want: "[]"},
		{name: "HOME", key: "home", want: "/sandbox"},
		{name: "home directory", key: "expanduser", want: "/sandbox"},
		{name: "cwd", key: "cwd", want: "/sandbox"},
		{name: "only the init and the program", key: "pids", want: "1 " + pid},
		{name: "program is not PID 1", key: "ppid", want: "1"},
		{name: "the kernel's parent", key: "kernel ppid", want: kernelPPid},
		{name: "PID 1 is the init", key: "pid1 argv", want: pid1Argv},
		{name: "hostname", key: "hostname", want: "sandbox"},
		{name: "uname nodename", key: "nodename", want: "sandbox"},
		{name: "proc hostname", key: "proc hostname", want: "sandbox"},
		{name: "etc hostname", key: "etc hostname", want: "sandbox"},
		{name: "only lo", key: "interfaces", want: "lo"},
		{name: "no sysfs", key: "sys exists", want: "False"},
		{name: "lo is up", key: "loopback", want: "ping"},
		{name: "no route out", key: "route out", want: "ENETUNREACH"},
		{name: "host loopback listener", key: "host tcp", want: "ECONNREFUSED"},
		{name: "host abstract unix socket", key: "host abstract socket", want: "ECONNREFUSED"},
		{name: "host shm invisible", key: "shm segments", want: "0"},
		{name: "cgroup namespace root", key: "cgroup paths", want: "/"},
	})
	if pid == "1" {
		t.Errorf("program pid: got 1, want not 1")
	}
}

// TestCapabilitiesFromInside: no capability in any set, no_new_privs, a seccomp
// filter, for both interpreters and for a program they exec.
func TestCapabilitiesFromInside(t *testing.T) {
	l := newTestLauncher(t, 0)
	fields := []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"}
	want := map[string]string{
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
	}
	for _, tc := range []struct {
		name string
		lang rootfs.Language
		code string
	}{
		{"python", rootfs.Python, "print(open('/proc/self/status').read())"},
		{"javascript", rootfs.JavaScript, "console.log(require('fs').readFileSync('/proc/self/status', 'utf8'))"},
		{"exec'd child", rootfs.Python, "import subprocess; print(subprocess.run(['/usr/bin/cat', '/proc/self/status'], capture_output=True, text=True, check=True).stdout)"},
		{"forked thread", rootfs.Python, "import threading, os\nout = []\nt = threading.Thread(target=lambda: out.append(open('/proc/thread-self/status').read())); t.start(); t.join(); print(out[0])"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, l, tc.lang, tc.code)
			got := map[string]string{}
			for _, line := range strings.Split(res.Stdout, "\n") {
				k, v, ok := strings.Cut(line, ":")
				if ok {
					got[k] = strings.TrimSpace(v)
				}
			}
			for _, f := range fields {
				if got[f] != want[f] {
					t.Errorf("%s: got %q, want %q (stderr %q)", f, got[f], want[f], res.Stderr)
				}
			}
		})
	}
}

// TestFilesystemFromInside: the host's files are out of sight, the system folders
// are read-only, /proc and /dev are trimmed, and the scratch folders are writable.
func TestFilesystemFromInside(t *testing.T) {
	l := newTestLauncher(t, 0)
	hostTmp := t.TempDir()
	if err := os.WriteFile(filepath.Join(hostTmp, "secret"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostEtcHostname, _ := os.ReadFile("/etc/hostname")
	usrLibWrite := "EROFS"
	if rootOf(t, l, rootfs.Python).View == nil {
		usrLibWrite = "EACCES"
	}
	absent := []string{"/root", "/home", "/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh", "/var/lib", "/var/log", "/var/cache", "/var/run", "/run", "/sys", "/work", "/boot", "/mnt", "/opt", "/srv",
		hostTmp, filepath.Join(hostTmp, "secret"), l.cfg.StateDir, l.scratch, "/dev/mqueue", "/dev/mem", "/dev/kmsg", "/proc/1/root/work"}
	var paths []string
	for _, p := range absent {
		paths = append(paths, pyString(p))
	}
	const marker = "brig-filesystem-probe-marker"
	got := probe(t, l, rootfs.Python, pyTrial+`
import stat
# `+marker+`
for p in [`+strings.Join(paths, ", ")+`]:
    r['exists ' + p] = str(os.path.lexists(p))
r['etc hostname'] = open('/etc/hostname').read()
r['var'] = ' '.join(sorted(os.listdir('/var'))) + ': ' + ' '.join(sorted(os.listdir('/var/tmp')))
r['write /usr/bin/x'] = trial(lambda: write('/usr/bin/x'))
r['mkdir /usr/lib/x'] = trial(lambda: os.mkdir('/usr/lib/x'))
r['mkdir /usr/lib/python3/x'] = trial(lambda: os.mkdir('/usr/lib/python3/x'))
r['write /etc/passwd'] = trial(lambda: write('/etc/passwd'))
r['write /etc/new'] = trial(lambda: write('/etc/new'))
r['write /'] = trial(lambda: write('/x'))
r['usr flags'] = str(bool(os.statvfs('/usr/bin').f_flag & os.ST_RDONLY)) + ' ' + str(bool(os.statvfs('/usr/bin').f_flag & os.ST_NOSUID))
r['proc sys read-only'] = str(bool(os.statvfs('/proc/sys').f_flag & os.ST_RDONLY))
r['write /proc/sys/kernel/hostname'] = trial(lambda: write('/proc/sys/kernel/hostname', b'evil'))
r['read /proc/kcore'] = trial(lambda: repr(open('/proc/kcore', 'rb').read(64)))
r['read /proc/keys'] = trial(lambda: repr(open('/proc/keys', 'rb').read(64)))
r['write /proc/sysrq-trigger'] = trial(lambda: write('/proc/sysrq-trigger', b'h'))
r['dev'] = ' '.join(sorted(os.listdir('/dev')))
for n in ['null', 'zero', 'full', 'random', 'urandom', 'tty']:
    st = os.stat('/dev/' + n)
    r['node ' + n] = '%s %d:%d' % ('c' if stat.S_ISCHR(st.st_mode) else '?', os.major(st.st_rdev), os.minor(st.st_rdev))
r['links'] = ' '.join('%s>%s' % (n, os.readlink('/dev/' + n)) for n in ['core', 'fd', 'stderr', 'stdin', 'stdout'])
r['read /dev/zero'] = trial(lambda: repr(open('/dev/zero', 'rb').read(4)))
r['write /dev/full'] = trial(lambda: write('/dev/full'))
r['mknod /tmp char'] = trial(lambda: os.mknod('/tmp/null', stat.S_IFCHR | 0o666, os.makedev(1, 3)))
r['mknod /dev/shm block'] = trial(lambda: os.mknod('/dev/shm/sda', stat.S_IFBLK | 0o666, os.makedev(8, 0)))
r['mknod /sandbox char'] = trial(lambda: os.mknod('/sandbox/mem', stat.S_IFCHR | 0o666, os.makedev(1, 1)))
r['mknod /dev char'] = trial(lambda: os.mknod('/dev/mem', stat.S_IFCHR | 0o666, os.makedev(1, 1)))
r['mkfifo /tmp'] = trial(lambda: os.mkfifo('/tmp/fifo'))
for d in ['/tmp', '/sandbox', '/dev/shm']:
    r['write ' + d] = trial(lambda: write(d + '/file', b'data') or open(d + '/file', 'rb').read().decode())
r['script path'] = os.path.abspath(__file__) + ' ' + sys.argv[0]
r['script has code'] = str('`+marker+`' in open('/sandbox/main.py').read())
r['script owner'] = '%d:%d' % (os.stat('/sandbox/main.py').st_uid, os.stat('/sandbox/main.py').st_gid)
r['sandbox owner'] = '%d:%d' % (os.stat('/sandbox').st_uid, os.stat('/sandbox').st_gid)
# readdir's inode numbers are stat's, through the root's overlay and the host
# folders' views (CPython's test_os.TestScandir.test_attributes checks it), but
# at a mount point, where stat gives the mounted root's, as on any host.
stdlib = os.path.dirname(os.__file__)
r['scandir inodes'] = str([e.path for d in ['/', '/etc', '/usr/bin', stdlib, stdlib + '/json']
                           for e in os.scandir(d)
                           if e.inode() != e.stat(follow_symlinks=False).st_ino and not os.path.ismount(e.path)])
`+pyDump)
	checks := []check{
		{name: "etc hostname is not the host's", key: "etc hostname", want: "sandbox\n"},
		// The skeleton's own /var: an empty tmp, nothing of the host's.
		{name: "var holds only an empty tmp", key: "var", want: "tmp: "},
		{name: "write /usr/bin/x", key: "write /usr/bin/x", want: "EROFS"},
		// /usr/lib is part of the read-only view of /usr, or, without one, a
		// root-owned folder of the lower layer.
		{name: "mkdir /usr/lib/x", key: "mkdir /usr/lib/x", want: usrLibWrite},
		{name: "mkdir /usr/lib/python3/x", key: "mkdir /usr/lib/python3/x", want: "EROFS"},
		{name: "write /etc/passwd", key: "write /etc/passwd", want: "EACCES"},
		{name: "write /etc/new", key: "write /etc/new", want: "EACCES"},
		{name: "write /", key: "write /", want: "EACCES"},
		{name: "usr/bin read-only nosuid", key: "usr flags", want: "True True"},
		{name: "proc sys read-only", key: "proc sys read-only", want: "True"},
		{name: "write /proc/sys", key: "write /proc/sys/kernel/hostname", wantAny: []string{"EROFS", "EACCES"}},
		{name: "kcore masked", key: "read /proc/kcore", wantAny: ifHostHas(t, "/proc/kcore", "b''")},
		{name: "keys masked", key: "read /proc/keys", wantAny: ifHostHas(t, "/proc/keys", "b''")},
		{name: "sysrq-trigger not writable", key: "write /proc/sysrq-trigger", wantAny: ifHostHas(t, "/proc/sysrq-trigger", "EROFS", "EACCES", "EPERM")},
		{name: "dev entries", key: "dev", want: "core fd full null ptmx pts random shm stderr stdin stdout tty urandom zero"},
		{name: "null", key: "node null", want: "c 1:3"},
		{name: "zero", key: "node zero", want: "c 1:5"},
		{name: "full", key: "node full", want: "c 1:7"},
		{name: "random", key: "node random", want: "c 1:8"},
		{name: "urandom", key: "node urandom", want: "c 1:9"},
		{name: "tty", key: "node tty", want: "c 5:0"},
		{name: "dev links", key: "links", want: "core>/proc/kcore fd>/proc/self/fd stderr>/proc/self/fd/2 stdin>/proc/self/fd/0 stdout>/proc/self/fd/1"},
		{name: "dev zero reads", key: "read /dev/zero", want: `b'\x00\x00\x00\x00'`},
		{name: "dev full", key: "write /dev/full", want: "ENOSPC"},
		{name: "mknod char in /tmp", key: "mknod /tmp char", want: "EPERM"},
		{name: "mknod block in /dev/shm", key: "mknod /dev/shm block", want: "EPERM"},
		{name: "mknod char in /sandbox", key: "mknod /sandbox char", want: "EPERM"},
		{name: "mknod in /dev", key: "mknod /dev char", wantAny: []string{"EPERM", "EACCES"}},
		{name: "mkfifo allowed", key: "mkfifo /tmp", want: "ok"},
		{name: "tmp writable", key: "write /tmp", want: "data"},
		{name: "sandbox writable", key: "write /sandbox", want: "data"},
		{name: "dev shm writable", key: "write /dev/shm", want: "data"},
		{name: "script path", key: "script path", want: "/sandbox/main.py /sandbox/main.py"},
		{name: "script is the code", key: "script has code", want: "True"},
		{name: "script owned by the sandbox user", key: "script owner", want: "1000:1000"},
		{name: "sandbox owned by the sandbox user", key: "sandbox owner", want: "1000:1000"},
		{name: "readdir's inode numbers are stat's", key: "scandir inodes", want: "[]"},
	}
	for _, p := range absent {
		checks = append(checks, check{name: "absent " + p, key: "exists " + p, want: "False"})
	}
	if string(hostEtcHostname) == "sandbox\n" {
		t.Logf("the host's /etc/hostname is %q too: the etc hostname check proves less", hostEtcHostname)
	}
	checkProbe(t, got, checks)
	if _, err := os.Stat("/usr/bin/x"); err == nil {
		t.Errorf("host /usr/bin/x: got a file, want none")
	}
}

// TestRunsCannotWatchSharedFiles: the files a run reads from the host (the
// rootfs's host folders, a read-only mount such as a package layer) are
// inodes of its sandbox's own, so that it can't see who else uses them. With
// a bind they were the host's: an inotify watch on one saw the host's and
// every other run's opens and reads of it, and an flock on one was held
// against all of them. The test holds an exclusive flock on each file and
// reads it over and over, on the host, for the whole run; the run watches
// each one, waits, and then locks and reads it itself, which its own watch
// must see (so that a watch that sees nothing proves something).
func TestRunsCannotWatchSharedFiles(t *testing.T) {
	l := newTestLauncher(t, 0)
	root := rootOf(t, l, rootfs.Python)
	if len(root.Binds) == 0 {
		t.Fatalf("the host rootfs binds no host folder: nothing to check")
	}
	var hostFile, runFile string
	for _, b := range root.Binds {
		entries, err := os.ReadDir(b.Source)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Type().IsRegular() {
				hostFile, runFile = filepath.Join(b.Source, e.Name()), filepath.Join(b.Target, e.Name())
				break
			}
		}
		if hostFile != "" {
			break
		}
	}
	if hostFile == "" {
		t.Fatalf("no regular file in the rootfs's host folders %v", root.Binds)
	}
	layer := t.TempDir()
	layerFile := filepath.Join(layer, "mod.py")
	if err := os.WriteFile(layerFile, []byte("VALUE = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{hostFile: runFile, layerFile: "/opt/brig/layer/mod.py"}
	// The interpreters' copies (copies.go): one file of the service's, which
	// every sandbox shows.
	for _, cp := range l.copiesFor(root) {
		files[fmt.Sprintf("/proc/self/fd/%d/%s", l.copies.mnt.Fd(), l.copies.path(cp.Name))] = cp.Target
	}
	// The host's side: a lock on each file, and reads until the run ends.
	stop := make(chan struct{})
	done := make(chan struct{})
	var opened []*os.File
	for host := range files {
		f, err := os.Open(host)
		if err != nil {
			t.Fatal(err)
		}
		opened = append(opened, f)
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			t.Fatalf("locking %s on the host: %v", host, err)
		}
	}
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			for host := range files {
				os.ReadFile(host)
			}
		}
	}()
	defer func() {
		for _, f := range opened {
			f.Close()
		}
	}()
	var paths []string
	for _, in := range files {
		paths = append(paths, pyString(in))
	}
	got := probe(t, l, rootfs.Python, pyTrial+`
import ctypes, fcntl, select, time
libc = ctypes.CDLL(None, use_errno=True)
def events(fd):
    n = 0
    while select.select([fd], [], [], 0)[0]:
        n += len(os.read(fd, 65536)) // 16  # struct inotify_event, no name for a file's watch
    return n
for p in [`+strings.Join(paths, ", ")+`]:
    fd = libc.inotify_init1(0)
    if fd < 0 or libc.inotify_add_watch(fd, p.encode(), 0x1 | 0x20 | 0x10) < 0:  # IN_ACCESS, IN_OPEN, IN_CLOSE_NOWRITE
        r[p] = 'watch: ' + os.strerror(ctypes.get_errno())
        continue
    time.sleep(0.3)
    others = events(fd)
    with open(p, 'rb') as f:
        lock = trial(lambda: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB))
        f.read()
    r[p] = 'others %d, lock %s, own %s' % (others, lock, 'seen' if events(fd) else 'unseen')
`+pyDump, func(s *Spec) {
		s.Mounts = []Mount{{Source: layer, Target: "/opt/brig/layer"}}
	})
	close(stop)
	<-done
	var checks []check
	for _, in := range files {
		checks = append(checks, check{name: "no other's access nor lock on " + in, key: in, want: "others 0, lock ok, own seen"})
	}
	checkProbe(t, got, checks)
}

// ifHostHas is want when the host has path, and ENOENT (the kernel lacks the file,
// so there is nothing to mask) when it does not.
func ifHostHas(tb testing.TB, path string, want ...string) []string {
	if _, err := os.Lstat(path); err != nil {
		tb.Logf("this kernel has no %s: checking that the run has none either", path)
		return []string{"ENOENT"}
	}
	return want
}

// TestScriptPathJavaScript: node's program is /sandbox/main.js.
func TestScriptPathJavaScript(t *testing.T) {
	l := newTestLauncher(t, 0)
	res := run(t, l, rootfs.JavaScript, "console.log(__filename, process.cwd(), require('os').hostname(), process.getuid())")
	if want := "/sandbox/main.js /sandbox sandbox 1000\n"; res.Stdout != want {
		t.Fatalf("got %q (stderr %q), want %q", res.Stdout, res.Stderr, want)
	}
}

// TestScratchIsFreshPerRun: what one run writes is gone for the next, pooled or
// not; /tmp, /var/tmp, /sandbox and /dev/shm are the run's to write.
func TestScratchIsFreshPerRun(t *testing.T) {
	for _, pool := range []int{0, 1} {
		t.Run(fmt.Sprintf("pool %d", pool), func(t *testing.T) {
			l := newTestLauncher(t, pool)
			dirs := []string{"/tmp", "/var/tmp", "/sandbox", "/dev/shm"}
			first := probe(t, l, rootfs.Python, pyTrial+`
for d in ['/tmp', '/var/tmp', '/sandbox', '/dev/shm']:
    r[d] = trial(lambda: write(d + '/left-behind', b'1'))
`+pyDump)
			for _, d := range dirs {
				if first[d] != "ok" {
					t.Fatalf("first run writing %s: got %q, want ok", d, first[d])
				}
			}
			second := probe(t, l, rootfs.Python, pyTrial+`
for d in ['/tmp', '/var/tmp', '/sandbox', '/dev/shm']:
    r[d] = ' '.join(sorted(os.listdir(d)))
`+pyDump)
			checkProbe(t, second, []check{
				{name: "tmp", key: "/tmp", want: ""},
				{name: "var tmp", key: "/var/tmp", want: ""},
				{name: "sandbox", key: "/sandbox", want: "main.py"},
				{name: "dev shm", key: "/dev/shm", want: ""},
			})
		})
	}
}

// TestHostRootfsUnchanged: a program that writes everywhere it can leaves the
// rootfs's lower layer and the host's scratch mount point as they were.
func TestHostRootfsUnchanged(t *testing.T) {
	l := newTestLauncher(t, 0)
	root := rootOf(t, l, rootfs.Python)
	before := treeDigest(t, root.Lower)
	res := run(t, l, rootfs.Python, pyTrial+`
import shutil
for d in ['/tmp', '/sandbox', '/dev/shm', '/etc', '/', '/usr/local']:
    trial(lambda: write(d + '/planted', b'x' * 4096))
for p in ['/etc/passwd', '/etc/hosts', '/etc/hostname', '/sandbox/main.py']:
    trial(lambda: write(p, b'changed'))
    trial(lambda: os.chmod(p, 0o777))
trial(lambda: os.chmod('/sandbox', 0o777))
trial(lambda: os.chmod('/tmp', 0o700))
trial(lambda: os.remove('/etc/passwd'))
trial(lambda: shutil.rmtree('/etc'))
trial(lambda: os.rename('/sandbox', '/sandbox2'))
trial(lambda: os.symlink('/etc/passwd', '/sandbox/link'))
print('done')
`)
	if res.Stdout != "done\n" {
		t.Fatalf("got stdout %q stderr %q, want done", res.Stdout, res.Stderr)
	}
	if after := treeDigest(t, root.Lower); after != before {
		t.Errorf("lower layer %s: got digest %s after the run, want %s (unchanged)", root.Lower, after, before)
	}
	ents, err := os.ReadDir(l.scratch)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("host scratch mount point %s: got %d entries, want empty", l.scratch, len(ents))
	}
}

// treeDigest hashes every path, mode, owner and content under dir.
func treeDigest(tb testing.TB, dir string) string {
	tb.Helper()
	h := sha256.New()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s %o %d:%d %d", strings.TrimPrefix(p, dir), st.Mode, st.Uid, st.Gid, st.Size)
		if d.Type().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			fh := sha256.New()
			io.Copy(fh, f)
			f.Close()
			line += " " + hex.EncodeToString(fh.Sum(nil))
		}
		if d.Type()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		tb.Fatalf("walking %s: %v", dir, err)
	}
	sort.Strings(lines)
	for _, l := range lines {
		h.Write([]byte(l + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestIdentityFromInside: rlimits, the exact environment, the open descriptors and
// stdin.
func TestIdentityFromInside(t *testing.T) {
	t.Setenv("BRIG_HOST_ONLY_SECRET", "host-value")
	l := newTestLauncher(t, 0)
	// Reserved names are refused outright (TestEnvCannotOverrideBrig).
	env := map[string]string{"REQUEST_VAR": "from the request"}
	wantEnv := map[string]string{"REQUEST_VAR": "from the request"}
	for k, v := range brigEnv {
		wantEnv[k] = v
	}
	if wantEnv["HOME"] != "/sandbox" || wantEnv["TMPDIR"] != "/tmp" {
		t.Fatalf("brig's environment: got HOME %q TMPDIR %q, want /sandbox and /tmp", wantEnv["HOME"], wantEnv["TMPDIR"])
	}
	wantJSON := mustJSON(t, wantEnv)

	got := probe(t, l, rootfs.Python, pyTrial+`
import resource, stat
for name in ['CORE', 'NOFILE', 'STACK']:
    r['rlimit ' + name] = '%d %d' % resource.getrlimit(getattr(resource, 'RLIMIT_' + name))
r['env'] = json.dumps(dict(os.environ), sort_keys=True, separators=(',', ':'))
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
r['fds'] = ' '.join(str(fd) for fd in range(0, 4096) if is_open(fd))
r['stdin'] = os.readlink('/proc/self/fd/0')
st = os.fstat(0)
r['stdin node'] = '%d:%d' % (os.major(st.st_rdev), os.minor(st.st_rdev)) if stat.S_ISCHR(st.st_mode) else 'not a device'
r['stdin read'] = repr(sys.stdin.read())
`+pyDump, withEnv(env))
	checkProbe(t, got, []check{
		{name: "RLIMIT_CORE (1: no pipe or file dumps)", key: "rlimit CORE", want: "1 1"},
		{name: "RLIMIT_NOFILE", key: "rlimit NOFILE", want: "4096 4096"},
		{name: "RLIMIT_STACK", key: "rlimit STACK", want: fmt.Sprintf("%d %d", 8<<20, 8<<20)},
		{name: "environment", key: "env", want: wantJSON},
		{name: "only 0 1 2 open", key: "fds", want: "0 1 2"},
		{name: "stdin is /dev/null", key: "stdin", want: "/dev/null"},
		{name: "stdin device", key: "stdin node", want: "1:3"},
		{name: "stdin empty", key: "stdin read", want: "''"},
	})

	t.Run("javascript environment", func(t *testing.T) {
		res := run(t, l, rootfs.JavaScript, `const e = {}; for (const k of Object.keys(process.env).sort()) e[k] = process.env[k]; console.log(JSON.stringify(e))`, withEnv(env))
		if got := strings.TrimSpace(res.Stdout); got != wantJSON {
			t.Errorf("got %s (stderr %q), want %s", got, res.Stderr, wantJSON)
		}
	})
}

// TestInitNotInspectable: the program shares its uid with the init but cannot reach
// into it through /proc (its status pipe, memory, binary or environment).
func TestInitNotInspectable(t *testing.T) {
	l := newTestLauncher(t, 0)
	got := probe(t, l, rootfs.Python, pyTrial+`
r['fd dir'] = trial(lambda: os.listdir('/proc/1/fd'))
r['status pipe'] = trial(lambda: open('/proc/1/fd/4', 'wb').write(b'{"kind":"exit","wait_status":0}\n'))
r['mem'] = trial(lambda: open('/proc/1/mem', 'rb').read(1))
r['exe'] = trial(lambda: open('/proc/1/exe', 'rb').read(4))
r['environ'] = trial(lambda: open('/proc/1/environ', 'rb').read())
r['root'] = trial(lambda: os.listdir('/proc/1/root'))
r['cwd'] = trial(lambda: os.readlink('/proc/1/cwd'))
`+pyDump)
	denied := []string{"EACCES", "EPERM"}
	var checks []check
	for _, k := range []string{"fd dir", "status pipe", "mem", "exe", "environ", "root", "cwd"} {
		checks = append(checks, check{name: k, key: k, wantAny: denied})
	}
	checkProbe(t, got, checks)
}

// TestEnvCannotOverrideBrig: however a request spells a name, each of brig's names
// reaches the program exactly once, with brig's value (getenv takes the first
// match, so a second PATH in the environment block is an override).
func TestEnvCannotOverrideBrig(t *testing.T) {
	l := newTestLauncher(t, 0)
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"reserved names", map[string]string{"PATH": "/evil", "HOME": "/root", "LANG": "C"}},
		{"reserved names with '=' inside", map[string]string{"PATH=/evil": "x", "HOME=/root": "y"}},
		{"lower case", map[string]string{"path": "/evil"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := Spec{Language: rootfs.Python, Timeout: 10 * time.Second, MemoryBytes: 256 << 20, Env: tc.env,
				Code: "import sys\nsys.stdout.write('\\n'.join(v for v in open('/proc/self/environ').read().split('\\0') if v))"}
			res, err := launch(context.Background(), l, spec)
			if errors.Is(err, ErrInvalidSpec) {
				return // refusing the request is as good
			}
			if err != nil {
				t.Fatalf("Run: got %v, want a result or ErrInvalidSpec", err)
			}
			if err := checkPath(l, spec, res); err != nil {
				t.Error(err)
			}
			seen := map[string][]string{}
			for _, kv := range strings.Split(res.Stdout, "\n") {
				k, v, _ := strings.Cut(kv, "=")
				seen[k] = append(seen[k], v)
			}
			for k, v := range brigEnv {
				if got := seen[k]; len(got) != 1 || got[0] != v {
					t.Errorf("%s in the program's environment: got %q, want exactly [%q]", k, got, v)
				}
			}
		})
	}
}

// TestRunRejectsInvalidEnv: an environment outside API.md's bounds is ErrInvalidSpec,
// not a run (nor a sandbox that fails to start, reported as internal).
func TestRunRejectsInvalidEnv(t *testing.T) {
	l := newTestLauncher(t, 0)
	many := map[string]string{}
	for i := range 51 {
		many[fmt.Sprintf("V%d", i)] = "x"
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"NUL in a value", map[string]string{"X": "a\x00b"}},
		{"empty name", map[string]string{"": "v"}},
		{"name starting with a digit", map[string]string{"1A": "v"}},
		{"'=' in a name", map[string]string{"A=B": "v"}},
		{"51 entries", many},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := l.Run(context.Background(), Spec{Language: rootfs.Python, Code: "print(1)", Timeout: 10 * time.Second, MemoryBytes: 256 << 20, Env: tc.env})
			if !errors.Is(err, ErrInvalidSpec) {
				desc := "no result"
				if res != nil {
					desc = fmt.Sprintf("outcome %s reason %q message %q", res.End, res.Step, res.Message)
				}
				t.Errorf("got error %v (%s), want ErrInvalidSpec", err, desc)
			}
		})
	}
}
