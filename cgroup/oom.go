package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// A run is one unit: once the kernel's OOM killer has killed any process of a
// group, the rest of the group is killed too, so that a parent cannot carry on,
// and exit 0, without the child it forked. On v2 the kernel does it itself
// (memory.oom.group, set by Create); on v1 it has no such switch, so brig does it
// on the memory group's OOM notification. Either way the group's OOMKilled
// channel then closes, with the same meaning on every layout.
//
// The notification is a pollable fd, read by one goroutine per group through
// the runtime's poller: closing the fd wakes the goroutine, so Delete ends it
// and frees the fd without waiting for an event that may never come.
//
//   - v1: an eventfd registered for memory.oom_control in the memory group's
//     cgroup.event_control. The kernel signals it when the group goes OOM, before
//     the OOM killer picks its victim, and once more when the group is removed;
//     so a wake-up is followed by reading the oom_kill count, for up to
//     oomConfirmTimeout. It is done with x/sys/unix rather than the library's
//     cgroup1 OOMEventFD, which makes a blocking eventfd (a read pins an OS thread
//     per run and close cannot wake it) and opens the control files through os,
//     registering each with the runtime's poller on the per-run path (see fs.go).
//   - v2: an inotify watch on memory.events, which the kernel touches (at most
//     every 10 ms, late rather than never) when any of its counters grows;
//     oom_kill grows once the victim is chosen, so a wake-up reads it once. The
//     library's cgroup2 EventChan would do it but cannot be stopped: its
//     goroutine ends only on an event that finds the group empty.

// oomConfirmTimeout bounds how long a v1 OOM notification waits for the kill it
// announces to be counted. The OOM killer counts its kill microseconds after the
// notification; it counts none when memory was freed in between, and then the
// watch goes back to waiting.
const oomConfirmTimeout = time.Second

// oomWatch is one group's OOM watcher goroutine.
type oomWatch struct {
	// f is the fd the kernel signals: an eventfd (v1) or an inotify instance
	// (v2), non-blocking, so that reads go through the runtime's poller.
	f *os.File
	// done is closed when the goroutine has returned.
	done chan struct{}
}

// startOOMWatch starts the goroutine over f: on each wake-up it asks killed,
// for up to confirm, whether the group's OOM kill count is above zero, and if so
// calls fired and returns. It returns when killed fails (the group's files are
// gone) or f is closed. The goroutine owns f and closes it on its way out.
func startOOMWatch(f *os.File, confirm time.Duration, killed func() (bool, error), fired func()) *oomWatch {
	w := &oomWatch{f: f, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer w.f.Close()
		// An eventfd reads as 8 bytes; inotify events are at most 16 bytes
		// plus a name, and a watch on a file has none.
		buf := make([]byte, 256)
		for {
			if _, err := w.f.Read(buf); err != nil {
				return // stop closed f
			}
			ok, err := pollUntil(time.Now().Add(confirm), killed)
			if err != nil {
				return
			}
			if ok {
				fired()
				return
			}
		}
	}()
	return w
}

// stop closes the watcher's fd, which wakes its goroutine, and waits for it to
// return. It must not be called with the group's mu held: the goroutine may be
// waiting for it to kill the group.
func (w *oomWatch) stop() {
	w.f.Close()
	<-w.done
}

// watchOOMV1 registers an eventfd for the OOM notifications of the v1 memory
// group at dir.
func watchOOMV1(dir string, fired func()) (*oomWatch, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("making an eventfd: %w", err)
	}
	f := os.NewFile(uintptr(efd), "oom eventfd")
	control := filepath.Join(dir, "memory.oom_control")
	cfd, err := unix.Open(control, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening %q: %w", control, err)
	}
	// The kernel keeps no hold on the control file once registered.
	defer unix.Close(cfd)
	if err := writeSmall(filepath.Join(dir, "cgroup.event_control"), strconv.Itoa(efd)+" "+strconv.Itoa(cfd)); err != nil {
		f.Close()
		return nil, fmt.Errorf("registering for OOM notifications: %w", err)
	}
	return startOOMWatch(f, oomConfirmTimeout, oomKilled(control), fired), nil
}

// watchOOMV2 watches memory.events of the v2 group at dir.
func watchOOMV2(dir string, fired func()) (*oomWatch, error) {
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("making an inotify instance: %w", err)
	}
	f := os.NewFile(uintptr(ifd), "oom inotify")
	events := filepath.Join(dir, "memory.events")
	if _, err := unix.InotifyAddWatch(ifd, events, unix.IN_MODIFY); err != nil {
		f.Close()
		return nil, fmt.Errorf("watching %q: %w", events, err)
	}
	return startOOMWatch(f, 0, oomKilled(events), fired), nil
}

// oomKilled reports whether the flat-keyed file at path (memory.oom_control on
// v1, memory.events on v2) counts an OOM kill. A kernel without the oom_kill
// key (v1 before Linux 4.13) has only the notification to go by, so there it
// counts as the kill.
func oomKilled(path string) func() (bool, error) {
	return func() (bool, error) {
		n, ok, err := readKey(path, "oom_kill")
		return !ok || n > 0, err
	}
}

// setOOMGroup makes the kernel's OOM killer take the whole v2 group at once
// (memory.oom.group, Linux 4.19+).
func setOOMGroup(m *cgroup2.Manager) error {
	on := true
	if err := m.Update(&cgroup2.Resources{Memory: &cgroup2.Memory{OOMGroup: &on}}); err != nil {
		return fmt.Errorf("setting memory.oom.group: %w", err)
	}
	return nil
}

// armOOMLocked sets the group up so that an OOM kill takes all of it and closes
// g.oom: memory.oom.group and a watch on v2, a watch on v1. A group without the
// memory controller has no memory limit and nothing is armed. Callers hold mu, or
// (Create) own g alone.
func (g *Group) armOOMLocked() error {
	m := g.m
	if !m.controllers["memory"] {
		return nil
	}
	var err error
	if m.mode == ModeUnified {
		if m.v2Info.oomGroup {
			if err := setOOMGroup(g.v2); err != nil {
				return err
			}
		}
		g.watch, err = watchOOMV2(g.dir2, g.oomFired)
	} else {
		g.watch, err = watchOOMV1(filepath.Join(m.cfg.MountRoot, "memory", g.path), g.oomFired)
	}
	return err
}

// oomFired runs on the watcher's goroutine once the kernel has OOM-killed a
// process of the group: it kills the rest (on v2 memory.oom.group already has,
// unless a process was exempt with oom_score_adj -1000) and closes g.oom.
func (g *Group) oomFired() {
	log := g.m.cfg.Logger.With(logKeyGroup, g.path, logKeyMode, g.m.mode.String())
	if err := g.Kill(); err != nil && !errors.Is(err, ErrDeleted) {
		log.Error("killing the rest of a cgroup after an OOM kill", logKeyErr, err)
	}
	log.Info("the kernel OOM-killed a process of the cgroup; killed the whole group")
	close(g.oom)
}

// OOMKilled returns a channel that is closed once the kernel's OOM killer has
// killed a process of the group and every other process of it has been sent
// SIGKILL too: by the kernel through memory.oom.group on v2, by the group on its
// memory group's OOM notification on v1 and hybrid. It is never closed for a
// group without the memory controller, nor by Delete; select on it along with
// the run's other ends. Usage's OOMKills counts the kills.
func (g *Group) OOMKilled() <-chan struct{} { return g.oom }
