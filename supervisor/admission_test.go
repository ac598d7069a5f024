package supervisor

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Retry-After, when the queue is full, is when the first running run is
// expected to end: what is left of the recent average, or as long again as a
// run has gone on once it is past it, and no later than its time limit.
func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		avg   time.Duration
		ran   []time.Duration // of the runs holding the slots
		limit time.Duration   // theirs
		wantS int
	}{
		{"fresh runs of the average", 3 * time.Second, []time.Duration{0, 0}, 0, 3},
		{"runs past a short average", 100 * time.Millisecond, []time.Duration{4 * time.Second, 6 * time.Second}, 0, 4},
		{"the soonest of two", 10 * time.Second, []time.Duration{9 * time.Second, 2 * time.Second}, 0, 1},
		{"at least one second", 10 * time.Millisecond, []time.Duration{0}, 0, 1},
		// The admission audit's: 22 s for runs 21.8 s into a 24 s limit.
		{"runs near their limit", 100 * time.Millisecond, []time.Duration{20 * time.Second, 21 * time.Second}, 24 * time.Second, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAdmission(len(tc.ran), 1<<20, 1, 1)
			a.avgRun = tc.avg
			for _, ran := range tc.ran {
				tk, _ := a.enter(0, 1, tc.limit)
				tk.since = time.Now().Add(-ran)
			}
			if a.enter0(1) == nil || a.enter0(1) != nil {
				t.Fatal("want the queue's one place taken, then a refusal")
			}
			if got := a.retryAfter(-1); got != tc.wantS {
				t.Errorf("got %d s, want %d s", got, tc.wantS)
			}
		})
	}
}

// Only a run whose program ran moves the average run Retry-After is
// reckoned from: one stopped as it got its slot, or whose packages failed,
// holds it for no time that says how long runs hold one.
func TestAverageRunCountsRunsThatRan(t *testing.T) {
	a := newAdmission(1, 1<<20, 1, 1)
	a.avgRun = 4 * time.Second
	stopped := a.enter0(1)
	a.cancel(stopped)
	if a.avgRun != 4*time.Second {
		t.Errorf("after a run stopped as it was granted: average %v, want 4s", a.avgRun)
	}
	ran := a.enter0(1)
	ran.since = time.Now().Add(-12 * time.Second)
	a.leave(ran)
	if a.avgRun < 5*time.Second || a.avgRun > 5*time.Second+100*time.Millisecond {
		t.Errorf("after a run of 12 s: average %v, want 5s (an eighth of the way)", a.avgRun)
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
	a := newAdmission(1, 4096, 4, 4)
	pkg := a.enter0(1024)
	plain, later := a.enter0(256), a.enter0(256)
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
	a = newAdmission(1, 4096, 4, 4)
	pkg = a.enter0(1024)
	a.suspend(pkg)
	a.cancel(pkg)
	check(a, 0, 0, 0)
	pkg, plain = a.enter0(1024), nil
	a.suspend(pkg)
	plain = a.enter0(256)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if err := a.resume(ctx, pkg); err == nil {
		t.Fatal("resume returned nil after its stop, want the context's error")
	}
	check(a, 1, 256, 0)
	a.leave(plain)
	check(a, 0, 0, 0)

	// No more suspended tickets than slots.
	a = newAdmission(1, 4096, 4, 4)
	first := a.enter0(1024)
	a.suspend(first)
	second := a.enter0(1024)
	if a.suspend(second) {
		t.Fatal("got a second ticket suspended on one slot, want it to keep its slot")
	}
	a.cancel(second)
	a.cancel(first)
	check(a, 0, 0, 0)
}

// enter0 enters a run of uid 0's, as the tests of one uid do.
func (a *admission) enter0(mib int) *ticket {
	t, _ := a.enter(0, mib, 0)
	return t
}

// A uid holds at most perUID of the queue's places and all uids total; a free
// slot goes to the waiting uid with the fewest runs executing, the earliest
// among equals, and each uid's runs go in their order. So a uid that queued a
// flood takes turns with one that queued later, and one that already runs
// more waits for the others.
func TestAdmissionIsFairBetweenUIDs(t *testing.T) {
	const flood, other, third = 1000, 1001, 1002
	a := newAdmission(2, 1<<20, 3, 5)
	var running []*ticket
	enter := func(uid int, want queueFull) *ticket {
		t.Helper()
		tk, full := a.enter(uid, 1, 0)
		if full != want || (tk == nil) != (want != queueHasRoom) {
			t.Fatalf("uid %d: got a ticket %v and refusal %d, want refusal %d", uid, tk != nil, full, want)
		}
		return tk
	}
	running = append(running, enter(flood, queueHasRoom), enter(flood, queueHasRoom))
	f1, f2, f3 := enter(flood, queueHasRoom), enter(flood, queueHasRoom), enter(flood, queueHasRoom)
	enter(flood, queueFullForUID) // its three places are taken, the queue's five are not
	o1, o2 := enter(other, queueHasRoom), enter(other, queueHasRoom)
	enter(third, queueFullForAll)
	granted := func(tk *ticket) bool {
		select {
		case <-tk.ready:
			return true
		default:
			return false
		}
	}
	// flood's share has room once other's two queued runs, which come first,
	// and then its own first have taken slots: each of the two adds half an
	// average run of 10 s (two slots).
	a.avgRun = 10 * time.Second
	if got, all := a.retryAfter(flood), a.retryAfter(-1); got != all+10 {
		t.Errorf("got Retry-After %d s for flood's share, want the whole queue's %d s and 10 more", got, all)
	}
	// other's first, running none to flood's two, takes the next slot: its
	// share has room as soon as the whole queue would.
	if got, all := a.retryAfter(other), a.retryAfter(-1); got != all {
		t.Errorf("got Retry-After %d s for other's share, want the whole queue's %d s", got, all)
	}
	// flood runs 2 and other none: other's first run gets the slot, though
	// flood's three queued before it.
	a.leave(running[0])
	if !granted(o1) || granted(f1) {
		t.Fatalf("got other's first %v and flood's first %v, want only other's", granted(o1), granted(f1))
	}
	// 1 each: the earliest queued of the two, flood's first.
	a.leave(running[1])
	if !granted(f1) || granted(o2) {
		t.Fatalf("got flood's first %v and other's second %v, want only flood's first", granted(f1), granted(o2))
	}
	// flood 1, other 0 once its first leaves: other's second.
	a.leave(o1)
	if !granted(o2) || granted(f2) {
		t.Fatal("want other's second admitted before flood's second")
	}
	// A place freed in the queue is a place for the third uid.
	third1 := enter(third, queueHasRoom)
	// flood 0, other 1, third 0: third's, never served, though flood's
	// second queued first and flood's one run just ended.
	a.leave(f1)
	if !granted(third1) || granted(f2) {
		t.Fatalf("got third's %v and flood's second %v, want third's alone", granted(third1), granted(f2))
	}
	a.leave(o2) // flood 0, other 0 (none queued), third 1: flood's second
	if !granted(f2) || granted(f3) {
		t.Fatalf("got flood's second %v and third %v, want the second alone", granted(f2), granted(f3))
	}
	a.leave(f2)
	a.leave(third1)
	a.leave(f3)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running != 0 || len(a.queue) != 0 || len(a.queuedBy) != 0 || len(a.executingBy) != 0 {
		t.Fatalf("got running %d, queue %d, counts %v and %v left; want none", a.running, len(a.queue), a.queuedBy, a.executingBy)
	}
}

// With one slot, a uid whose one run ends does not take the slot back ahead
// of another uid that waits, though its own queued runs came first: the uids
// take turns (the admission audit's case: a newcomer had waited behind the
// whole of a flood's share).
func TestAdmissionTakesTurnsOnOneSlot(t *testing.T) {
	const flood, other = 1000, 1001
	a := newAdmission(1, 1<<20, 8, 16)
	first, _ := a.enter(flood, 1, 0)
	var floods []*ticket
	for range 4 {
		tk, _ := a.enter(flood, 1, 0)
		floods = append(floods, tk)
	}
	mine, _ := a.enter(other, 1, 0)
	a.leave(first)
	select {
	case <-mine.ready:
	default:
		t.Fatal("the flood's next run took the slot its last one gave back; want the other uid's")
	}
	a.leave(mine)
	<-floods[0].ready // and the flood's turn again
	for _, tk := range floods {
		a.cancel(tk)
	}
}

// Two uids that take turns on one slot, each queuing its next run while the
// other's runs, do not keep a third uid's queued run waiting: each was served
// more recently than it (the second review's case: an idle uid's last grant
// was forgotten, and each came back as never served).
func TestAdmissionTwoUIDsTakingTurnsDoNotStarveAThird(t *testing.T) {
	a := newAdmission(1, 1<<20, 8, 16)
	first, _ := a.enter(0, 1, 0)
	waiting, _ := a.enter(0, 1, 0)
	cur, _ := a.enter(1, 1, 0)
	a.leave(first)
	<-cur.ready
	other := 2
	for range 10 {
		next, _ := a.enter(other, 1, 0)
		a.leave(cur)
		select {
		case <-waiting.ready:
			a.cancel(next)
			a.leave(waiting)
			return
		case <-next.ready:
		}
		cur, other = next, 3-other
	}
	t.Fatal("uid 0's queued run waited through ten turns of uids 1 and 2")
}

// Idle uids' last grants are kept, but for those older than every busy uid's,
// which order as never served would: the map stays bounded however many uids
// come and go.
func TestAdmissionForgetsOnlyGrantsThatOrderAsNever(t *testing.T) {
	a := newAdmission(1, 1<<20, 8, 16)
	for uid := range 10 * lastGrantedKept {
		tk, _ := a.enter(uid, 1, 0)
		a.leave(tk)
	}
	a.mu.Lock()
	n := len(a.lastGranted)
	a.mu.Unlock()
	if n > lastGrantedKept+1 {
		t.Fatalf("%d uids' last grants kept, want at most %d", n, lastGrantedKept+1)
	}
}

// The run chosen next is not overtaken while its memory does not fit, even by
// a smaller run of a uid that would come after it: a large run can't starve.
func TestAdmissionLargeRunIsNotOvertaken(t *testing.T) {
	a := newAdmission(4, 1024, 4, 8)
	small, _ := a.enter(1, 512, 0)
	large, _ := a.enter(2, 1024, 0) // uid 2 runs none: next, but 512 MiB are held
	later, _ := a.enter(3, 256, 0)  // would fit, and must wait behind it
	for _, tk := range []*ticket{large, later} {
		select {
		case <-tk.ready:
			t.Fatal("a run was admitted past the large one that waits for memory")
		default:
		}
	}
	a.leave(small)
	<-large.ready
	a.leave(large)
	<-later.ready
	a.leave(later)

	// Chosen, it stays next when the counts change: uid 3's run ending
	// makes room for the large one, not for uid 3's next, which runs fewer
	// (the diff review's case).
	a = newAdmission(4, 2048, 8, 8)
	first, _ := a.enter(1, 768, 0)
	other, _ := a.enter(3, 768, 0)
	large, _ = a.enter(1, 1024, 0) // next: uid 1 and uid 3 run one each; 1,536 MiB held
	again, _ := a.enter(3, 768, 0)
	a.leave(other) // uid 3 runs none now, uid 1 one
	select {
	case <-large.ready:
	default:
		t.Fatal("the large run that fits now was not admitted; a run chosen after it would have been")
	}
	select {
	case <-again.ready:
		t.Fatal("uid 3's later run overtook the large one")
	default:
	}
	for _, tk := range []*ticket{first, large, again} {
		a.cancel(tk)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running != 0 || a.usedMiB != 0 || len(a.queue) != 0 || a.chosen != nil {
		t.Fatalf("got running %d, %d MiB, queue %d, chosen %v; want nothing held", a.running, a.usedMiB, len(a.queue), a.chosen)
	}
}

// Random sequences of entries, ends, stops, suspends and resumes, from four
// uids against small bounds, keep admission's books straight after every
// step: the slots and memory held are the granted tickets', the counts per
// uid are the tickets', no slot stays free while a resumer waits or the next
// run fits, and once everything is given up nothing is left.
func TestAdmissionRandomSequences(t *testing.T) {
	type live struct {
		tk     *ticket
		stop   context.CancelFunc
		resume chan error // a resume in flight
	}
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 1))
		perUID := 1 + r.IntN(3)
		a := newAdmission(1+r.IntN(3), 1024+256*r.IntN(4), perUID, perUID+r.IntN(4))
		var lives []*live
		state := func(l *live) (running, preparing bool) {
			a.mu.Lock()
			defer a.mu.Unlock()
			return l.tk.granted && !l.tk.suspended, l.tk.suspended && !slices.Contains(a.resumers, l.tk)
		}
		for step := range 200 {
			op := r.IntN(6)
			if len(lives) == 0 {
				op = 0
			}
			switch {
			case op <= 1:
				if tk, _ := a.enter(r.IntN(4), 128*(1+r.IntN(8)), 0); tk != nil {
					lives = append(lives, &live{tk: tk})
				}
			case op == 2: // a run ends, or is stopped, in whatever state it is
				i := r.IntN(len(lives))
				l := lives[i]
				lives = slices.Delete(lives, i, i+1)
				if l.resume != nil {
					l.stop()
					if <-l.resume == nil { // it had its slot again
						a.leave(l.tk)
					} // else resume gave up what it held
					break
				}
				if running, _ := state(l); running && r.IntN(2) == 0 {
					a.leave(l.tk)
				} else {
					a.cancel(l.tk)
				}
			case op == 3:
				if l := lives[r.IntN(len(lives))]; l.resume == nil {
					a.suspend(l.tk)
				}
			default: // its packages prepared, a suspended run takes a slot again
				l := lives[r.IntN(len(lives))]
				if _, preparing := state(l); !preparing || l.resume != nil {
					break
				}
				ctx, stop := context.WithCancel(context.Background())
				l.stop, l.resume = stop, make(chan error, 1)
				go func() { l.resume <- a.resume(ctx, l.tk) }()
				for { // until it has a slot or waits among the resumers
					if _, preparing := state(l); !preparing {
						break
					}
					time.Sleep(10 * time.Microsecond)
				}
			}
			tickets := make([]*ticket, len(lives))
			for i, l := range lives {
				tickets[i] = l.tk
			}
			checkAdmissionBooks(t, a, tickets, fmt.Sprintf("seed %d, step %d", seed, step))
		}
		for _, l := range lives {
			if l.resume != nil {
				l.stop()
				if <-l.resume == nil {
					a.leave(l.tk)
				}
				continue
			}
			a.cancel(l.tk)
		}
		checkAdmissionBooks(t, a, nil, fmt.Sprintf("seed %d, everything given up", seed))
		a.mu.Lock()
		if a.chosen != nil {
			t.Fatalf("seed %d: everything given up, and chosen %v", seed, a.chosen)
		}
		a.mu.Unlock()
	}
}

// checkAdmissionBooks checks a's books against tickets, every ticket entered
// and not yet given up.
func checkAdmissionBooks(t *testing.T, a *admission, tickets []*ticket, where string) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	fail := func(format string, args ...any) { t.Fatalf(where+": "+format, args...) }
	used, preparing, held := 0, 0, 0
	executing, queued := map[int]int{}, map[int]int{}
	for _, tk := range tickets {
		_, inHeld := a.held[tk]
		inQueue, resumer := slices.Contains(a.queue, tk), slices.Contains(a.resumers, tk)
		switch {
		case !tk.granted:
			if !inQueue || inHeld || resumer {
				fail("a ticket not granted is not queued alone (queued %v, held %v, resumer %v)", inQueue, inHeld, resumer)
			}
			queued[tk.uid]++
		case tk.suspended:
			if inQueue || inHeld {
				fail("a suspended ticket is queued or holds a slot")
			}
			if !resumer {
				preparing++
			}
			used += tk.mib
			executing[tk.uid]++
		default:
			if !inHeld || inQueue || resumer {
				fail("a granted ticket does not hold a slot alone (held %v, queued %v, resumer %v)", inHeld, inQueue, resumer)
			}
			used += tk.mib
			held++
			executing[tk.uid]++
		}
	}
	if held != len(a.held) || a.running != held || a.running > a.slots {
		fail("running %d, %d held by the books, %d by the tickets, %d slots", a.running, len(a.held), held, a.slots)
	}
	if used != a.usedMiB || a.usedMiB > a.budgetMiB || preparing != a.preparing || a.preparing > a.slots {
		fail("%d MiB and %d preparing by the tickets, %d MiB and %d by the books, budget %d", used, preparing, a.usedMiB, a.preparing, a.budgetMiB)
	}
	if !maps.Equal(queued, a.queuedBy) || !maps.Equal(executing, a.executingBy) {
		fail("queued %v and executing %v by the tickets, %v and %v by the books", queued, executing, a.queuedBy, a.executingBy)
	}
	for uid, n := range queued {
		if n > a.perUID {
			fail("uid %d has %d queued, its share is %d", uid, n, a.perUID)
		}
	}
	if len(a.queue) > a.total {
		fail("%d queued, the total is %d", len(a.queue), a.total)
	}
	for uid := range executing {
		if a.lastGranted[uid] == 0 {
			fail("uid %d executes and was never served", uid)
		}
	}
	if len(a.lastGranted) > lastGrantedKept+1 {
		fail("%d uids' last grants kept", len(a.lastGranted))
	}
	if a.chosen != nil && (!slices.Contains(a.queue, a.chosen) || a.fitsLocked(a.chosen.mib)) {
		fail("the chosen ticket is not queued, or fits and waits")
	}
	if len(a.resumers) > 0 && a.running < a.slots {
		fail("%d resumers wait with a slot free", len(a.resumers))
	}
	if len(a.queue) > 0 && a.running < a.slots && a.chosen == nil {
		fail("%d queued, a slot free, and none chosen", len(a.queue))
	}
}

// TestSpreadRetryAfter: the clients a full queue refuses at one moment are
// told Retry-Afters spread over the estimate to twice it, not all the same.
func TestSpreadRetryAfter(t *testing.T) {
	for _, n := range []int{1, 4} {
		seen := map[int]bool{}
		for range 200 {
			got := spread(n)
			if got < n || got > 2*n {
				t.Fatalf("spread(%d) = %d, want %d to %d", n, got, n, 2*n)
			}
			seen[got] = true
		}
		if len(seen) < 2 {
			t.Errorf("spread(%d) gave only %v in 200 draws, want them spread", n, seen)
		}
	}
}
