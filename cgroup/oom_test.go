package cgroup

import (
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// oomWait bounds the waits for an OOM kill and what follows it. It is not a
// measure of promptness (the tests log that): it only turns a hang into a
// failure.
const oomWait = 30 * time.Second

// TestOOMKillTakesGroup: when the kernel OOM-kills one process of a group, the
// others die too and OOMKilled closes, on every layout with a memory controller.
func TestOOMKillTakesGroup(t *testing.T) {
	testutil.RequireRoot(t)
	const limit = 64 * mib
	for _, l := range hostLayouts(t) {
		t.Run(l.name, func(t *testing.T) {
			testutil.CheckLeaks(t, testParent)
			m := newManager(t, l)
			testutil.Require(t, m.Controllers()["memory"], "no memory controller in the "+l.name+" layout, so no OOM kill to watch")
			g := newGroup(t, m)
			if err := g.SetLimits(Limits{MemoryBytes: limit}); err != nil {
				t.Fatal(err)
			}
			sleeper := startInGroup(t, g, "sleep", "60")
			hog := startInGroup(t, g, python, "-c", `b = b"x" * (200 << 20); print("allocated", len(b))`)
			start := time.Now()
			select {
			case <-g.OOMKilled():
				t.Logf("OOMKilled closed %v after the hog started", time.Since(start))
			case <-time.After(oomWait):
				t.Fatalf("OOMKilled: not closed %v after the hog started (hog output %q)", oomWait, hog.out)
			}
			if sig := hog.wait(t); sig != syscall.SIGKILL {
				t.Errorf("hog: got signal %v, want SIGKILL (output %q)", sig, hog.out)
			}
			if sig := sleeper.wait(t); sig != syscall.SIGKILL {
				t.Errorf("sleeper: got signal %v, want SIGKILL: an OOM kill must take the whole group", sig)
			}
			t.Logf("the sleeper was reaped %v after the hog started", time.Since(start))
			u, err := g.Usage()
			if err != nil {
				t.Fatalf("Usage: %v", err)
			}
			if u.OOMKills < 1 {
				t.Errorf("OOMKills: got %d, want >= 1", u.OOMKills)
			}
		})
	}
}

// TestOOMWatchEndsWithGroup: a group that never goes OOM does not report one,
// and Delete ends its watch, leaving no goroutine or fd (CheckLeaks counts the
// fds). The watch is armed exactly where the memory controller is.
func TestOOMWatchEndsWithGroup(t *testing.T) {
	testutil.RequireRoot(t)
	for _, l := range hostLayouts(t) {
		t.Run(l.name, func(t *testing.T) {
			testutil.CheckLeaks(t, testParent)
			m := newManager(t, l)
			before := runtime.NumGoroutine()
			g, err := m.Create("oom-watch-ends")
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			t.Cleanup(func() { g.Delete() }) // when the test fails before its own
			if armed, want := g.watch != nil, m.Controllers()["memory"]; armed != want {
				t.Errorf("OOM watch armed: got %v, want %v (memory controller %v)", armed, want, want)
			}
			if err := g.SetLimits(Limits{MemoryBytes: 64 * mib}); err != nil && m.Controllers()["memory"] {
				t.Fatal(err)
			}
			v := startInGroup(t, g, "true")
			if sig := v.wait(t); sig != -1 {
				t.Fatalf("true: got signal %v, want an exit", sig)
			}
			if err := g.Delete(); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			select {
			case <-g.OOMKilled():
				t.Errorf("OOMKilled: closed, want open: nothing went OOM")
			default:
			}
			if g.watch != nil {
				t.Errorf("watch after Delete: got %v, want nil", g.watch)
			}
			// Delete waited for the goroutine to return; the runtime may count
			// it for a moment longer.
			ok, _ := pollUntil(time.Now().Add(2*time.Second), func() (bool, error) {
				return runtime.NumGoroutine() <= before, nil
			})
			if !ok {
				t.Errorf("goroutines after Delete: got %d, want at most %d as before Create", runtime.NumGoroutine(), before)
			}
		})
	}
}

// TestOOMKilledReadsCounters: what a wake-up of the watch takes for an OOM
// kill, in each kernel file it reads.
func TestOOMKilledReadsCounters(t *testing.T) {
	tests := []struct {
		name    string
		content string // "" for no file
		want    bool
		wantErr bool
	}{
		{name: "v2 before any event", content: "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n"},
		{name: "v2 OOM without a kill yet", content: "low 0\nhigh 0\nmax 4\noom 1\noom_kill 0\noom_group_kill 0\n"},
		{name: "v2 kill", content: "low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\noom_group_kill 1\n", want: true},
		{name: "v1 under OOM, not yet killed", content: "oom_kill_disable 0\nunder_oom 1\noom_kill 0\n"},
		{name: "v1 kills", content: "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", want: true},
		{name: "v1 before Linux 4.13: the notification is all there is", content: "oom_kill_disable 0\nunder_oom 1\n", want: true},
		{name: "group removed", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "memory.events")
			if tt.content != "" {
				if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := oomKilled(path)()
			if (err != nil) != tt.wantErr {
				t.Fatalf("error: got %v, want error %v", err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Errorf("killed: got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestWatchOOMV2 drives the v2 watch through a memory.events on a temporary
// directory: inotify reports the writes as the kernel's cgroupfs does its
// notifications. The development hosts' cgroup2 hierarchy has no memory
// controller, so the real memory.events is exercised only on v2 hosts, by
// TestOOMKillTakesGroup.
func TestWatchOOMV2(t *testing.T) {
	write := func(t *testing.T, path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("fires on the kill", func(t *testing.T) {
		fds := countFDs(t)
		dir := t.TempDir()
		events := filepath.Join(dir, "memory.events")
		write(t, events, "oom 0\noom_kill 0\n")
		fired := make(chan struct{})
		w, err := watchOOMV2(dir, func() { close(fired) })
		if err != nil {
			t.Fatalf("watchOOMV2: %v", err)
		}
		write(t, events, "max 3\noom 1\noom_kill 0\n") // the OOM, before the victim is chosen
		write(t, events, "max 3\noom 1\noom_kill 1\n")
		select {
		case <-fired:
		case <-time.After(oomWait):
			t.Fatalf("fired: not called %v after oom_kill 1 was written", oomWait)
		}
		select {
		case <-w.done:
		case <-time.After(oomWait):
			t.Fatalf("the watch goroutine did not return after firing")
		}
		w.stop() // after firing, stop only waits
		if got := countFDs(t); got != fds {
			t.Errorf("fds: got %d, want %d as before the watch", got, fds)
		}
	})
	t.Run("stop without an event", func(t *testing.T) {
		fds := countFDs(t)
		dir := t.TempDir()
		write(t, filepath.Join(dir, "memory.events"), "oom 0\noom_kill 0\n")
		fired := false
		w, err := watchOOMV2(dir, func() { fired = true })
		if err != nil {
			t.Fatalf("watchOOMV2: %v", err)
		}
		w.stop()
		if fired {
			t.Errorf("fired: called, want not: nothing was written")
		}
		if got := countFDs(t); got != fds {
			t.Errorf("fds: got %d, want %d as before the watch", got, fds)
		}
	})
	t.Run("no memory.events", func(t *testing.T) {
		fds := countFDs(t)
		if _, err := watchOOMV2(t.TempDir(), func() {}); err == nil {
			t.Errorf("watchOOMV2 of a group without memory.events: got no error, want one")
		}
		if got := countFDs(t); got != fds {
			t.Errorf("fds: got %d, want %d as before the watch", got, fds)
		}
	})
}

// TestSetOOMGroup checks the write that makes the kernel OOM-kill a v2 group
// whole, through the library on a temporary directory that stands for the
// group: the development hosts' cgroup2 hierarchy has no memory controller, so
// the kernel's memory.oom.group is only written on v2 hosts (by Create, checked
// by TestOOMKillTakesGroup).
func TestSetOOMGroup(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "brig", "run-1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "memory.oom.group")
	if err := os.WriteFile(file, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := cgroup2.Load("/brig/run-1", cgroup2.WithMountpoint(root))
	if err != nil {
		t.Fatal(err)
	}
	if err := setOOMGroup(m); err != nil {
		t.Fatalf("setOOMGroup: %v", err)
	}
	if got := readFile(t, file); got != "1" {
		t.Errorf("memory.oom.group: got %q, want %q", got, "1")
	}
}

// countFDs counts this process's open fds, once the runtime's poller (whose
// own fds stay open for good) is up.
func countFDs(t testing.TB) int {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	w.Close()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
