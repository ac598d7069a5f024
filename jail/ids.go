package jail

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// IDRange is the block of host uids and gids that brig maps runs to. Each run
// takes two ids of it for as long as its sandbox exists: one its program's uid
// and gid (1000 inside the run's user namespace) and one its init's. No two live
// sandboxes share an id, so no per-uid kernel counter and no /proc or ptrace
// permission is shared between runs, nor with any host account.
//
// The range must be used by nothing else on the host (`brig check` says when an
// account, a process or a file owner falls in it), and every brig process on a
// host should be given the same range: they share it through lock files in
// IDLockDir.
type IDRange struct {
	// First is the range's first host id; zero means DefaultIDFirst.
	First uint32
	// Count is how many ids it holds, a multiple of 2*idBlockSlots; zero means
	// DefaultIDCount.
	Count uint32
}

const (
	// DefaultIDFirst starts the default range in the part of the 32-bit id space
	// that systemd's conventions leave unused (1879048192 to 2147483647, above
	// the container ranges), far from any account or subuid range.
	DefaultIDFirst = 0x70000000
	// DefaultIDCount is 65536 ids: 32768 sandboxes alive at once.
	DefaultIDCount = 1 << 16
	// IDLockDir holds one lock file per block of the range that a brig process
	// has claimed; the lock is held for the process's life (flock, released by
	// the kernel when it dies), so two brig processes never hand out the same id.
	IDLockDir = "/run/brig/ids"
	// idBlockSlots is how many sandboxes one claimed block serves.
	idBlockSlots = 64
)

func (r IDRange) withDefaults() IDRange {
	if r.First == 0 {
		r.First = DefaultIDFirst
	}
	if r.Count == 0 {
		r.Count = DefaultIDCount
	}
	return r
}

// Last is the range's last id.
func (r IDRange) Last() uint32 { return r.First + r.Count - 1 }

// Contains reports whether id lies in the range.
func (r IDRange) Contains(id uint32) bool { return id >= r.First && id-r.First < r.Count }

func (r IDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last()) }

func (r IDRange) validate() error {
	switch {
	case r.First < 1<<16:
		return fmt.Errorf("the id range %s starts below 65536, among the ids of host accounts", r)
	case r.Count < 2*idBlockSlots || r.Count%(2*idBlockSlots) != 0:
		return fmt.Errorf("the id range's size %d is not a multiple of %d", r.Count, 2*idBlockSlots)
	case uint64(r.First)+uint64(r.Count) > 1<<32-1:
		return fmt.Errorf("the id range %d+%d passes the largest id, 4294967294", r.First, r.Count)
	}
	return nil
}

// runIDs are one sandbox's host ids.
type runIDs struct {
	// UID and GID are the program's host ids (1000 inside its user namespace).
	UID, GID int
	// InitUID and InitGID are the ids its init drops to once the program runs.
	InitUID, InitGID int

	block *idBlock
	slot  int
}

// idAllocator hands out runIDs from the blocks of an IDRange this process has
// claimed, claiming another block when those are full.
type idAllocator struct {
	r       IDRange
	lockDir string

	mu sync.Mutex
	// blocks are the claimed blocks, in claim order; guarded by mu.
	blocks []*idBlock
}

type idBlock struct {
	index int // the block's position in the range
	lock  *os.File
	used  [idBlockSlots]bool // guarded by idAllocator.mu
}

// inUse is how many of the block's slots are handed out; the caller holds
// idAllocator.mu.
func (b *idBlock) inUse() int {
	n := 0
	for _, u := range b.used {
		if u {
			n++
		}
	}
	return n
}

// ErrNoIDs is returned when every block of the range is taken.
var ErrNoIDs = errors.New("every id of the range is in use")

func newIDAllocator(r IDRange, lockDir string) (*idAllocator, error) {
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the id lock directory: %w", err)
	}
	// The first block is claimed now, not at the first run: a range with no
	// free block fails at the start, and what a Launcher holds is the same
	// from its start to its close.
	a := &idAllocator{r: r, lockDir: lockDir}
	a.mu.Lock()
	_, err := a.claimLocked()
	a.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return a, nil
}

// get hands out a free slot of the claimed blocks picked at random, claiming
// another block only when they are full. Not the next slot in turn: a run can
// read its own host id (/proc/self/uid_map), and ids handed out in order
// counted, exactly, the sandboxes made for anyone between two of its runs (the
// identity probe of 2026-12-06; README lists the coarser counts that stay).
func (a *idAllocator) get() (runIDs, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	free := 0
	for _, b := range a.blocks {
		free += idBlockSlots - b.inUse()
	}
	if free == 0 {
		b, err := a.claimLocked()
		if err != nil {
			return runIDs{}, err
		}
		return a.takeLocked(b, rand.IntN(idBlockSlots)), nil
	}
	k := rand.IntN(free)
	for _, b := range a.blocks {
		for slot, used := range b.used {
			if used {
				continue
			}
			if k == 0 {
				return a.takeLocked(b, slot), nil
			}
			k--
		}
	}
	panic("jail: the id blocks' free count changed under their lock")
}

func (a *idAllocator) takeLocked(b *idBlock, slot int) runIDs {
	b.used[slot] = true
	first := int(a.r.First) + 2*(b.index*idBlockSlots+slot)
	return runIDs{UID: first, GID: first, InitUID: first + 1, InitGID: first + 1, block: b, slot: slot}
}

// claimLocked takes the first block of the range whose lock no brig process
// holds.
func (a *idAllocator) claimLocked() (*idBlock, error) {
	total := int(a.r.Count) / (2 * idBlockSlots)
	for i := range total {
		if slices.ContainsFunc(a.blocks, func(b *idBlock) bool { return b.index == i }) {
			continue
		}
		first := int(a.r.First) + 2*i*idBlockSlots
		path := filepath.Join(a.lockDir, fmt.Sprintf("%d.lock", first))
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("opening the id lock %q: %w", path, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue // another brig process holds it
			}
			return nil, fmt.Errorf("locking %q: %w", path, err)
		}
		b := &idBlock{index: i, lock: f}
		a.blocks = append(a.blocks, b)
		return b, nil
	}
	return nil, fmt.Errorf("%w (%s; widen it)", ErrNoIDs, a.r)
}

// put gives ids back once no process of theirs is left (the sandbox's cgroup
// is killed and its init reaped).
func (a *idAllocator) put(ids runIDs) {
	if ids.block == nil {
		return
	}
	a.mu.Lock()
	ids.block.used[ids.slot] = false
	a.mu.Unlock()
}

// close releases every claimed block (the locks' files stay, empty, for the
// next process).
func (a *idAllocator) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, b := range a.blocks {
		b.lock.Close()
	}
	a.blocks = nil
}

// IDsInUse reports whether a brig process holds the block of r that id lies in,
// for `brig check`: a process of such an id is a run's, not a stranger's.
func IDsInUse(r IDRange, lockDir string, id uint32) bool {
	r = r.withDefaults()
	if !r.Contains(id) {
		return false
	}
	block := int(id-r.First) / (2 * idBlockSlots)
	path := filepath.Join(lockDir, fmt.Sprintf("%d.lock", int(r.First)+2*block*idBlockSlots))
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}
