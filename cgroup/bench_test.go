package cgroup

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// benchLimits are a run's usual limits, less those whose controller the
// layout lacks (the v2 layout of the development hosts has none).
func benchLimits(m *Manager) Limits {
	c := m.Controllers()
	var l Limits
	if c["memory"] {
		l.MemoryBytes = 256 * mib
	}
	if c["pids"] {
		l.Pids = 64
	}
	if c["cpu"] {
		l.CPUs = 1
	}
	return l
}

// BenchmarkCreateSetLimitsDelete is the cgroup part of every run's path.
func BenchmarkCreateSetLimitsDelete(b *testing.B) {
	testutil.RequireRoot(b)
	for _, l := range hostLayouts(b) {
		b.Run(l.name, func(b *testing.B) {
			testutil.CheckLeaks(b, testParent)
			m := newManager(b, l)
			lim := benchLimits(m)
			i := 0
			for b.Loop() {
				i++
				g, err := m.Create(fmt.Sprintf("bench-%d", i))
				if err != nil {
					b.Fatal(err)
				}
				limErr := g.SetLimits(lim)
				if err := g.Delete(); err != nil {
					b.Fatal(err)
				}
				if limErr != nil {
					b.Fatal(limErr)
				}
			}
		})
	}
}

// BenchmarkAttach moves one process back and forth between two groups.
// "warm" moves back to back; "cold" waits first, as a run's first move after
// a quiet spell does, and pays the RCU grace period a v1 move can wait for;
// "inside" attaches a process already there, which only reads
// /proc/<pid>/cgroup.
func BenchmarkAttach(b *testing.B) {
	testutil.RequireRoot(b)
	for _, l := range hostLayouts(b) {
		for _, kind := range []string{"warm", "cold", "inside"} {
			b.Run(l.name+"/"+kind, func(b *testing.B) {
				testutil.CheckLeaks(b, testParent)
				m := newManager(b, l)
				groups := [2]*Group{newGroup(b, m), newGroup(b, m)}
				cmd := exec.Command("sleep", "600")
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				})
				pid := cmd.Process.Pid
				if err := groups[0].Attach(pid); err != nil {
					b.Fatal(err)
				}
				i := 0
				for b.Loop() {
					if kind == "cold" {
						b.StopTimer()
						time.Sleep(30 * time.Millisecond)
						b.StartTimer()
					}
					if kind != "inside" {
						i++
					}
					if err := groups[i%2].Attach(pid); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkUsage reads a group's usage, once per run at its end.
func BenchmarkUsage(b *testing.B) {
	testutil.RequireRoot(b)
	for _, l := range hostLayouts(b) {
		b.Run(l.name, func(b *testing.B) {
			testutil.CheckLeaks(b, testParent)
			g := newGroup(b, newManager(b, l))
			for b.Loop() {
				if _, err := g.Usage(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
