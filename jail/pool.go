package jail

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/jail/reaper"
	"github.com/brig-sandbox/brig/rootfs"
)

type spawned struct {
	s   *slot
	err error
}

// slot is one cloned init, waiting in its namespaces and cgroup for a spec. Its
// fields are the parent's ends of the pipes that cross to the child.
type slot struct {
	// ready is when a pool's sandbox was ready for a run (Config.WarmMaxAge).
	ready time.Time
	cmd   *exec.Cmd
	group *cgroup.Group
	// ids are the sandbox's host ids, given back to ids when it is discarded.
	ids      runIDs
	released func(runIDs)
	// spec is the write end of the init's spec pipe (pid1.SpecFD in the child).
	spec *os.File
	// status is the read end of the init's status pipe (pid1.StatusFD in the child).
	status *os.File
	// stdout and stderr are the read ends of the program's output pipes.
	stdout, stderr *os.File
	// msgs has the init's status messages, decoded from status by a goroutine.
	msgs chan pid1.Message
	// initEnded is set once the init's status pipe has ended: the init is
	// gone, and a pooled sandbox with it (readMessages). pooled is set while
	// the sandbox waits in its pool, whose tend poke wakes when it ends
	// there.
	initEnded, pooled atomic.Bool
	poke              chan<- struct{}
	// memoryBytes is the memory limit the cgroup and the scratch size were
	// prepared for.
	memoryBytes int64
	// scratchFD is the init's descriptor of its scratch tmpfs's reconfiguration
	// context, from its ready message.
	scratchFD int
	// baseline is the cgroup's CPU time before the run (the init's own start and
	// preparing), subtracted from the run's CPU time.
	baseline time.Duration
	// reaperRun: the sandbox's pid 1 is a reaper that starts the program from
	// a run frame (reaper.MarshalRun), not a Go init (pid1.WriteRun).
	reaperRun bool
	// reaper: the sandbox's pid 1 is a reaper (a zygote's sandbox's or a
	// reaperRun's), which takes a run's backstop (reaper.ArmBackstop).
	reaper bool
	// warm is the language whose interpreter the sandbox holds waiting, ""
	// for a cold one.
	warm rootfs.Language
	// zchild is a warm Python sandbox's program, forked by a zygote into the
	// sandbox (zygote.go); nil otherwise.
	zchild *zygoteChild
	// childPID is the program when it is the init's child, in the host's pid
	// namespace: a warm JavaScript sandbox's waiting node from its
	// preparation, a cold sandbox's interpreter once it has started
	// (supervise); 0 otherwise.
	childPID int
	// copies are the interpreter copies its init bound (copiesFor, when it
	// was prepared): took gives no run a sandbox whose copies are no longer
	// its root's.
	copies []pid1.Copy
}

// programPID is the host pid of the program, once the service knows it: a
// warm sandbox's from its preparation (a zygote's child, or node), a cold
// one's from its start; else 0.
func (s *slot) programPID() int {
	if s.zchild != nil {
		return s.zchild.pid
	}
	return s.childPID
}

// poolKey identifies what prepareSteps build: a root, and for a warm sandbox the
// language whose interpreter it starts ("" for a cold one).
func poolKey(r *rootfs.Root, warm rootfs.Language) string {
	return rootKey(r) + "\x00warm:" + string(warm)
}

// rootKey identifies the root prepareSteps build.
func rootKey(r *rootfs.Root) string {
	k := r.Lower
	if v := r.View; v != nil {
		k += "\x00view:" + v.Source + "\x00" + v.Target
	}
	for _, b := range r.Binds {
		k += "\x00" + b.Source + "\x00" + b.Target
	}
	return k
}

// spawner serves clone requests from a thread that never exits before the Launcher.
func (l *Launcher) spawner() {
	defer l.wg.Done()
	runtime.LockOSThread()
	// Per thread on Linux: only this thread, and the inits it clones, run nice
	// and with sandboxTimerSlack.
	if err := unix.Setpriority(unix.PRIO_PROCESS, 0, prepareNice); err != nil {
		l.log.Warn("could not lower the priority of pool preparation", "err", err)
	}
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, sandboxTimerSlack, 0, 0, 0); err != nil {
		l.log.Warn("could not set the timer slack the sandboxes inherit", "err", err)
	}
	// Left locked on purpose: the thread ends with the goroutine and takes nothing
	// with it, since Close has waited for every clone.
	for {
		select {
		case req := <-l.spawns:
			s, err := l.clone(req.reaper, req.program, req.copies)
			req.reply <- spawned{s, err}
		case f := <-l.onSpawner:
			f()
		case <-l.done:
			return
		}
	}
}

// fill keeps pool full of inits that have built root and wait for a run. It
// prepares one only with a token from room, which holds one per pooled
// sandbox and gets it back when a run takes one: however many fillers a pool
// has, at most PoolSize sandboxes are prepared or being prepared.
func (l *Launcher) fill(root *rootfs.Root, warm rootfs.Language, pool chan *slot, room chan struct{}, poke chan<- struct{}) {
	defer l.wg.Done()
	backoff := 10 * time.Millisecond
	for {
		select {
		case <-room:
		case <-l.done:
			return
		}
		select {
		case <-time.After(refillDelay):
		case <-l.done:
			return
		}
		s, err := l.prepare(root, warm)
		if err != nil {
			select {
			case <-l.done:
				return // Close killed it: not a failure
			default:
			}
		}
		if warm != "" {
			l.setWarmFailing(warm, err != nil)
		}
		if err != nil {
			l.log.Error("preparing a sandbox for the pool", "warm", string(warm), "err", err)
			room <- struct{}{}
			select {
			case <-time.After(backoff):
				backoff = min(2*backoff, 5*time.Second)
				continue
			case <-l.done:
				return
			}
		}
		backoff = 10 * time.Millisecond
		s.poke = poke
		s.pooled.Store(true)
		select {
		case pool <- s:
			s.endedOutside()
		case <-l.done:
			s.discard()
			return
		}
	}
}

// prepare makes a sandbox for a pool: an init that has built root and, for
// a warm one, the program that waits in it.
func (l *Launcher) prepare(root *rootfs.Root, warm rootfs.Language) (*slot, error) {
	s, err := l.newSlot(root, warm, api.DefaultMemoryMiB<<20)
	if err != nil {
		return nil, err
	}
	if err := s.waitReady(l.done); err != nil { // it discarded s
		return nil, err
	}
	// The run's CPU counts from here: the init waits and uses none until
	// then. A zygote's child joins first, and forkWarm reads it after.
	switch warm {
	case rootfs.Python:
		err = l.forkWarm(root, s)
	case rootfs.JavaScript:
		// The init's one child: the node it started, waiting for its run.
		if s.childPID, err = onlyChild(s.cmd.Process.Pid); err == nil {
			err = s.readBaseline()
		}
	default:
		err = s.readBaseline()
	}
	if err != nil {
		s.discard()
		return nil, err
	}
	s.ready = time.Now()
	return s, nil
}

// DefaultWarmMaxAge is Config.WarmMaxAge's zero value.
const DefaultWarmMaxAge = 5 * time.Minute

// stale reports whether s, a warm pool's, has waited past Config.WarmMaxAge.
func (l *Launcher) stale(s *slot) bool {
	return s.warm != "" && time.Since(s.ready) > l.cfg.WarmMaxAge
}

// tend takes a pool's sandboxes out, discards those that can no longer serve
// a run (each one's token back to room, so that a filler prepares its
// successor) and puts the rest back in their order: when poked (a pooled
// sandbox's init ended, a zygote died: dead) and, for a warm pool, every
// quarter of WarmMaxAge, when it replaces those older than half of it too.
// So a waiting sandbox is at most three quarters of WarmMaxAge old, and
// took's own check (a run never gets one older than WarmMaxAge) holds
// without sending a run cold; a run that finds the pool empty meanwhile
// (microseconds) waits for a warm one or goes cold, as when the pool runs
// dry. Until 2026-12-05 only a run's took found a dead sandbox: four killed
// cold inits failed four runs `internal`, and a killed zygote's pool cost
// the next run 2 s a sandbox (the recovery probe).
func (l *Launcher) tend(warm rootfs.Language, pool chan *slot, room chan struct{}, poke <-chan struct{}) {
	defer l.wg.Done()
	var tick <-chan time.Time
	if warm != "" {
		t := time.NewTicker(l.cfg.WarmMaxAge / 4)
		defer t.Stop()
		tick = t.C
	}
	for {
		ticked := false
		select {
		case <-tick:
			ticked = true
		case <-poke:
		case <-l.done:
			return
		}
		var keep []*slot
	drain:
		for range cap(pool) {
			select {
			case s := <-pool:
				s.pooled.Store(false)
				switch why := s.dead(); {
				case why != "":
					l.deaths.pooled.Add(1)
					l.log.Warn("a pooled sandbox died waiting; preparing another", "warm", string(warm), "why", why)
				case ticked && time.Since(s.ready) > l.cfg.WarmMaxAge/2:
					l.log.Debug("replacing a warm sandbox that waited long", "language", string(warm), "max_age", l.cfg.WarmMaxAge)
				default:
					keep = append(keep, s)
					continue
				}
				l.discardLater(s, &l.wg)
				room <- struct{}{}
			default:
				break drain
			}
		}
		for _, s := range keep {
			// Room for each: the fillers prepare only with room's tokens,
			// and the kept sandboxes hold none.
			s.pooled.Store(true)
			pool <- s
		}
		for _, s := range keep {
			s.endedOutside()
		}
	}
}

// discardLater discards s on a goroutine of its own, counted in wg, which
// its caller holds a count of (a sandbox's discard may wait seconds for the
// host to reap what it killed).
func (l *Launcher) discardLater(s *slot, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.discard()
	}()
}

// pokeWarm wakes the tend of every pool whose sandboxes hold lang's program
// waiting: its zygote died.
func (l *Launcher) pokeWarm(lang rootfs.Language) {
	for key, poke := range l.pokes {
		if strings.HasSuffix(key, "\x00warm:"+string(lang)) {
			select {
			case poke <- struct{}{}:
			default:
			}
		}
	}
}

// prepareTimeout bounds a fresh init's build of its root. A build takes
// milliseconds (tens under load); one that has not reported after this is
// stuck, and a filler that waited for it forever would hold the launcher's
// Close, and the service's stop, with it.
const prepareTimeout = 30 * time.Second

// waitReady waits for a fresh init to report its root built, until
// prepareTimeout or until stop is closed (the launcher's Close: a nil stop
// never is), which discard the init.
func (s *slot) waitReady(stop <-chan struct{}) error {
	return s.waitReadyWithin(stop, prepareTimeout)
}

func (s *slot) waitReadyWithin(stop <-chan struct{}, limit time.Duration) error {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	var m pid1.Message
	var ok bool
	select {
	case m, ok = <-s.msgs:
	case <-stop:
		s.discard()
		return errors.New("the launcher closed while the sandbox was being prepared")
	case <-timer.C:
		s.discard()
		return fmt.Errorf("the sandbox's init did not report its root built within %s", limit)
	}
	switch {
	case !ok:
		s.kill()
		out := make([]byte, 4096)
		n, _ := io.ReadFull(s.stderr, out)
		s.discard()
		return fmt.Errorf("the init exited before building the root (it printed %q)", out[:n])
	case m.Kind == pid1.MsgError:
		s.discard()
		return fmt.Errorf("building the root failed at step %q: %s", m.Step, withErrnoText(m.Error))
	case m.Kind != pid1.MsgReady:
		s.discard()
		return fmt.Errorf("unexpected message %q from a preparing init", m.Kind)
	}
	s.scratchFD = m.ScratchFD
	return nil
}

// readBaseline reads the cgroup's CPU time so far, which the run's own is
// counted from (Result.Usage).
func (s *slot) readBaseline() (err error) {
	if s.baseline, err = s.group.CPU(); err != nil {
		return fmt.Errorf("reading the cgroup's usage: %w", err)
	}
	return nil
}

// take returns an init that has built (or is building) root with the limits of a
// run of memoryBytes: from the pool, resized where the pool's size differs, or a
// new one. A wait for a warm sandbox ends early once stop is closed (the
// run's stop).
func (l *Launcher) take(root *rootfs.Root, warm rootfs.Language, memoryBytes int64, stop <-chan struct{}) (s *slot, ready bool, err error) {
	s, ready, err = l.takeSlot(root, warm, memoryBytes, stop)
	if err == nil {
		s.setNice(0)
	}
	return s, ready, err
}

func (l *Launcher) takeSlot(root *rootfs.Root, warm rootfs.Language, memoryBytes int64, stop <-chan struct{}) (s *slot, ready bool, err error) {
	key := poolKey(root, warm)
	select {
	case s := <-l.pools[key]: // never closed while runs are active
		return l.took(s, root, warm, memoryBytes, stop)
	default:
	}
	if warm == "" {
		s, err := l.newSlot(root, "", memoryBytes)
		return s, false, err
	}
	if warm == rootfs.Python {
		if s := l.waitPrepared(key, stop); s != nil {
			return l.took(s, root, warm, memoryBytes, stop)
		}
	}
	// Nothing on its way for this run (or too late): a sandbox made now
	// would start its interpreter before the run as a cold one does after;
	// the cold path, and its pool, are the quicker.
	return l.takeSlot(root, "", memoryBytes, stop)
}

// waitPrepared waits for the next sandbox of the empty warm pool key and
// returns it, when the fillers are preparing sandboxes and this run would get
// one of the next warmWaitRounds they make; nil otherwise, or when none came
// within warmWait, or stop (the run's) or the Launcher's Close came first.
// Waiting is cheaper than a cold start, which pays a whole interpreter's start
// on a busy machine whose fillers then fall further behind; a run beyond
// those goes cold at once, on a core the fillers leave free. (Not for
// JavaScript: a warm Node sandbox costs a Node start, as a cold run does, so
// waiting for one saves no CPU; measured, it moved the p50 at concurrency 2
// from 40 to 45 ms.)
func (l *Launcher) waitPrepared(key string, stop <-chan struct{}) *slot {
	// A token out of the pool's room is a sandbox a filler prepares (or is
	// about to), or one in the pool.
	room, pool, waiting := l.rooms[key], l.pools[key], l.waiting[key]
	defer waiting.Add(-1)
	if int(waiting.Add(1)) > warmWaitRounds*(cap(room)-len(room)-len(pool)) {
		return nil
	}
	t := time.NewTimer(warmWait)
	defer t.Stop()
	select {
	case s := <-pool:
		return s
	case <-t.C:
	case <-stop:
	case <-l.done:
	}
	return nil
}

// warmWaitRounds is how many rounds of the fillers' preparations a run
// waits for at most (waitPrepared): with one round, at concurrency 8 on two
// cores (the default max_concurrent there) half the runs went cold and the
// rest waited behind them, 100 to 111 % of bare's throughput; with every
// run waiting, 154 to 157 %. Two rounds let every run wait there, and on a
// host with many cores the runs beyond them go cold, side by side on cores
// the fillers leave idle (a choice, not measured: these machines have two).
const warmWaitRounds = 2

// warmWait bounds how long a run waits for a warm sandbox being prepared
// (waitPrepared): at most two preparations, 20 to 40 ms each on an idle machine
// and a few hundred under load, where a cold start takes longer still. A
// sandbox that takes longer is stuck, or the machine is far past its
// capacity. A variable for tests: TestWarmEmptyWaitsForPreparing's sandbox
// may take longer on a loaded machine, and TestWarmWaitRounds would see a
// wrong wait only as a long one.
var warmWait = time.Second

// took readies s, just taken from its pool, for a run of memoryBytes.
func (l *Launcher) took(s *slot, root *rootfs.Root, warm rootfs.Language, memoryBytes int64, stop <-chan struct{}) (*slot, bool, error) {
	l.rooms[poolKey(root, warm)] <- struct{}{} // a filler may prepare the next
	s.pooled.Store(false)
	if why := s.dead(); why != "" {
		// The next one, or a new sandbox. Discarded meanwhile: a killed
		// zygote's children wait for the host's pid 1 to reap them (2 s
		// apart here), and a run waited that long for each.
		l.deaths.pooled.Add(1)
		l.log.Warn("a pooled sandbox died waiting; taking another", "warm", string(warm), "why", why)
		l.discardLater(s, &l.active)
		return l.takeSlot(root, warm, memoryBytes, stop)
	}
	if l.stale(s) { // refresh had not come to it yet
		s.discard()
		return l.takeSlot(root, warm, memoryBytes, stop)
	}
	if !slices.Equal(s.copies, l.copiesFor(root)) {
		// An interpreter of its root changed (a package upgrade) since it was
		// prepared: it would run the old one, from its copy, or holds it
		// started. Its successor gets the new one.
		l.log.Info("a pooled sandbox's interpreter changed since it was prepared; taking another", "warm", string(warm))
		s.discard()
		return l.takeSlot(root, warm, memoryBytes, stop)
	}
	if s.memoryBytes != memoryBytes {
		// A limit lowered below what the sandbox is charged already is
		// refused on v1 (EBUSY) and OOM-kills it on v2: such a sandbox is
		// not the run's, which gets another.
		if memoryBytes < s.memoryBytes {
			if cur, err := s.group.MemoryCurrent(); err != nil || cur > memoryBytes*3/4 {
				l.log.Info("a pooled sandbox holds too much memory for a run's smaller limit; taking another", "charged", cur, "limit", memoryBytes, "err", err)
				s.discard()
				return l.takeSlot(root, warm, memoryBytes, stop)
			}
		}
		if err := s.group.SetLimits(cgroup.Limits{MemoryBytes: memoryBytes}); err != nil {
			s.discard()
			return nil, false, fmt.Errorf("setting the run's memory limit: %w", err)
		}
		if memoryBytes < s.memoryBytes {
			// The lowered limit may still have cost the sandbox an OOM kill
			// (v2 reclaims, then kills), which the run would read as its
			// own: such a sandbox is not the run's either.
			if u, err := s.group.Usage(); err != nil || u.OOMKills > 0 {
				l.log.Info("a pooled sandbox was OOM-killed by a run's smaller limit; taking another", "limit", memoryBytes, "err", err)
				s.discard()
				return l.takeSlot(root, warm, memoryBytes, stop)
			}
		}
		if err := s.resizeScratch(ScratchBytes(memoryBytes)); err != nil {
			s.discard()
			return nil, false, err
		}
		s.memoryBytes = memoryBytes
	}
	return s, true, nil
}

// newSlot clones an init on the spawner thread, moves it into the run's cgroups
// where the layout needs it (on cgroup v1, the move that may wait for an RCU grace
// period; it happens here, off the spawner thread, so that it delays no other
// clone), and only then sends it the pid1.PrepareSpec: the init makes its cgroup
// namespace first thing.
func (l *Launcher) newSlot(root *rootfs.Root, warm rootfs.Language, memoryBytes int64) (s *slot, retErr error) {
	reply := make(chan spawned, 1)
	// Every sandbox gets a reaper where it can (rootbuild.go): a zygote's
	// only reaps; a cold or warm JavaScript one's starts the program.
	useReaper := (warm == rootfs.Python || !programReaperOff) && l.reaper != nil
	program := useReaper && warm != rootfs.Python
	cp := l.copiesFor(root)
	select {
	case l.spawns <- spawnRequest{reply, useReaper, program, len(cp) > 0}:
	case <-l.done:
		return nil, ErrClosed
	}
	r := <-reply
	if r.err != nil {
		return nil, r.err
	}
	made := r.s
	defer func() {
		if retErr != nil {
			made.discard()
		}
	}()
	s = made
	// Limits before the move: on v1 the init is never in a group without
	// them. On cgroup v2 it was born in its group (CLONE_INTO_CGROUP, clone),
	// and waits there, with no program and nothing of the run's, until they
	// are set; what it holds then counts against them once they are.
	s.memoryBytes = memoryBytes
	// The sandbox's pid 1, a reaper of one thread, is in the group too: one
	// more, so that the program has the processes and threads GET /v1/limits
	// says (the limits probe of 2026-12-06 counted 511 of 512).
	if err := s.group.SetLimits(cgroup.Limits{MemoryBytes: memoryBytes, Pids: l.cfg.Pids + 1, CPUs: l.cfg.CPUs}); err != nil {
		return nil, fmt.Errorf("setting the run's cgroup limits: %w", err)
	}
	if s.group.NeedsAttach() {
		if err := s.group.Attach(s.cmd.Process.Pid); err != nil {
			return nil, fmt.Errorf("moving the init into its cgroup: %w", err)
		}
	}
	prep := l.newPrepareSpec(root, memoryBytes, s.ids)
	prep.Copies, s.copies = cp, cp
	s.warm = warm
	switch warm {
	case rootfs.JavaScript:
		prep.Warm, prep.WarmEnviron, prep.WarmBoot = warmArgv(root), warmEnviron(), nodeBoot
	}
	if program {
		s.reaperRun = true
		if err := l.startReaper(s, prep, true); err != nil {
			return nil, err
		}
		return s, nil
	}
	switch warm {
	case rootfs.Python:
		// A zygote's child joins the sandbox once it is built (zygote.go).
		// The init starts no program, so it needs no spawner filter.
		prep.Zygote, prep.SpawnSeccomp = true, nil
		if useReaper {
			if err := l.startReaper(s, prep, false); err != nil {
				return nil, err
			}
			return s, nil
		}
	}
	if err := pid1.WritePrepare(s.spec, prep); err != nil {
		return nil, fmt.Errorf("sending the prepare spec: %w", err)
	}
	return s, nil
}

// sandboxOOMScoreAdj is every sandbox's oom_score_adj, which its processes
// inherit: when the host runs out of memory, the kernel's OOM killer takes
// the runs' untrusted programs before anything else of the host, the service
// included, whatever value the service itself has (a Kubernetes pod of
// Guaranteed QoS gets -997, which its sandboxes would otherwise inherit,
// and with it an immunity of the host's others' making).
const sandboxOOMScoreAdj = "1000"

// markOOMVictim gives process pid, a sandbox's pid 1 or a zygote's init just
// started (before it starts anything), sandboxOOMScoreAdj. A failure is
// logged once: the value bounds no run, its limits do.
func (l *Launcher) markOOMVictim(pid int) {
	err := os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte(sandboxOOMScoreAdj), 0)
	if err != nil && l.oomScoreWarned.CompareAndSwap(false, true) {
		l.log.Warn("setting a sandbox's oom_score_adj; its processes keep the service's", "err", err)
	}
}

// runGroupName is the name of every group a Launcher makes (see clone),
// run-<pid>-<n>, the making process's pid its first submatch.
var runGroupName = regexp.MustCompile(`^run-([1-9][0-9]*)-[0-9]+$`)

// IsRunGroup reports whether name is that of a group brig makes under its
// cgroup parent, run-<pid>-<n>: what a service may sweep.
func IsRunGroup(name string) bool { return runGroupName.MatchString(name) }

// ForeignGroups is the refusal of a cgroup parent that holds what brig did
// not make (cgroup.Foreign), or nil. It only reads: call it before
// cgroup.New, which writes into the parent. A parent or a layout that New
// refuses (an invalid name, no cgroups mounted) is left to New, which says
// so in its own words.
func ForeignGroups(parent string) error {
	dirs, err := cgroup.ParentDirs(cgroup.Config{Parent: parent})
	if err != nil {
		return nil
	}
	groups, procs, err := cgroup.Foreign(dirs, IsRunGroup)
	if err != nil {
		return fmt.Errorf("reading the cgroup parent %q: %w", parent, err)
	}
	if len(groups) == 0 && procs == 0 {
		return nil
	}
	// The parents of brig processes that run on groups within (their locks
	// held) are named as theirs (the third review: "did not make").
	held := slices.DeleteFunc(slices.Clone(groups), func(g string) bool { return !cgroup.ParentHeld("", parent+"/"+g) })
	groups = slices.DeleteFunc(groups, func(g string) bool { return slices.Contains(held, g) })
	if procs == 0 && len(held) == 0 && !slices.ContainsFunc(groups, func(g string) bool { return !crashLevel(dirs, g) }) {
		// brig's own: a nested parent's level (the upgrade probe of
		// 2026-12-06 read "did not make" of one).
		return fmt.Errorf("the cgroup parent %q holds %s, which hold nothing but empty run groups: the level of a nested cgroup parent that a crash of a brig service left; remove them with rmdir, deepest first, or give another parent (--cgroup-parent, sandbox.cgroup_parent)", parent, strings.Join(groups, ", "))
	}
	list := func(names []string) string {
		if len(names) > 5 {
			names = append(names[:5:5], "...")
		}
		return strings.Join(names, ", ")
	}
	var what []string
	if len(held) > 0 {
		what = append(what, fmt.Sprintf("the cgroup parents of running brig processes (%s)", list(held)))
	}
	if len(groups) > 0 {
		what = append(what, fmt.Sprintf("groups brig did not make (%s)", list(groups)))
	}
	if procs > 0 {
		what = append(what, fmt.Sprintf("%d processes of its own", procs))
	}
	idle := ""
	if procs == 0 && len(held) == 0 && !slices.ContainsFunc(groups, func(g string) bool { return !idleLevel(dirs, g) }) {
		// A crash of a service on a group within, before it made a run
		// group, leaves such a level too (the fourth review).
		idle = "; they hold no process: if a crash of a brig service on a group within left them, remove them with rmdir, deepest first"
	}
	return fmt.Errorf("the cgroup parent %q holds %s: brig takes its parent as its own, sweeps the groups in it and removes it when done, which would kill those processes; give a parent of brig's own (--cgroup-parent, sandbox.cgroup_parent)%s", parent, strings.Join(what, " and "), idle)
}

// crashLevel reports whether the group name in the parent at dirs holds
// nothing but empty run groups and levels of them, in every hierarchy, and
// one run group at least: what a crashed service on a nested parent (name/x)
// leaves.
func crashLevel(dirs []string, name string) bool {
	runs, other, idle := levelOf(dirs, name)
	return idle && !other && runs > 0
}

// idleLevel reports whether the group name in the parent at dirs holds no
// process, in any hierarchy, at any depth.
func idleLevel(dirs []string, name string) bool {
	_, _, idle := levelOf(dirs, name)
	return idle
}

// levelOf walks the group name in the parent at dirs, in every hierarchy: the
// run groups in its trees, whether a leaf is another group than a run group,
// and whether no group holds a process. A tree that does not exist holds
// nothing.
func levelOf(dirs []string, name string) (runs int, other, idle bool) {
	var walk func(dir string) bool
	walk = func(dir string) bool {
		if _, err := os.Lstat(dir); os.IsNotExist(err) {
			return true // not in this hierarchy
		}
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err != nil && !os.IsNotExist(err) || len(strings.TrimSpace(string(b))) > 0 {
			return false
		}
		ents, _ := os.ReadDir(dir)
		leaf := true
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			leaf = false
			if IsRunGroup(e.Name()) {
				runs++
			}
			if !walk(filepath.Join(dir, e.Name())) {
				return false
			}
		}
		other = other || leaf && !IsRunGroup(filepath.Base(dir))
		return true
	}
	idle = true
	for _, d := range dirs {
		idle = idle && walk(filepath.Join(d, name))
	}
	return runs, other, idle
}

// LeftoverOfDeadProcess reports whether a group named name under a parent that
// several brig processes share was made by a process that is gone: their names
// are run-<pid>-<n> (see clone). A live or reused pid keeps its groups.
func LeftoverOfDeadProcess(name string) bool {
	m := runGroupName.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	pid, err := strconv.Atoi(m[1])
	return err == nil && unix.Kill(pid, 0) == unix.ESRCH
}

// clone creates the run's cgroup and clones the init into its namespaces (or a
// reaper, which starts the program when program is set, into its pid
// namespace: it makes the others itself) and, where a cgroup2 directory
// exists, straight into the cgroup with CLONE_INTO_CGROUP. With copies, the
// init gets the interpreters' copies at pid1.CopiesFD.
func (l *Launcher) clone(useReaper, program, copies bool) (s *slot, retErr error) {
	name := fmt.Sprintf("run-%d-%d", os.Getpid(), groupSeq.Add(1))
	g, err := l.cfg.Cgroups.Create(name)
	if err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	s = &slot{group: g}
	if s.ids, err = l.ids.get(); err != nil {
		g.Delete()
		return nil, fmt.Errorf("taking host ids for a sandbox: %w", err)
	}
	s.released = l.ids.put
	var childEnds []*os.File
	// The slot made, for the deferred discard: a failure's `return nil,
	// err` sets the result s to nil first (an audit's exhausted descriptors
	// crashed the service there).
	made := s
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
		if retErr != nil {
			made.discard()
		}
	}()
	// capacity is an output pipe's (outputPipe), 0 for another.
	pipe := func(parentReads bool, capacity int) (*os.File, error) {
		newPipe := os.Pipe
		if capacity > 0 {
			newPipe = func() (*os.File, *os.File, error) { return outputPipe(capacity) }
		}
		r, w, err := newPipe()
		if err != nil {
			return nil, err
		}
		if parentReads {
			childEnds = append(childEnds, w)
			return r, nil
		}
		childEnds = append(childEnds, r)
		return w, nil
	}
	pipes := []struct {
		dst         **os.File
		parentReads bool
		capacity    int
	}{{&s.spec, false, 0}, {&s.status, true, 0}, {&s.stdout, true, stdoutPipeBytes}, {&s.stderr, true, stderrPipeBytes}}
	if useReaper && !program {
		pipes = pipes[:2] // it prints nothing; its stdout and stderr are /dev/null
	}
	for _, p := range pipes {
		if *p.dst, err = pipe(p.parentReads, p.capacity); err != nil {
			return nil, fmt.Errorf("making pipes: %w", err)
		}
	}
	// childEnds: spec read end, status write end, stdout and stderr write ends.
	sys := &syscall.SysProcAttr{Cloneflags: cloneFlags, Pdeathsig: syscall.SIGKILL}
	if fd := g.CloneFD(); fd >= 0 {
		sys.UseCgroupFD = true
		sys.CgroupFD = fd
	}
	files := map[int]*os.File{pid1.SpecFD: childEnds[0], pid1.StatusFD: childEnds[1]}
	if copies {
		files[pid1.CopiesFD] = l.copies.mnt
	}
	s.cmd = &exec.Cmd{
		Path: l.cfg.InitPath,
		Args: []string{"brig", pid1.InitArg},
		// The init's own environment; the program's comes from the spec.
		Env:         []string{"GOMAXPROCS=1"},
		SysProcAttr: sys,
	}
	if useReaper {
		// brig-reaper, or this binary, whose constructor takes it over
		// before its Go runtime starts. Its working directory is the root,
		// which pivot_root then moves to the sandbox's, as it does the root.
		s.cmd.Path, s.cmd.Args, s.cmd.Env, s.cmd.Dir = l.cfg.ReaperPath, []string{"brig", reaper.Arg}, []string{}, "/"
		s.reaper = true
		sys.Cloneflags = reaperCloneFlags
		// The namespace it copies for its sandbox's, when there is one.
		files[reaper.MountNSFD] = l.mountTemplate
	}
	s.cmd.ExtraFiles = extraFiles(files)
	if len(childEnds) == 4 {
		s.cmd.Stdout, s.cmd.Stderr = childEnds[2], childEnds[3]
	}
	if err := s.cmd.Start(); err != nil {
		path := s.cmd.Path
		s.cmd = nil
		return nil, cloneError(err, path, sys.UseCgroupFD, g.Path())
	}
	l.markOOMVictim(s.cmd.Process.Pid)
	s.msgs = make(chan pid1.Message, 4)
	go s.readMessages(s.status, s.msgs)
	return s, nil
}

// cloneError words a failed start of path, a sandbox's first process. exec.Cmd
// names the binary in every failure ("fork/exec /usr/lib/brig/brig-init: no
// such file or directory"), which reads as a missing binary or a full disk
// where the kernel refused the clone itself: clone3 into a removed cgroup
// fails ENOENT, past a namespace limit ENOSPC. The errno's meaning there is
// given.
func cloneError(err error, path string, intoCgroup bool, group string) error {
	_, missing := os.Stat(path)
	why := ""
	switch {
	case missing != nil:
	case intoCgroup && (errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.EBUSY) || errors.Is(err, syscall.EOPNOTSUPP)):
		why = "the sandbox's cgroup " + group + " refused it (clone3's CLONE_INTO_CGROUP: a group removed, or one that may hold no process, under cgroup v2's rules)"
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EUSERS):
		why = "a namespace limit of this host was reached (/proc/sys/user/max_*_namespaces)"
	case errors.Is(err, syscall.EAGAIN):
		why = "a process limit was reached (the host's kernel.threads-max or pid_max, or a cgroup's pids.max)"
	}
	if why != "" {
		return fmt.Errorf("cloning the init into new namespaces: %w: %s is there; the kernel refused the clone: %s", err, path, why)
	}
	return fmt.Errorf("cloning the init into new namespaces: %w", err)
}

// discard kills a slot's init (and with it its pid namespace), closes its pipes and
// removes its cgroup. Idempotent. Its error is the cgroup's removal's: the group
// stays behind (a later sweep removes it), and the ids are given back all the same,
// since no process of the sandbox is left.
func (s *slot) discard() error {
	var err error
	s.stop()
	if s.zchild != nil {
		s.zchild.kill()
	}
	for _, f := range []*os.File{s.spec, s.status, s.stdout, s.stderr} {
		if f != nil {
			f.Close()
		}
	}
	s.spec, s.status, s.stdout, s.stderr = nil, nil, nil, nil
	if s.group != nil {
		err = s.group.Delete()
		s.group = nil
	}
	// Every process of the sandbox is dead and reaped by now (stop killed its
	// cgroup and its init, whose pid namespace took the rest): its ids are free.
	if s.released != nil {
		s.released(s.ids)
		s.released = nil
	}
	return err
}

// setNice sets the nice value of every thread of the init and of its children (a
// warm sandbox's waiting interpreter; the program, forked later from the init's
// main thread, inherits the init's). Best effort: a thread that exits meanwhile
// is no error, and a failure only costs speed.
//
// A zygote's sandbox needs only its child set: its init changed its identity
// while it prepared (hardenSteps), which put every thread of it at nice 0
// (gatherThreads), and it starts no program. Reading and setting the init's
// threads cost a run 0.17 ms before its program started.
func (s *slot) setNice(nice int) {
	if s.reaperRun {
		return // its reaper sets its own and its program's at the run
	}
	if s.zchild != nil {
		unix.Setpriority(unix.PRIO_PROCESS, s.zchild.pid, nice)
		return
	}
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	pid := s.cmd.Process.Pid
	pids := []string{strconv.Itoa(pid)}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); err == nil {
		pids = append(pids, strings.Fields(string(b))...)
	}
	for _, p := range pids {
		tasks, _ := os.ReadDir("/proc/" + p + "/task")
		for _, t := range tasks {
			if tid, err := strconv.Atoi(t.Name()); err == nil {
				unix.Setpriority(unix.PRIO_PROCESS, tid, nice)
			}
		}
	}
}

// onlyProgramLeft reports whether the sandbox's cgroup holds no process but
// its init and its warm program: none that could write to the program's
// output pipes. (A zygote's child's pipes are its own; node's are its init's
// stdout and stderr too, which the init points at /dev/null once the program
// has them, and never writes to.) A process that has exited leaves the list
// only after it has closed its files.
func (s *slot) onlyProgramLeft() bool {
	program := s.programPID()
	if program == 0 || s.cmd == nil || s.cmd.Process == nil {
		return false
	}
	pids, err := s.group.Procs()
	if err != nil {
		return false
	}
	for _, p := range pids {
		if p != program && p != s.cmd.Process.Pid {
			return false
		}
	}
	return true
}

// exited reports whether pid, a waiting warm interpreter (its pid 1's child,
// which does not reap it before the run: its pid can't be reused), has
// exited: a zombie, or gone.
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := bytes.LastIndexByte(b, ')')
	return err != nil || i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// onlyChild returns the one child of pid, from /proc/PID/task/PID/children.
func onlyChild(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		return 0, fmt.Errorf("the init has %d children, want its program alone", len(f))
	}
	return strconv.Atoi(f[0])
}

// kill kills every process of the run: those of its pid namespace, then the
// cgroup's. It does not wait for them to be reaped.
func (s *slot) kill() {
	s.killNamespace()
	if s.group != nil {
		s.group.Kill()
	}
}

// killNamespace kills every process of the sandbox's pid namespace: its init,
// whose death takes every other process of the namespace with it, and a
// zygote's child, which the kernel places in that namespace though it is not
// the init's (and which, before it joined the cgroup, is not among the
// group's). No process of a run can leave the namespace, so this ends the run;
// the cgroup's kill, in release, is the second line. It is what a run's end
// waits for, rather than the cgroup's kill, because it takes no lock of the
// kernel's: writing cgroup.kill waits for cgroup_mutex, which the making and
// removing of other sandboxes' groups hold, for an RCU grace period at each
// v1 move, and which held a run's result back by 10 to 25 ms at times.
func (s *slot) killNamespace() {
	if s.zchild != nil && s.zchild.pidfd >= 0 {
		unix.PidfdSendSignal(s.zchild.pidfd, unix.SIGKILL, nil, 0)
	}
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
	}
}

// stop kills the run's processes and reaps the init. Idempotent.
func (s *slot) stop() {
	s.kill()
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Wait()
		s.cmd.Process = nil
	}
}

// readMessages decodes the init's status pipe into msgs and closes msgs at
// EOF, when the init is gone: a pooled sandbox's pool is told (tend).
func (s *slot) readMessages(f *os.File, msgs chan<- pid1.Message) {
	defer close(msgs)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m pid1.Message
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			msgs <- m
		}
	}
	s.initEnded.Store(true)
	if s.pooled.Load() {
		select {
		case s.poke <- struct{}{}:
		default: // the pool is told already
		}
	}
}

// endedOutside wakes the pool's tend for s, just put in its pool, when its
// init ended while it was out of it (taken by tend, or on its way from a
// filler): readMessages then told no one, and a CI run's pool kept a dead
// sandbox for good. pooled is stored before initEnded is loaded here, and
// the other way round there, so one of the two sees the other.
func (s *slot) endedOutside() {
	if s.initEnded.Load() {
		select {
		case s.poke <- struct{}{}:
		default:
		}
	}
}

// dead says why a pooled sandbox can no longer serve a run, or "" while it
// can: its init ended (killed from outside; its namespaces went with it), or
// its program died waiting (its zygote or its node was killed). Not a run's
// failure: the run takes another.
func (s *slot) dead() string {
	switch {
	case s.initEnded.Load():
		return "its pid 1 ended"
	case s.zchild != nil && !s.zchild.alive():
		return "its program or the zygote that forked it ended"
	case s.zchild == nil && s.childPID > 0 && exited(s.childPID):
		return "its program ended"
	}
	return ""
}
