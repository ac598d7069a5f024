package supervisor

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// admission bounds how many runs execute at once and how much memory they may
// reserve together, with a bounded queue of runs waiting for both: each uid
// may hold perUID of its places and all of them together total. A free slot
// goes to the uid waiting with the fewest runs executing (the earliest to
// have queued among equals), and a uid's own runs go in arrival order; so a
// uid that sends a flood takes turns with one that sends a run, not the whole
// queue. The run chosen is not overtaken by smaller ones when its memory does
// not fit yet, so a large run can't starve.
type admission struct {
	slots     int
	budgetMiB int
	perUID    int
	total     int

	mu sync.Mutex
	// running and usedMiB are what executing runs hold. Guarded by mu.
	running int
	usedMiB int
	// queue holds the waiting tickets in arrival order, held the granted
	// ones. Guarded by mu.
	queue []*ticket
	held  map[*ticket]struct{}
	// queuedBy and executingBy count each uid's tickets in the queue, and
	// those granted a slot (a suspended one too: it holds its memory and
	// takes a slot again before the queue). A uid with none has no key.
	// Guarded by mu.
	queuedBy    map[int]int
	executingBy map[int]int
	// granted counts the slots given; lastGranted is, for each uid served,
	// the count when one of its runs last got a slot: among uids executing as
	// few, the one served longest ago goes first, so that a uid whose one run
	// just ended does not take the slot back ahead of one that waited. It is
	// kept while a uid is idle (forgotten, two uids taking turns with one run
	// each came back as never served and kept a third's queued run waiting
	// for good), but for entries older than every busy uid's, which order as
	// never served would (pruneLocked). Guarded by mu.
	granted     uint64
	lastGranted map[int]uint64
	// chosen is the queued ticket nextLocked chose that did not fit yet: it
	// stays next until it is admitted or gives up its place, whatever the
	// counts become, so that no run overtakes it. Guarded by mu.
	chosen *ticket
	// avgRun is a moving average of how long a run holds its slot, for
	// Retry-After. Guarded by mu.
	avgRun time.Duration
	// preparing counts the tickets that gave their slot back while their
	// packages are prepared (suspend), at most slots at once; resumers are
	// those waiting for a slot again, served before the queue. Guarded by mu.
	preparing int
	resumers  []*ticket
}

// ticket is one run's place: ready is closed when it holds a slot.
type ticket struct {
	uid int
	mib int
	// limit is how long its run may hold a slot (its time limit, and its
	// packages' install), for Retry-After; zero when not known.
	limit time.Duration
	ready chan struct{}
	// granted is set (under admission.mu) when ready is closed.
	granted bool
	since   time.Time
	// suspended is set while the ticket holds its memory but not its slot
	// (suspend), and resumed is closed when it holds a slot again. Guarded by
	// admission.mu.
	suspended bool
	resumed   chan struct{}
}

func newAdmission(slots, budgetMiB, perUID, total int) *admission {
	return &admission{
		slots: slots, budgetMiB: budgetMiB, perUID: perUID, total: total,
		avgRun: time.Second, held: map[*ticket]struct{}{},
		queuedBy: map[int]int{}, executingBy: map[int]int{}, lastGranted: map[int]uint64{},
	}
}

// queueFull says which of the queue's bounds refused a run.
type queueFull int

const (
	queueHasRoom queueFull = iota
	queueFullForUID
	queueFullForAll
)

// enter takes a slot for a run of uid's of mib MiB and time limit limit, or
// a place in the queue. When the queue has no place for it, it returns nil
// and the bound that refused it.
func (a *admission) enter(uid, mib int, limit time.Duration) (*ticket, queueFull) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := &ticket{uid: uid, mib: mib, limit: limit, ready: make(chan struct{}), since: time.Now()}
	if len(a.queue) == 0 && a.fitsLocked(mib) {
		a.grantLocked(t)
		return t, queueHasRoom
	}
	switch {
	case a.queuedBy[uid] >= a.perUID:
		return nil, queueFullForUID
	case len(a.queue) >= a.total:
		return nil, queueFullForAll
	}
	a.queue = append(a.queue, t)
	a.queuedBy[uid]++
	a.admitLocked() // it may be the one a free slot goes to
	return t, queueHasRoom
}

func (a *admission) fitsLocked(mib int) bool {
	return a.running < a.slots && a.usedMiB+mib <= a.budgetMiB
}

func (a *admission) grantLocked(t *ticket) {
	a.running++
	a.executingBy[t.uid]++
	a.granted++
	a.lastGranted[t.uid] = a.granted
	a.usedMiB += t.mib
	t.granted = true
	t.since = time.Now()
	a.held[t] = struct{}{}
	close(t.ready)
}

// wait blocks until t holds a slot, or ctx ends (the run was stopped while it
// waited); then t gives up its place or its slot and holds nothing.
func (a *admission) wait(ctx context.Context, t *ticket) error {
	select {
	case <-t.ready:
		return nil
	case <-ctx.Done():
		a.cancel(t)
		return ctx.Err()
	}
}

// suspend gives back t's slot while its run prepares its packages, keeping
// its memory (the install's is counted in it): a registry that hangs then
// holds no slot that runs without packages could use. At most slots tickets
// are suspended at once, which bounds the installs as the slots did; past
// that, suspend returns false and t keeps its slot.
func (a *admission) suspend(t *ticket) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !t.granted || t.suspended || a.preparing >= a.slots {
		return false
	}
	t.suspended, t.resumed = true, make(chan struct{})
	a.preparing++
	a.running--
	delete(a.held, t)
	a.admitLocked()
	return true
}

// resume waits until the suspended t holds a slot again, before any run of
// the queue gets one; or until ctx ends, when t gives up its memory and holds
// nothing.
func (a *admission) resume(ctx context.Context, t *ticket) error {
	a.mu.Lock()
	a.preparing--
	if a.running < a.slots && len(a.resumers) == 0 {
		a.regrantLocked(t)
	} else {
		a.resumers = append(a.resumers, t)
	}
	a.mu.Unlock()
	select {
	case <-t.resumed:
		return nil
	case <-ctx.Done():
		a.cancel(t)
		return ctx.Err()
	}
}

// regrantLocked gives the suspended t a slot again.
func (a *admission) regrantLocked(t *ticket) {
	a.running++
	t.suspended = false
	t.since = time.Now()
	a.held[t] = struct{}{}
	close(t.resumed)
}

// cancel gives up t, whether it holds a slot, waits in the queue, is
// suspended or waits to resume.
func (a *admission) cancel(t *ticket) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.suspended {
		if i := slices.Index(a.resumers, t); i >= 0 {
			a.resumers = slices.Delete(a.resumers, i, i+1)
		} else {
			a.preparing--
		}
		t.suspended = false
		a.usedMiB -= t.mib
		a.decrementLocked(a.executingBy, t.uid)
		a.admitLocked()
		return
	}
	if t.granted {
		// Its program did not run (stopped as it was granted, or its
		// packages failed): how long it held the slot says nothing of how
		// long a run holds one.
		a.leaveLocked(t, false)
		return
	}
	if i := slices.Index(a.queue, t); i >= 0 {
		a.dequeueLocked(i)
	}
	a.admitLocked()
}

// leave gives back the slot t holds.
func (a *admission) leave(t *ticket) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.leaveLocked(t, true)
}

// leaveLocked gives back the slot t holds; ran says its program ran, and its
// time in the slot counts in avgRun.
func (a *admission) leaveLocked(t *ticket, ran bool) {
	a.running--
	a.usedMiB -= t.mib
	a.decrementLocked(a.executingBy, t.uid)
	delete(a.held, t)
	if ran {
		a.avgRun = (a.avgRun*7 + time.Since(t.since)) / 8
	}
	a.admitLocked()
}

// admitLocked gives a free slot to a run that prepared its packages first
// (its memory is held already), then to the queue's next run (nextLocked)
// while it fits.
func (a *admission) admitLocked() {
	for len(a.resumers) > 0 && a.running < a.slots {
		t := a.resumers[0]
		a.resumers = a.resumers[1:]
		a.regrantLocked(t)
	}
	for len(a.queue) > 0 && a.running < a.slots {
		i := a.nextLocked()
		t := a.queue[i]
		if !a.fitsLocked(t.mib) {
			a.chosen = t
			break
		}
		a.dequeueLocked(i)
		a.grantLocked(t)
	}
}

// nextLocked is the index in the queue of the run to admit next: the one
// chosen before that did not fit yet, or else the first queued of the uid
// with the fewest runs executing, among those the uid served longest ago
// (never, for one that had no run since it was last idle). A uid's later runs
// never come before its first, whose counts they share and which they follow.
func (a *admission) nextLocked() int {
	if a.chosen != nil {
		return slices.Index(a.queue, a.chosen)
	}
	next := 0
	for i, t := range a.queue {
		n, best := a.executingBy[t.uid], a.executingBy[a.queue[next].uid]
		if n < best || n == best && a.lastGranted[t.uid] < a.lastGranted[a.queue[next].uid] {
			next = i
		}
	}
	return next
}

func (a *admission) dequeueLocked(i int) {
	if a.queue[i] == a.chosen {
		a.chosen = nil
	}
	uid := a.queue[i].uid
	a.queue = slices.Delete(a.queue, i, i+1)
	a.decrementLocked(a.queuedBy, uid)
}

// decrementLocked counts one less of uid's in counts, and forgets a count of
// none.
func (a *admission) decrementLocked(counts map[int]int, uid int) {
	if counts[uid]--; counts[uid] <= 0 {
		delete(counts, uid)
	}
	if len(a.lastGranted) > lastGrantedKept && a.queuedBy[uid] == 0 && a.executingBy[uid] == 0 {
		a.pruneLocked()
	}
}

// lastGrantedKept is how many uids' last grants are kept before the idle
// ones that no longer order differently from never served are forgotten.
const lastGrantedKept = 64

// pruneLocked forgets the last grants of idle uids that are older than every
// busy uid's: compared with a busy uid, such a grant orders as never served
// would (a busy uid never served ties with it either way, and queued first).
func (a *admission) pruneLocked() {
	oldest := uint64(math.MaxUint64)
	for _, counts := range []map[int]int{a.queuedBy, a.executingBy} {
		for uid := range counts {
			if g := a.lastGranted[uid]; g > 0 {
				oldest = min(oldest, g)
			}
		}
	}
	for uid, g := range a.lastGranted {
		if g < oldest && a.queuedBy[uid] == 0 && a.executingBy[uid] == 0 {
			delete(a.lastGranted, uid)
		}
	}
}

// counts returns how many runs execute and how many wait.
func (a *admission) counts() (running, queued int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running, len(a.queue)
}

// retryAfter estimates, in whole seconds (at least 1), when the full queue will
// have room: when the first running run ends and the queue's head takes its
// slot. A run is expected to go on for what is left of the recent average, or,
// once past it, for as long again as it has run (a run 8 s in is not about to
// end because recent runs took 0.1 s), and no longer than its time limit
// allows. For a uid whose own share of the queue is full (uid -1: the whole
// queue is), its share has room once its first queued run takes a slot,
// which other uids' queued runs take first while they run fewer (nextLocked):
// each of those adds the average run divided among the slots.
func (a *admission) retryAfter(uid int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	ahead := 0
	if uid >= 0 {
		for other, queued := range a.queuedBy {
			if other != uid {
				// Served while it runs no more than uid, which runs no
				// fewer meanwhile than now.
				ahead += min(queued, max(0, a.executingBy[uid]-a.executingBy[other]+1))
			}
		}
	}
	soonest := time.Duration(math.MaxInt64)
	for t := range a.held {
		ran := time.Since(t.since)
		left := a.avgRun - ran
		if left <= 0 {
			left = ran
		}
		if t.limit > 0 {
			left = min(left, max(0, t.limit-ran))
		}
		soonest = min(soonest, left)
	}
	if len(a.held) == 0 { // the memory budget holds the queue, not a run
		soonest = a.avgRun
	}
	soonest += a.avgRun * time.Duration(ahead) / time.Duration(max(1, a.slots))
	return max(1, int(math.Round(soonest.Seconds())))
}
