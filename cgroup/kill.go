package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Kill sends SIGKILL to every process in the group, however deep it forked or
// whatever session it started. Where a cgroup2 directory exists (v2, and the
// hybrid twin) that is one write to cgroup.kill. Otherwise, logged once by
// New, the group is frozen, every process in cgroup.procs is killed, and the
// group is thawed, all bounded by killTimeout. Kill returns once the signals
// are sent; Delete waits for the processes to be gone. On hybrid, cgroup.kill
// reaches every process in the twin, which is every process CloneFD or Attach
// placed and their descendants; Delete also catches any that sit only in the
// v1 groups.
func (g *Group) Kill() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.deleted {
		return fmt.Errorf("killing cgroup %q: %w", g.name, ErrDeleted)
	}
	if err := g.killLocked(); err != nil {
		return fmt.Errorf("killing cgroup %q: %w", g.name, err)
	}
	return nil
}

func (g *Group) killLocked() error {
	m := g.m
	switch {
	case g.dir2 != "" && m.v2Info.hasKill:
		// The kernel walks the subtree and kills every task, including ones
		// being forked as it goes.
		return writeSmall(filepath.Join(g.dir2, "cgroup.kill"), "1")
	case m.mode == ModeUnified:
		return g.freezeKillThaw(g.freezeV2, func() ([]int, error) { return procsTree(g.dir2) })
	default:
		return g.freezeKillThaw(g.freezeV1, g.v1Procs)
	}
}

// freezeKillThaw is Kill without cgroup.kill. A frozen group cannot fork or
// exit, so one pass over its process list signals everything and no pid can
// be reused underneath; SIGKILL takes effect at the thaw. Without a freezer it
// lists and signals in a loop until the group is empty or killTimeout passes.
func (g *Group) freezeKillThaw(freeze func(bool, time.Time) error, list func() ([]int, error)) error {
	log := g.m.cfg.Logger.With(logKeyGroup, g.path, logKeyMode, g.m.mode.String(), logKeyKernel, g.m.kernel)
	deadline := time.Now().Add(killTimeout)
	frozen := true
	if err := freeze(true, deadline); err != nil {
		frozen = false
		log.Warn("could not freeze cgroup before killing it; killing in a loop", logKeyErr, err)
	}
	defer func() {
		if err := freeze(false, time.Now().Add(killTimeout)); err != nil {
			log.Error("thawing killed cgroup", logKeyErr, err)
		}
	}()
	for {
		pids, err := list()
		if err != nil {
			return fmt.Errorf("listing processes: %w", err)
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("killing pid %d: %w", pid, err)
			}
		}
		if frozen {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes still running after %v: %w", len(pids), killTimeout, ErrBusy)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// errNoFreezer: the v1 freezer hierarchy is not mounted.
var errNoFreezer = errors.New("no v1 freezer hierarchy")

// freezeV1 sets the group's v1 freezer.state and waits, until deadline, for
// the kernel to report it. Freezing is not instant: tasks stop at their next
// chance, and the state reads FREEZING until all have.
func (g *Group) freezeV1(on bool, deadline time.Time) error {
	if !g.m.v1Info.has("freezer") {
		return errNoFreezer
	}
	file := filepath.Join(g.m.cfg.MountRoot, "freezer", g.path, "freezer.state")
	want := "THAWED"
	if on {
		want = "FROZEN"
	}
	done, err := pollUntil(deadline, func() (bool, error) {
		if err := writeSmall(file, want); err != nil {
			return false, err
		}
		b, err := readSmall(file)
		return strings.TrimSpace(string(b)) == want, err
	})
	if err != nil {
		return fmt.Errorf("writing %s to %q: %w", want, file, err)
	}
	if !done {
		return fmt.Errorf("%q did not reach %s by the deadline", file, want)
	}
	return nil
}

// freezeV2 sets cgroup.freeze and waits, until deadline, for cgroup.events to
// say "frozen" accordingly.
func (g *Group) freezeV2(on bool, deadline time.Time) error {
	if !g.m.v2Info.hasFreeze {
		return errors.New("no cgroup.freeze (Linux 5.2+)")
	}
	val, want := "0", int64(0)
	if on {
		val, want = "1", 1
	}
	file := filepath.Join(g.dir2, "cgroup.freeze")
	if err := writeSmall(file, val); err != nil {
		return fmt.Errorf("writing %s to %q: %w", val, file, err)
	}
	events := filepath.Join(g.dir2, "cgroup.events")
	done, err := pollUntil(deadline, func() (bool, error) {
		v, _, err := readKey(events, "frozen")
		return v == want, err
	})
	if err != nil {
		return fmt.Errorf("reading %q: %w", events, err)
	}
	if !done {
		return fmt.Errorf("%q did not report frozen %d by the deadline", events, want)
	}
	return nil
}

// v1Procs lists, without repeats, the processes in the group across its v1
// hierarchies; a process attached to only some of them is still found.
func (g *Group) v1Procs() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, d := range g.v1Dirs() {
		pids, err := procsTree(d)
		if err != nil {
			return nil, err
		}
		for _, p := range pids {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// populated says whether any process is in the group or below it, in any
// hierarchy. The cgroup2 directory answers in one read of cgroup.events; v1
// has no such file, so its cgroup.procs are read.
func (g *Group) populated() (bool, error) {
	if g.dir2 != "" {
		v, ok, err := readKey(filepath.Join(g.dir2, "cgroup.events"), "populated")
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
		if ok && v != 0 {
			return true, nil
		}
	}
	for _, d := range g.v1Dirs() {
		pids, err := procsTree(d)
		if err != nil {
			return false, err
		}
		if len(pids) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// emptyLocked kills what is in the group, if anything, and waits for it to
// leave, up to the Manager's emptyTimeout. On hybrid, processes that somehow sit in the v1
// groups but not in the twin survive cgroup.kill; if any are left at the
// deadline they are killed through the v1 groups' process lists (in a loop,
// bounded by the pids limit, since a hybrid group with cgroup.kill has no v1
// freezer) and waited for once more.
func (g *Group) emptyLocked() error {
	busy, err := g.populated()
	if err != nil || !busy {
		return err
	}
	if err := g.killLocked(); err != nil {
		return err
	}
	empty := func() (bool, error) {
		busy, err := g.populated()
		return !busy, err
	}
	done, err := pollUntil(time.Now().Add(g.m.emptyTimeout), empty)
	if err != nil {
		return err
	}
	if !done && g.m.mode == ModeHybrid {
		g.m.cfg.Logger.Warn("processes outside the unified twin survived cgroup.kill; killing them through the v1 hierarchies",
			logKeyGroup, g.path)
		if err := g.freezeKillThaw(g.freezeV1, g.v1Procs); err != nil {
			return err
		}
		done, err = pollUntil(time.Now().Add(g.m.emptyTimeout), empty)
		if err != nil {
			return err
		}
	}
	if !done {
		return fmt.Errorf("processes still inside %v after SIGKILL: %w", g.m.emptyTimeout, ErrBusy)
	}
	return nil
}
