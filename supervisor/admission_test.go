package supervisor

import (
	"context"
	"testing"
	"time"
)

// Retry-After, when the queue is full, is when the first running run is
// expected to end: what is left of the recent average, or as long again as a
// run has gone on once it is past it.
func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		avg   time.Duration
		ran   []time.Duration // of the runs holding the slots
		wantS int
	}{
		{"fresh runs of the average", 3 * time.Second, []time.Duration{0, 0}, 3},
		{"runs past a short average", 100 * time.Millisecond, []time.Duration{4 * time.Second, 6 * time.Second}, 4},
		{"the soonest of two", 10 * time.Second, []time.Duration{9 * time.Second, 2 * time.Second}, 1},
		{"at least one second", 10 * time.Millisecond, []time.Duration{0}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAdmission(len(tc.ran), 1<<20, 1)
			a.avgRun = tc.avg
			for _, ran := range tc.ran {
				tk := a.enter(1)
				tk.since = time.Now().Add(-ran)
			}
			if a.enter(1) == nil || a.enter(1) != nil {
				t.Fatal("want the queue's one place taken, then a refusal")
			}
			if got := a.retryAfter(); got != tc.wantS {
				t.Errorf("got %d s, want %d s", got, tc.wantS)
			}
		})
	}
}

// A run that prepares its packages gives its slot back and keeps its memory
// (suspend); a run of the queue takes the slot meanwhile; the prepared run
// gets the next free slot before the queue does (resume); and a stop in any
// state gives back what the ticket held. At most slots tickets are suspended.
func TestAdmissionSuspendResume(t *testing.T) {
	ready := func(tk *ticket) bool {
		select {
		case <-tk.ready:
			return true
		default:
			return false
		}
	}
	check := func(a *admission, running, used, preparing int) {
		t.Helper()
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.running != running || a.usedMiB != used || a.preparing != preparing {
			t.Fatalf("got running %d, used %d MiB, preparing %d; want %d, %d, %d", a.running, a.usedMiB, a.preparing, running, used, preparing)
		}
	}
	a := newAdmission(1, 4096, 4)
	pkg := a.enter(1024)
	plain, later := a.enter(256), a.enter(256)
	if !ready(pkg) || ready(plain) {
		t.Fatal("want the first run admitted and the next queued")
	}
	if !a.suspend(pkg) {
		t.Fatal("suspend refused with no run preparing")
	}
	if !ready(plain) || ready(later) {
		t.Fatal("want the queue's head admitted to the slot the preparing run gave back, and no more")
	}
	check(a, 1, 1024+256, 1)
	resumed := make(chan error, 1)
	go func() { resumed <- a.resume(context.Background(), pkg) }()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-resumed:
		t.Fatalf("resume returned %v with the slot taken, want it to wait", err)
	default:
	}
	a.leave(plain) // its slot goes to the prepared run, not to the queue
	if err := <-resumed; err != nil || ready(later) {
		t.Fatalf("got %v, later admitted %v; want the prepared run resumed before the queue", err, ready(later))
	}
	check(a, 1, 1024, 0)
	a.leave(pkg)
	if !ready(later) {
		t.Fatal("want the queue served once the slot is free")
	}
	a.leave(later)
	check(a, 0, 0, 0)

	// A stop while suspended, or while waiting to resume, gives back the memory.
	a = newAdmission(1, 4096, 4)
	pkg = a.enter(1024)
	a.suspend(pkg)
	a.cancel(pkg)
	check(a, 0, 0, 0)
	pkg, plain = a.enter(1024), nil
	a.suspend(pkg)
	plain = a.enter(256)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if err := a.resume(ctx, pkg); err == nil {
		t.Fatal("resume returned nil after its stop, want the context's error")
	}
	check(a, 1, 256, 0)
	a.leave(plain)
	check(a, 0, 0, 0)

	// No more suspended tickets than slots.
	a = newAdmission(1, 4096, 4)
	first := a.enter(1024)
	a.suspend(first)
	second := a.enter(1024)
	if a.suspend(second) {
		t.Fatal("got a second ticket suspended on one slot, want it to keep its slot")
	}
	a.cancel(second)
	a.cancel(first)
	check(a, 0, 0, 0)
}
