package jail

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/rootfs"
)

// TestPoolRunsAreFresh: runs taken from a pool, two at a time, with different
// memory limits and languages, each get a sandbox of their own with its own size,
// and Close (checked by newTestLauncher's leak check) leaves nothing behind.
func TestPoolRunsAreFresh(t *testing.T) {
	l := newTestLauncher(t, 2)
	const runs = 10
	type outcome struct {
		got  map[string]string
		want map[string]string
	}
	results := make([]outcome, runs)
	var wg sync.WaitGroup
	jobs := make(chan int)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				memMiB := []int64{512, 256, 128}[i%3]
				mark := fmt.Sprintf("run-%d", i)
				want := map[string]string{
					"tmp":      mark,
					"dev shm":  mark,
					"sandbox":  "main.py " + mark,
					"pids":     "2",
					"scratch":  fmt.Sprint(ScratchBytes(memMiB << 20)),
					"hostname": "sandbox",
				}
				code := pyTrial + fmt.Sprintf(`
import socket
for d in ['/tmp', '/dev/shm', '/sandbox']:
    write(d + '/%[1]s')
r['tmp'] = ' '.join(sorted(os.listdir('/tmp')))
r['dev shm'] = ' '.join(sorted(os.listdir('/dev/shm')))
r['sandbox'] = ' '.join(sorted(os.listdir('/sandbox')))
r['pids'] = str(len([p for p in os.listdir('/proc') if p.isdigit()]))
st = os.statvfs('/tmp')
r['scratch'] = str(st.f_blocks * st.f_frsize)
r['hostname'] = socket.gethostname()
`, mark) + pyDump
				lang := rootfs.Python
				if i%4 == 3 {
					lang = rootfs.JavaScript
					code = fmt.Sprintf(`
const fs = require('fs');
for (const d of ['/tmp', '/dev/shm', '/sandbox']) fs.writeFileSync(d + '/%[1]s', 'x');
const ls = d => fs.readdirSync(d).sort().join(' ');
const st = fs.statfsSync('/tmp');
console.log(JSON.stringify({tmp: ls('/tmp'), 'dev shm': ls('/dev/shm'), sandbox: ls('/sandbox').replace('main.js', 'main.py'),
  pids: String(fs.readdirSync('/proc').filter(p => /^[0-9]+$/.test(p)).length), scratch: String(st.blocks * st.bsize),
  hostname: require('os').hostname()}));
`, mark)
				}
				got, err := tryProbe(l, lang, code, withMemoryMiB(memMiB))
				if err != nil {
					got = map[string]string{"error": err.Error()}
				}
				results[i] = outcome{got, want}
			}
		}()
	}
	for i := range runs {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	for i, r := range results {
		if e := r.got["error"]; e != "" {
			t.Errorf("run %d: %s", i, e)
			continue
		}
		for _, k := range []string{"tmp", "dev shm", "sandbox", "pids", "scratch", "hostname"} {
			if r.got[k] != r.want[k] {
				t.Errorf("run %d %s: got %q, want %q", i, k, r.got[k], r.want[k])
			}
		}
	}
}

// TestPoolRespectsEachRunsLimits: a pooled sandbox is prepared before its run's
// memory limit is known; the run still gets exactly its own limit and scratch size,
// smaller or larger than the pool's.
func TestPoolRespectsEachRunsLimits(t *testing.T) {
	l := newTestLauncher(t, 1)
	fill := "import errno\nn = 0\ntry:\n    with open('/tmp/fill', 'wb', buffering=0) as f:\n        while True:\n            n += f.write(b'x' * (1 << 20))\nexcept OSError as e:\n    print(errno.errorcode[e.errno], n)\n"
	for _, tc := range []struct {
		name   string
		memMiB int64
		code   string
		reason End
		stdout string
	}{
		{"smaller memory", 128, pyHog(256), EndMemory, ""},
		{"smaller scratch", 128, fill, EndCompleted, fmt.Sprint("ENOSPC ", ScratchBytes(128<<20))},
		{"larger memory", 1024, pyHog(704), EndCompleted, "allocated 704\n"},
		{"larger scratch", 1024, fill, EndCompleted, fmt.Sprint("ENOSPC ", ScratchBytes(1024<<20))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			time.Sleep(300 * time.Millisecond) // for the pool to refill
			res := run(t, l, rootfs.Python, tc.code, withMemoryMiB(tc.memMiB))
			if res.End != tc.reason {
				t.Errorf("got reason %q (message %q, stdout %q, stderr %.300q), want %q", res.End, res.Message, res.Stdout, res.Stderr, tc.reason)
			}
			if res.Usage.PeakMemoryBytes > tc.memMiB<<20 {
				t.Errorf("peak memory: got %d MiB, want at most %d", res.Usage.PeakMemoryBytes>>20, tc.memMiB)
			}
			if tc.stdout == "" {
				return
			}
			if strings.HasPrefix(tc.stdout, "ENOSPC ") {
				f := strings.Fields(res.Stdout)
				want, _ := strconv.ParseInt(strings.TrimPrefix(tc.stdout, "ENOSPC "), 10, 64)
				var n int64
				if len(f) == 2 && f[0] == "ENOSPC" {
					n, _ = strconv.ParseInt(f[1], 10, 64)
				}
				if n < want-8<<20 || n > want {
					t.Errorf("got %q, want ENOSPC after about %d MiB", res.Stdout, want>>20)
				}
				return
			}
			if res.Stdout != tc.stdout {
				t.Errorf("got %q, want %q", res.Stdout, tc.stdout)
			}
		})
	}
}

// TestWarmWaitRounds: a run that finds a warm pool empty waits for the
// fillers' next sandboxes while fewer than warmWaitRounds runs wait for each
// one being prepared, and each waiting run gets one; a run beyond those, or
// one that finds nothing being prepared, goes cold at once, and a run stopped
// while it waits stops waiting.
func TestWarmWaitRounds(t *testing.T) {
	defer func(w time.Duration) { warmWait = w }(warmWait)
	warmWait = time.Minute // a run that waited when it should not would block the test
	const key = "pool"
	l := &Launcher{
		pools:   map[string]chan *slot{key: make(chan *slot, 2)},
		rooms:   map[string]chan struct{}{key: make(chan struct{}, 2)},
		waiting: map[string]*atomic.Int32{key: new(atomic.Int32)},
	}
	// returnsAtOnce runs waitPrepared and wants it to return nil without
	// waiting out warmWait.
	returnsAtOnce := func(what string) {
		t.Helper()
		done := make(chan *slot, 1)
		go func() { done <- l.waitPrepared(key, nil) }()
		select {
		case s := <-done:
			if s != nil {
				t.Fatalf("%s: got a sandbox from an empty pool", what)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the run waited for a sandbox; it should go cold at once", what)
		}
	}
	// waitingReaches waits until n runs are counted as waiting.
	waitingReaches := func(n int32) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for l.waiting[key].Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d runs waiting, want %d", l.waiting[key].Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Both tokens in the room: no sandbox is being prepared.
	l.rooms[key] <- struct{}{}
	l.rooms[key] <- struct{}{}
	returnsAtOnce("nothing being prepared")
	// One token out: one sandbox on its way, for which warmWaitRounds runs wait.
	<-l.rooms[key]
	got := make(chan *slot, warmWaitRounds)
	for range warmWaitRounds {
		go func() { got <- l.waitPrepared(key, nil) }()
	}
	waitingReaches(warmWaitRounds)
	returnsAtOnce("one run more than the sandbox on its way is for")
	want := map[*slot]bool{}
	for range warmWaitRounds {
		s := &slot{}
		want[s] = true
		l.pools[key] <- s
	}
	for range warmWaitRounds {
		select {
		case s := <-got:
			if !want[s] {
				t.Fatalf("a waiting run got %v, not one of the pool's sandboxes", s)
			}
			delete(want, s)
		case <-time.After(10 * time.Second):
			t.Fatal("a waiting run did not get the sandbox put in the pool")
		}
	}
	// A run stopped while it waits stops waiting.
	stop := make(chan struct{})
	stopped := make(chan *slot, 1)
	go func() { stopped <- l.waitPrepared(key, stop) }()
	waitingReaches(1)
	close(stop)
	select {
	case s := <-stopped:
		if s != nil {
			t.Fatal("a stopped run got a sandbox from an empty pool")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a run stopped while it waited went on waiting")
	}
	if n := l.waiting[key].Load(); n != 0 {
		t.Fatalf("%d runs still counted as waiting, want 0", n)
	}
}

// TestWaitReadyGivesUp: a filler's wait for an init that never reports its
// root built ends at the launcher's Close, or at prepareTimeout, and kills
// and reaps the init, so that a stuck build can't hold the service's stop.
func TestWaitReadyGivesUp(t *testing.T) {
	stuck := func() *slot {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.Process != nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		})
		return &slot{cmd: cmd, msgs: make(chan pid1.Message)}
	}
	s := stuck()
	cmd := s.cmd
	stop := make(chan struct{})
	time.AfterFunc(20*time.Millisecond, func() { close(stop) })
	if err := s.waitReady(stop); err == nil || !strings.Contains(err.Error(), "launcher closed") {
		t.Errorf("waitReady, the launcher closed: got %v, want an error saying it closed", err)
	}
	if cmd.ProcessState == nil {
		t.Error("got the init still running after the launcher closed, want it killed and reaped")
	}
	s = stuck()
	cmd = s.cmd
	if err := s.waitReadyWithin(nil, 20*time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not report its root built within 20ms") {
		t.Errorf("waitReady, the init stuck: got %v, want an error saying it timed out", err)
	}
	if cmd.ProcessState == nil {
		t.Error("got the init still running after its timeout, want it killed and reaped")
	}
}

// TestCloneError: a clone the kernel refuses reads as the kernel's refusal,
// not as the missing binary or full disk exec.Cmd's words suggest. The
// cgroup case is real where a cgroup2 hierarchy is mounted: clone3 into a
// removed group fails ENOENT.
func TestCloneError(t *testing.T) {
	testutil.RequireRoot(t)
	for _, dir := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			continue
		}
		group := filepath.Join(dir, fmt.Sprintf("brig-test-clone-%d", os.Getpid()))
		if err := os.Mkdir(group, 0o755); err != nil {
			t.Fatal(err)
		}
		fd, err := os.Open(group)
		if err != nil {
			os.Remove(group)
			t.Fatal(err)
		}
		defer fd.Close()
		if err := os.Remove(group); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
		err = cloneError(cmd.Run(), "/bin/true", true, "brig-test-clone")
		t.Logf("%v", err)
		if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "/bin/true is there; the kernel refused the clone: the sandbox's cgroup brig-test-clone refused it") {
			t.Errorf("a clone into a removed cgroup: got %v, want the cgroup named as the cause", err)
		}
		break
	}
	for _, tt := range []struct {
		errno syscall.Errno
		path  string
		want  string
	}{
		{syscall.ENOSPC, "/bin/true", "a namespace limit of this host was reached"},
		{syscall.EAGAIN, "/bin/true", "a process limit was reached"},
		{syscall.ENOENT, "/nonexistent/brig-init", "fork/exec /nonexistent/brig-init: no such file or directory"},
	} {
		err := cloneError(&fs.PathError{Op: "fork/exec", Path: tt.path, Err: tt.errno}, tt.path, true, "g")
		if !errors.Is(err, tt.errno) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: got %v, want it to say %q", tt.errno, err, tt.want)
		}
		if tt.path != "/bin/true" && strings.Contains(err.Error(), "the kernel refused") {
			t.Errorf("%v: got %v, want a missing binary read as one", tt.errno, err)
		}
	}
}
