package jail

import (
	"log/slog"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/brig-sandbox/brig/rootfs"
)

// pooledPids returns a pid of each sandbox pool holds, by pid: each is taken
// and put back in turn, still pooled (no run took it). The pool must be full
// and nothing else take from it meanwhile.
func pooledPids(pool chan *slot, pid func(*slot) int) []int {
	var pids []int
	for range cap(pool) {
		s := <-pool
		pids = append(pids, pid(s))
		pool <- s
	}
	return pids
}

// waitReplaced waits until pool is full again of sandboxes none of whose pids
// is in old, for 30 s at most, without a run.
func waitReplaced(t *testing.T, pool chan *slot, old []int, pid func(*slot) int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if len(pool) == cap(pool) && !slices.ContainsFunc(pooledPids(pool, pid), func(p int) bool { return slices.Contains(old, p) }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool (%d of %d) still holds a killed sandbox, or is not full, 30 s after the kill", len(pool), cap(pool))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPoolReplacesDeadInits: a pooled cold sandbox whose pid 1 was killed
// from outside is replaced by its pool, without a run (the recovery probe's
// four killed inits failed the next four runs `internal`: "sending the spec
// to the sandbox init: write |1: broken pipe").
func TestPoolReplacesDeadInits(t *testing.T) {
	l := newTestLauncher(t, 2)
	pool := l.pools[poolKey(rootOf(t, l, rootfs.Python), "")]
	if err := waitFull(pool); err != nil {
		t.Fatal(err)
	}
	initPid := func(s *slot) int { return s.cmd.Process.Pid }
	killed := pooledPids(pool, initPid)
	for _, pid := range killed {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	waitReplaced(t, pool, killed, initPid)
	if d := l.DeathStats(); d.PooledSandboxes != uint64(len(killed)) || d.Zygotes != 0 {
		t.Errorf("DeathStats: got %+v, want %d pooled sandboxes", d, len(killed))
	}
	for range cap(pool) + 1 {
		res := run(t, l, rootfs.JavaScript, "console.log(6 * 7)")
		if !res.Succeeded() || res.Stdout != "42\n" {
			t.Fatalf("got start %s end %s message %q stdout %q, want 42", res.Start, res.End, res.Message, res.Stdout)
		}
	}
}

// TestZygoteDeathReplacesItsSandboxes: when the zygote is killed from
// outside, its pooled children are replaced by a new zygote's, without a run
// (the recovery probe found the pool still holding them 100 s after, and the
// next run waited 2 s for each: the killed zygote's children are reaped by
// the host's pid 1, and took discarded them one after another before the
// run's own).
func TestZygoteDeathReplacesItsSandboxes(t *testing.T) {
	l := newWarmLauncher(t, 2)
	waitWarm(t, l)
	pool := l.pools[poolKey(rootOf(t, l, rootfs.Python), rootfs.Python)]
	if err := waitFull(pool); err != nil {
		t.Fatal(err)
	}
	z := servingZygote(t, l)
	childPid := func(s *slot) int { return s.zchild.pid }
	forked := pooledPids(pool, childPid)
	if err := syscall.Kill(z.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitReplaced(t, pool, forked, childPid)
	if servingZygote(t, l) == z {
		t.Fatal("the pool was refilled, but the killed zygote still serves")
	}
	if d := l.DeathStats(); d.Zygotes != 1 {
		t.Errorf("DeathStats: got %+v, want 1 zygote", d)
	}
	res := warmRun(t, l, "print(6 * 7)")
	if res.Stdout != "42\n" {
		t.Errorf("got %q, want 42", res.Stdout)
	}
}

// TestZygoteEndsQuietlyAtClose: a launcher's close ends its zygote (the
// spawner thread's end fires its parent-death signal before closeZygotes
// kills it), which is no crash: every stop of a service had logged one.
func TestZygoteEndsQuietlyAtClose(t *testing.T) {
	logs := &testutil.LogBuffer{}
	l := newWarmLauncher(t, 1, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	waitWarm(t, l)
	z := servingZygote(t, l)
	l.Close()
	<-z.reaped
	if strings.Contains(logs.String(), "zygote ended while it served") {
		t.Errorf("the close logged a zygote crash:\n%s", logs.String())
	}
}
