package supervisor

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/internal/safedir"
)

// The journal keeps every accepted run's record in a bbolt file in the state
// directory, so that a restarted service answers for every id it accepted. Each
// write is an fsynced transaction (about 0.3 ms here; records that come
// together share one), and a run's result is committed before its id leaves
// memory. A run that can reach outside (any network mode but none) is
// committed before it starts (accept), so that even a crash of the host leaves
// its record, finished as stopped with outcome unknown at the next start. A run
// without network is appended, unsynced, to a file of pending records and starts
// at once while its transaction commits (acceptSoon): it can change nothing
// outside its sandbox, so a record lost with the host's page cache loses
// nothing a retry could repeat. A result too is appended to the pending file
// before the run is answered (answered). Each line survives a crash of the
// service, which the kernel outlives; opening the journal commits what the
// file holds.
//
// A run is keyed by its id and the uid of the peer that created it (API.md:
// ids are scoped to the peer uid), written "id/uid": an id never holds a "/",
// so the runs of one id under every uid share the prefix "id/", which is how an
// admin finds them.
var (
	// bucketRuns maps a run's key to its record (JSON).
	bucketRuns = []byte("runs")
	// bucketInflight holds the keys of runs accepted and not finished: what a
	// restart must finish as stopped.
	bucketInflight = []byte("inflight")
	// bucketExpiry holds finished-at (8 bytes, big-endian Unix ns) + key: the
	// order in which results expire.
	bucketExpiry = []byte("expiry")
	// bucketMeta holds the journal's layout version (metaVersion).
	bucketMeta  = []byte("meta")
	metaVersion = []byte("version")
)

// journalVersion is the layout this code writes. Version 1 (no meta bucket)
// keyed runs by id alone; openJournal migrates it in place.
const journalVersion = 2

// runKey names a run: its id within the uid of the peer that created it.
type runKey struct {
	uid int
	id  string
}

// bytes is the key's form in the journal, "id/uid".
func (k runKey) bytes() []byte {
	return []byte(k.id + "/" + strconv.Itoa(k.uid))
}

// parseRunKey reads a key written by runKey.bytes.
func parseRunKey(b []byte) (runKey, error) {
	i := bytes.LastIndexByte(b, '/')
	if i < 0 {
		return runKey{}, fmt.Errorf("journal key %q has no uid", b)
	}
	uid, err := strconv.Atoi(string(b[i+1:]))
	if err != nil || uid < 0 {
		return runKey{}, fmt.Errorf("journal key %q has no uid", b)
	}
	return runKey{uid: uid, id: string(b[:i])}, nil
}

// journalFile is the journal's name in the state directory, pendingFile that
// of the results answered and perhaps not yet in it.
const (
	journalFile = "journal.db"
	pendingFile = "journal.pending"
	// journalLockFile is the flock held while the journal is open (lockJournal).
	journalLockFile = "journal.lock"
	// pendingMax is the size past which the pending file is emptied, once
	// every result it holds is in the journal.
	pendingMax = 4 << 20
)

// record is what the journal keeps of a run.
type record struct {
	Key      string `json:"key"`
	Language string `json:"language"`
	Network  string `json:"network"`
	// Packages are the run's package requests, so that a run the service's
	// stop interrupted lists them in its result as any other failed run does.
	Packages   []string  `json:"packages,omitempty"`
	PeerUID    int       `json:"peer_uid"`
	AcceptedAt time.Time `json:"accepted_at"`
	// Started is whether the program started (the replayed stream has a started
	// event).
	Started    bool        `json:"started,omitempty"`
	FinishedAt time.Time   `json:"finished_at,omitzero"`
	Result     *api.Result `json:"result,omitempty"`
	// Partial marks a result kept without its output (Service.keepStatus):
	// a start's replay commits it only where the whole one is not committed.
	Partial bool `json:"partial,omitempty"`

	// enc is the record's JSON once appendPending has made it, which
	// putRecord then writes as it is: a result with its output is encoded
	// once. line is the number of its line in the pending file, 0 for none.
	enc  []byte
	line uint64
	// room gives back the room of the record's answer (replyBudget), taken
	// when readRecord read it from the journal; nil when none was.
	room func()
}

// release gives back the room of rec's answer: the answer is written, or it
// will not be.
func (rec *record) release() {
	if rec != nil && rec.room != nil {
		rec.room()
		rec.room = nil
	}
}

type journal struct {
	db *bolt.DB
	// lock is the flock on the state directory's journal.lock, held while the
	// journal is open: bbolt's own is on the database's file, which a
	// compaction replaces (compactIfSparse).
	lock io.Closer
	// pending is the append-only file of records not yet committed
	// (acceptSoon, answered), named path; mu guards appending to it and
	// rewriting it, and unsaved holds its lines not yet committed to db, by
	// the number appendPending gave each (from 1, in the order written);
	// size is the file's, as written; torn says that a failed write left part
	// of a line at its end that could not be cut off, which the next line
	// then starts after a newline of its own.
	pending *os.File
	path    string
	mu      sync.Mutex
	unsaved map[uint64][]byte
	lines   uint64
	size    int64
	torn    bool
	// skipped is how many lines of the pending file the open could not read
	// (a crash's torn last line among them), and wasEmpty whether the
	// database's file was there but empty, for the service to log.
	skipped  int
	wasEmpty bool
	// watched is the database's path and the file it named when the service
	// started (watch), and lost, once that is gone from the path (checkFiles),
	// why: every record refused from then on, under mu.
	watched  string
	dev, ino uint64
	dbSize   int64 // the database file's size at the last look
	lost     *journalLost
}

// pendingEntry is one line of the pending file.
type pendingEntry struct {
	ID     string          `json:"id"`
	UID    int             `json:"uid"`
	Record json.RawMessage `json:"record"`
}

// errNoRecord is get's answer for an id the journal does not hold.
var errNoRecord = errors.New("no such run in the journal")

// openJournal opens stateDir's journal under lock, the state directory's
// lock held already (LockStateDir), which its caller closes, once it is
// done with the directory; or, when nil, under one it takes and closes.
func openJournal(stateDir string, lock *os.File) (*journal, error) {
	if lock != nil {
		j, err := openJournalLocked(stateDir, nopCloser{lock})
		return j, err
	}
	lock, err := LockStateDir(stateDir)
	if err != nil {
		return nil, err
	}
	return openJournalLocked(stateDir, lock)
}

// nopCloser is a lock the journal holds without closing it: its caller's.
type nopCloser struct{ *os.File }

func (nopCloser) Close() error { return nil }

func openJournalLocked(stateDir string, lock io.Closer) (*journal, error) {
	path := filepath.Join(stateDir, journalFile)
	// bbolt makes a database of an empty file without a word; a journal that
	// was emptied (or whose first start crashed) is said to be new.
	fi, err := os.Stat(path)
	wasEmpty := err == nil && fi.Size() == 0
	db, err := openBolt(path)
	if err != nil {
		lock.Close()
		return nil, err
	}
	err = readingDamaged(path, func() error {
		return db.Update(func(tx *bolt.Tx) error {
			for _, b := range [][]byte{bucketRuns, bucketInflight, bucketExpiry, bucketMeta} {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return migrateLocked(tx)
		})
	})
	if err != nil {
		db.Close()
		lock.Close()
		return nil, fmt.Errorf("initialising the journal %s: %w", path, err)
	}
	j := &journal{db: db, lock: lock, wasEmpty: wasEmpty}
	if err := readingDamaged(path, func() error { return j.openPending(filepath.Join(stateDir, pendingFile)) }); err != nil {
		db.Close()
		lock.Close()
		return nil, err
	}
	return j, nil
}

// StateDirHint says what a state directory must be.
const StateDirHint = "give --state-dir (state_dir) a folder on a local filesystem that root owns and only root may write, on a path no one else can change"

// LockStateDir takes stateDir's journal lock, making the directory if it is
// not there, and returns it held, for Config.StateLock: brig serve takes it
// before it touches the directory, where a second service on one state
// directory had rewritten its rootfs skeleton before its journal refused it
// (the recovery probe of 2026-12-05), and holds it until its journal does.
func LockStateDir(stateDir string) (*os.File, error) {
	// 0755, as the rootfs makes its folders (rootfs's dirMode), which made
	// a new state directory before this did; the journal's files are 0600.
	// One another user may write to is refused before any file is made in
	// it (safedir).
	if err := safedir.Make(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("the state directory: %w: %s", err, StateDirHint)
	}
	return lockJournal(stateDir, filepath.Join(stateDir, journalFile))
}

// lockJournal takes the flock on stateDir's journal.lock, waiting a second at
// most, as bbolt waits for its own (a service that is stopping may still hold
// it). The file is never removed nor replaced.
func lockJournal(stateDir, path string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(stateDir, journalLockFile), os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		// A read-only or full disk, most likely (the operator probe).
		return nil, fmt.Errorf("opening the journal's lock: %w: the state directory must be writable, with room: %s", err, StateDirHint)
	}
	for deadline := time.Now().Add(time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("opening the journal %s: another process holds it (is another brig serve using this state directory?)", path)
			}
			return nil, fmt.Errorf("locking the journal: %w", err)
		}
	}
}

// openBolt opens the journal's database. The lock timeout turns a second
// service on the same state directory into an error instead of a hang. A
// file that is not a whole bbolt database (truncated, overwritten) is refused
// with what to do, rather than read: bbolt's open reads every page (the free
// pages' scan below), and a damaged one faults or panics in it.
func openBolt(path string) (*bolt.DB, error) {
	var db *bolt.DB
	err := readingDamaged(path, func() error {
		// The free pages' list is kept in a map and not written with each
		// commit, but rebuilt by a scan at the open (as etcd keeps it):
		// pruning leaves tens of thousands of free pages, and the list bbolt
		// sorted and wrote at each commit made a committed acceptance cost
		// 1.5 ms of CPU in a journal of 100,000 runs half pruned
		// (BenchmarkJournalFull).
		var err error
		db, err = bolt.Open(path, 0o600, boltOptions)
		return err
	})
	switch {
	case errors.Is(err, bolt.ErrTimeout):
		return nil, fmt.Errorf("opening the journal %s: another process holds it (is another brig serve using this state directory?)", path)
	case errors.Is(err, bolt.ErrInvalid), errors.Is(err, bolt.ErrChecksum), errors.Is(err, bolt.ErrVersionMismatch),
		// A file cut short of bbolt's two meta pages, in words it does not
		// export.
		err != nil && strings.HasPrefix(err.Error(), "file size too small"):
		return nil, damaged(path, err)
	case err != nil:
		return nil, fmt.Errorf("opening the journal %s: %w", path, err)
	}
	return db, nil
}

// boltOptions are the journal database's (openBolt says why).
var boltOptions = &bolt.Options{Timeout: time.Second, FreelistType: bolt.FreelistMapType, NoFreelistSync: true}

// sparseAbove is the size from which a start compacts a journal that is at
// least half free pages. bbolt reuses the pages a prune frees but never gives
// them back to the file system: after a burst of large outputs the file stays
// at its peak (153 MB after 4,500 runs of 1 to 2 MB of output, all pruned an
// hour later), and its pages show in the service's memory as it reads them.
var sparseAbove int64 = 64 << 20

// compactIfSparse copies the journal's records into a new file, put in the
// old one's place, when the old one is sparseAbove or larger and at least
// half free pages; it returns the sizes before and after. Called at the
// start, after the prune and before anything else uses the journal, whose
// lock (journal.lock, not the database file's own, which the rename replaces)
// keeps a second service out throughout. The new database is kept open, as
// it is. A crash before the rename leaves the old file whole and a temporary
// one that the next start removes. A journal.db that is a symbolic link (to
// another disk) is left as it is: the rename would replace the link.
func (j *journal) compactIfSparse(path string) (before, after int64, err error) {
	tmp := path + ".compact"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, 0, fmt.Errorf("removing a compaction's leftover %s: %w", tmp, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, 0, err
	}
	if !fi.Mode().IsRegular() {
		return fi.Size(), fi.Size(), nil
	}
	st := j.db.Stats()
	free := int64(st.FreePageN+st.PendingPageN) * int64(j.db.Info().PageSize)
	if fi.Size() < sparseAbove || 2*free < fi.Size() {
		return fi.Size(), fi.Size(), nil
	}
	dst, err := bolt.Open(tmp, 0o600, boltOptions)
	if err != nil {
		return 0, 0, fmt.Errorf("compacting the journal: %w", err)
	}
	fail := func(err error) (int64, int64, error) {
		dst.Close()
		os.Remove(tmp)
		return 0, 0, fmt.Errorf("compacting the journal: %w", err)
	}
	if err := readingDamaged(path, func() error { return bolt.Compact(dst, j.db, 16<<20) }); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	// Best effort: a rename lost to a crash leaves the old file, whole, which
	// a later start compacts again.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	j.db.Close()
	j.db = dst
	before, after = fi.Size(), fi.Size()
	if now, err := os.Stat(path); err == nil {
		after = now.Size()
	}
	return before, after, nil
}

// errDamaged marks a journal that could not be read as a bbolt database.
var errDamaged = errors.New("the journal is damaged")

// damaged is the refusal of a journal that can't be read: what was lost by
// moving it aside, and how.
func damaged(path string, cause any) error {
	return fmt.Errorf("%w: %s can't be read (%v). Restore it from a backup, or move it aside (mv %s %s.damaged) to start with an empty journal: the results it holds are then lost, and a retry of one of their ids runs its program again", errDamaged, path, cause, path, path)
}

// readingDamaged runs f, which reads the journal at path, with a fault on its
// mapped pages (a file cut short under bbolt's map) or a panic of bbolt's
// checks turned into damaged's error instead of a crash of the service.
func readingDamaged(path string, f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = damaged(path, r)
		}
	}()
	return f()
}

// openPending commits the records a crashed service appended and may not have
// committed (a torn last line, the crash's, is skipped), in the order it
// appended them, then empties the file for this service's. A line without a
// result is an accepted run's (acceptSoon): it is put in flight, for recover
// to finish, unless the journal already holds the run's record.
func (j *journal) openPending(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("opening the journal's pending results %s: %w", path, err)
	}
	b, err := io.ReadAll(f)
	if err == nil && len(b) > 0 {
		err = j.db.Update(func(tx *bolt.Tx) error {
			for _, line := range bytes.Split(b, []byte("\n")) {
				var e pendingEntry
				var rec record
				if json.Unmarshal(line, &e) != nil || json.Unmarshal(e.Record, &rec) != nil {
					if len(bytes.TrimSpace(line)) > 0 {
						j.skipped++
					}
					continue
				}
				k := runKey{uid: e.UID, id: e.ID}
				if rec.Result == nil {
					if tx.Bucket(bucketRuns).Get(k.bytes()) != nil {
						continue // committed, and perhaps finished since
					}
					rec.enc = e.Record
					if err := acceptLocked(tx, k, &rec); err != nil {
						return err
					}
					continue
				}
				if rec.Partial && hasResult(tx.Bucket(bucketRuns).Get(k.bytes())) {
					// The whole result was committed after it, before the
					// file's compaction (the review of 2026-12-06: its
					// output was lost at the restart).
					continue
				}
				if err := finishLocked(tx, k, &rec); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err == nil {
		err = f.Truncate(0)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("committing the journal's pending results %s: %w", path, err)
	}
	j.pending, j.path, j.unsaved = f, path, map[uint64][]byte{}
	return nil
}

// migrateLocked brings the journal to journalVersion within tx. Version 1
// keyed each bucket by the run id alone; every record of it holds the uid of
// the peer that created the run (peer_uid), so each entry is rekeyed to
// "id/uid" and nothing is lost. An entry whose record can't be read is dropped:
// it could not be answered anyway. A journal of a later version is refused
// rather than misread.
func migrateLocked(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	version := 1
	if v := meta.Get(metaVersion); v != nil {
		n, err := strconv.Atoi(string(v))
		if err != nil {
			return fmt.Errorf("reading the journal's version %q: %w", v, err)
		}
		version = n
	}
	switch {
	case version == journalVersion:
		return nil
	case version > journalVersion:
		return fmt.Errorf("the journal is of version %d, written by a later brig; this one reads up to %d (use that brig, or move the state directory's journal.db away)", version, journalVersion)
	}
	runs, inflight, expiry := tx.Bucket(bucketRuns), tx.Bucket(bucketInflight), tx.Bucket(bucketExpiry)
	// Keys are collected first: writing under a bbolt cursor can skip keys.
	owner := map[string]int{}
	var oldRuns [][]byte
	runs.ForEach(func(k, v []byte) error {
		oldRuns = append(oldRuns, append([]byte(nil), k...))
		var rec record
		if json.Unmarshal(v, &rec) == nil {
			owner[string(k)] = rec.PeerUID
		}
		return nil
	})
	for _, k := range oldRuns {
		v := append([]byte(nil), runs.Get(k)...)
		if err := runs.Delete(k); err != nil {
			return err
		}
		if uid, ok := owner[string(k)]; ok {
			if err := runs.Put(runKey{uid: uid, id: string(k)}.bytes(), v); err != nil {
				return err
			}
		}
	}
	var oldInflight, oldExpiry [][]byte
	inflight.ForEach(func(k, _ []byte) error { oldInflight = append(oldInflight, append([]byte(nil), k...)); return nil })
	expiry.ForEach(func(k, _ []byte) error { oldExpiry = append(oldExpiry, append([]byte(nil), k...)); return nil })
	for _, k := range oldInflight {
		if err := inflight.Delete(k); err != nil {
			return err
		}
		if uid, ok := owner[string(k)]; ok {
			if err := inflight.Put(runKey{uid: uid, id: string(k)}.bytes(), nil); err != nil {
				return err
			}
		}
	}
	for _, k := range oldExpiry {
		if err := expiry.Delete(k); err != nil {
			return err
		}
		if len(k) < 8 {
			continue
		}
		if uid, ok := owner[string(k[8:])]; ok {
			nk := append(append([]byte(nil), k[:8]...), runKey{uid: uid, id: string(k[8:])}.bytes()...)
			if err := expiry.Put(nk, nil); err != nil {
				return err
			}
		}
	}
	return meta.Put(metaVersion, []byte(strconv.Itoa(journalVersion)))
}

// close closes the journal, and empties the pending file when every result it
// holds is committed (a clean stop leaves nothing for the next start to do).
func (j *journal) close() error {
	j.mu.Lock()
	var err error
	if len(j.unsaved) == 0 {
		err = j.pending.Truncate(0)
	}
	j.mu.Unlock()
	return errors.Join(err, j.db.Close(), j.pending.Close(), j.lock.Close())
}

// accept records a run that was just accepted, committed before it returns.
func (j *journal) accept(k runKey, rec *record) error {
	if err := j.lostErr(); err != nil {
		return err
	}
	return j.db.Update(func(tx *bolt.Tx) error { return acceptLocked(tx, k, rec) })
}

func acceptLocked(tx *bolt.Tx, k runKey, rec *record) error {
	if err := putRecord(tx, k, rec); err != nil {
		return err
	}
	return tx.Bucket(bucketInflight).Put(k.bytes(), nil)
}

// commit is a record's transaction under way: err is set when done is closed.
type commit struct {
	done chan struct{}
	err  error
}

// watch notes the file the database's path names now, for checkFiles.
func (j *journal) watch(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.watched, j.dev, j.ino, j.dbSize = path, st.Dev, st.Ino, st.Size
	return nil
}

// checkFiles returns an error, the first time only, when the database's path
// no longer names the file the journal writes (watch): the state directory
// was deleted or replaced under the service, whose records then went to a
// file no start would read (the operator probe of 2026-12-06: every result
// lost at the restart, the service's health "ok" throughout). From then on
// the journal refuses every record (lostErr).
func (j *journal) checkFiles() error {
	var st unix.Stat_t
	err := unix.Stat(j.watched, &st)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.watched == "" || j.lost != nil {
		return nil
	}
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		j.lost = &journalLost{fmt.Sprintf("the journal %s is gone from the disk (%v): was the state directory deleted? Its results can't be kept: restart the service on a state directory that exists (those it answered since are lost)", j.watched, err)}
	case err != nil:
		// Another failure (EIO, a network filesystem's ESTALE) may pass:
		// the journal's own writes say what it means; looked at again at
		// the next tick.
		return nil
	case st.Dev != j.dev || st.Ino != j.ino:
		j.lost = &journalLost{fmt.Sprintf("the journal %s was replaced under the service: was the state directory deleted or moved? Its results can't be kept: restart the service (those it answered since are lost)", j.watched)}
	case st.Size < j.dbSize:
		// bbolt only grows its file while it is open: a shorter one was
		// cut by something else (a log rotation's copytruncate, a "> file"),
		// and its next read past the end faults (the crash probe).
		j.lost = &journalLost{fmt.Sprintf("the journal %s was cut short under the service (from %d to %d bytes): is a tool emptying the state directory's files? Restart the service, and if the restart says the journal is damaged, move it aside as it says (those it answered since are lost)", j.watched, j.dbSize, st.Size)}
	default:
		j.dbSize = st.Size
		return nil
	}
	return j.lost
}

// journalLost is checkFiles's error: the journal's file is gone from its
// path or cut short, and the journal neither reads nor writes any more (a
// read past a cut faults the process: the review of 2026-12-06).
type journalLost struct{ msg string }

func (e *journalLost) Error() string { return e.msg }

// lostAnswer is what a client is told of a lost journal: not its host path.
const lostAnswer = "the service's journal is lost (its state directory was deleted, moved or emptied under it), so it can't record or read runs until its operator restarts it"

// lostErr is checkFiles's error, once it has found the journal gone.
func (j *journal) lostErr() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.lost == nil {
		return nil // not a nil *journalLost in an error
	}
	return j.lost
}

// view reads the journal in a transaction, unless it is lost; a fault on its
// mapped pages (a file cut short before checkFiles saw it) is an error, not
// the service's end.
func (j *journal) view(f func(tx *bolt.Tx) error) error {
	if err := j.lostErr(); err != nil {
		return err
	}
	return readingDamaged(j.watchedPath(), func() error { return j.db.View(f) })
}

// watchedPath is the database's path, for messages.
func (j *journal) watchedPath() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.watched
}

// acceptSoon records a run that was just accepted in the pending file, in one
// write(2) without an fsync, and commits it in the background, in a
// transaction shared with the records that come with it (bbolt's Batch). The
// caller waits for the returned commit before the run's finish, which must
// come after it. (Committed before the run started, as accept does, a warm
// run's start waited 1.5 ms p50 for the transaction's two fsyncs, about a
// fifth of its time back to back.)
func (j *journal) acceptSoon(k runKey, rec *record) (*commit, error) {
	if err := j.appendPending(k, rec); err != nil {
		return nil, err
	}
	c := &commit{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		if c.err = j.db.Batch(func(tx *bolt.Tx) error { return acceptLocked(tx, k, rec) }); c.err == nil {
			c.err = j.saved(rec.line)
		}
	}()
	return c, nil
}

// answered appends a run's result to the pending file, in one write(2) and
// without an fsync, before the run is answered: from then on it survives a
// crash of the service (API.md: results survive a restart), which the kernel
// outlives; finish makes it durable on disk. (Written through the journal's own
// transaction instead, the answer waited for its fsyncs: spaced warm runs' p50
// rose by 1 to 1.5 ms.)
func (j *journal) answered(k runKey, rec *record) error {
	return j.appendPending(k, rec)
}

// appendPending appends rec to the pending file, its encoding kept in rec.enc
// for the transaction that commits it and its line's number in rec.line for
// saved.
func (j *journal) appendPending(k runKey, rec *record) error {
	enc, err := api.Marshal(rec)
	if err != nil {
		return err
	}
	rec.enc = enc
	b, err := api.Marshal(pendingEntry{ID: k.id, UID: k.uid, Record: enc})
	if err != nil {
		return err
	}
	b = append(b, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.lost != nil {
		return j.lost
	}
	line := b
	if j.torn {
		line = append([]byte{'\n'}, b...)
	}
	if n, err := j.pending.Write(line); err != nil {
		// Part of the line may be in the file (a full disk): cut it off, so
		// that the next line is not glued to it and lost with it at the next
		// start's read; where that fails too, the next line starts on a
		// line of its own.
		if n > 0 {
			if terr := j.pending.Truncate(j.size); terr != nil {
				j.size += int64(n)
				j.torn = true
			}
		}
		return fmt.Errorf("writing a pending record: %w", err)
	}
	j.size += int64(len(line))
	j.torn = false
	j.lines++
	rec.line = j.lines
	j.unsaved[rec.line] = b
	return nil
}

// finish records a run's answered result. The results of runs that end
// together share one transaction and its fsyncs (bbolt's Batch, which waits
// up to its MaxBatchDelay for others to join). The caller has already
// answered the run, the result safe in the pending file: the wait costs it
// nothing, and, unlike a goroutine blocked in fsync, a goroutine waiting for
// the batch leaves its processor to the handler that writes the response.
func (j *journal) finish(k runKey, rec *record) error {
	if err := j.lostErr(); err != nil {
		return err
	}
	if err := j.db.Batch(func(tx *bolt.Tx) error { return finishLocked(tx, k, rec) }); err != nil {
		return err // its pending line stays, for the next start to commit
	}
	if err := j.saved(rec.line); err != nil {
		return &compactError{err}
	}
	return nil
}

// compactError is finish's error when the record was committed and only the
// pending file's compaction that followed failed (a full disk), which the
// next commit or prune tries again: the result is safe, and is not held as
// unwritten (which refuses new runs: the review of 2026-12-06).
type compactError struct{ err error }

func (e *compactError) Error() string {
	return "compacting the journal's pending file (the record is committed): " + e.err.Error()
}
func (e *compactError) Unwrap() error { return e.err }

// saved notes that the pending file's line number line (0: none) is
// committed. A file grown past pendingMax is then compacted: emptied, or,
// while some of its lines are not committed (under steady load there nearly
// always are), replaced by a file of those lines alone.
func (j *journal) saved(line uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.unsaved, line)
	if j.size <= pendingMax {
		return nil
	}
	return j.compactLocked()
}

// compactPending drops the committed lines of the pending file, whatever its
// size: the service calls it with each prune, so that a result's output
// stays on disk no longer than its record (a quiet host's file could hold
// pruned runs' output otherwise, up to pendingMax).
func (j *journal) compactPending() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.size == 0 {
		return nil
	}
	return j.compactLocked()
}

// compactLocked empties the pending file, or replaces it by a file of its
// lines not yet committed, in their order.
func (j *journal) compactLocked() error {
	if len(j.unsaved) == 0 {
		if err := j.pending.Truncate(0); err != nil {
			return err
		}
		j.size, j.torn = 0, false
		return nil
	}
	// Written aside and renamed over the file, so that a crash midway leaves
	// the old file, whose extra lines are committed and commit again alike.
	tmp := j.path + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("rewriting the journal's pending file: %w", err)
	}
	var b []byte
	for _, n := range slices.Sorted(maps.Keys(j.unsaved)) {
		b = append(b, j.unsaved[n]...)
	}
	if _, err = f.Write(b); err == nil {
		err = os.Rename(tmp, j.path)
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("rewriting the journal's pending file: %w", err)
	}
	j.pending.Close()
	j.pending, j.size, j.torn = f, int64(len(b)), false
	return nil
}

// hasResult says whether b, a committed record's JSON, holds a result.
func hasResult(b []byte) bool {
	var rec struct {
		Result json.RawMessage `json:"result"`
	}
	return b != nil && json.Unmarshal(b, &rec) == nil && len(rec.Result) > 0 && string(rec.Result) != "null"
}

func finishLocked(tx *bolt.Tx, k runKey, rec *record) error {
	if err := putRecord(tx, k, rec); err != nil {
		return err
	}
	if err := tx.Bucket(bucketInflight).Delete(k.bytes()); err != nil {
		return err
	}
	return tx.Bucket(bucketExpiry).Put(expiryKey(rec.FinishedAt, k), nil)
}

func putRecord(tx *bolt.Tx, k runKey, rec *record) error {
	b := rec.enc
	if b == nil {
		var err error
		if b, err = api.Marshal(rec); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketRuns).Put(k.bytes(), b)
}

// get returns the record of k, or errNoRecord.
func (j *journal) get(k runKey) (*record, error) {
	return j.read(k, nil)
}

// requestKey returns the request key of k's record, or errNoRecord, without
// decoding the rest: a retry's id is compared before any room is taken for
// its answer (a reused id is a 409 whatever the service's room).
//
// A record is written with its key first (record's first field), which is
// read alone: json.Unmarshal scans the whole record, 54 ms for one of 6.6 MB
// (the review's), under the service's lock. One that does not begin so is
// decoded whole.
func (j *journal) requestKey(k runKey) (string, error) {
	var key struct {
		Key string `json:"key"`
	}
	err := j.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRuns).Get(k.bytes())
		if b == nil {
			return errNoRecord
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		if t, err := dec.Token(); err == nil && t == json.Delim('{') {
			if t, err := dec.Token(); err == nil && t == "key" {
				if t, err := dec.Token(); err == nil {
					if s, ok := t.(string); ok {
						key.Key = s
						return nil
					}
				}
			}
		}
		if err := json.Unmarshal(b, &key); err != nil {
			return damagedRecord(k, err)
		}
		return nil
	})
	return key.Key, err
}

// damagedRecord is the error of a record of k that bbolt keeps but JSON can't
// read: damage bbolt's pages do not show (it keeps no checksum of a value),
// named for the operator, where a bare decoding error had been the answer
// (the crash probe of 2026-12-06).
func damagedRecord(k runKey, err error) error {
	return fmt.Errorf("the journal's record of run %q (uid %d) is damaged and can't be read (%v); tell the operator: the state directory's journal.db needs restoring from a backup", k.id, k.uid, err)
}

// read is get, with hold, when not nil, given the length of the record's JSON
// before it is decoded; its error is read's. So the room of a large record's
// answer is taken before its decoded copy is made (Service.readRecord).
func (j *journal) read(k runKey, hold func(size int) error) (*record, error) {
	var rec *record
	err := j.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRuns).Get(k.bytes())
		if b == nil {
			return errNoRecord
		}
		if hold != nil {
			if err := hold(len(b)); err != nil {
				return err
			}
		}
		rec = new(record)
		if err := json.Unmarshal(b, rec); err != nil {
			return damagedRecord(k, err)
		}
		return nil
	})
	return rec, err
}

// owners returns the uids that have a run of id in the journal, in ascending
// key order.
func (j *journal) owners(id string) ([]int, error) {
	var uids []int
	err := j.view(func(tx *bolt.Tx) error {
		prefix := []byte(id + "/")
		c := tx.Bucket(bucketRuns).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if rk, err := parseRunKey(k); err == nil {
				uids = append(uids, rk.uid)
			}
		}
		return nil
	})
	return uids, err
}

// recover finishes every run that was in flight when the service last stopped,
// with the result stop gives it, and returns their keys.
func (j *journal) recover(stop func(id string, rec *record) *api.Result, now time.Time) ([]runKey, error) {
	var keys []runKey
	err := j.db.Update(func(tx *bolt.Tx) error {
		var pending [][]byte
		tx.Bucket(bucketInflight).ForEach(func(k, _ []byte) error {
			pending = append(pending, append([]byte(nil), k...))
			return nil
		})
		for _, kb := range pending {
			var rec record
			k, kerr := parseRunKey(kb)
			if b := tx.Bucket(bucketRuns).Get(kb); kerr != nil || b == nil || json.Unmarshal(b, &rec) != nil {
				// Nothing to answer with: drop the dangling entry.
				if err := tx.Bucket(bucketInflight).Delete(kb); err != nil {
					return err
				}
				continue
			}
			rec.Result = stop(k.id, &rec)
			rec.FinishedAt = now
			if err := finishLocked(tx, k, &rec); err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return nil
	})
	return keys, err
}

// prune removes the results that finished before cutoff and returns how many.
func (j *journal) prune(cutoff time.Time) (int, error) {
	if j.lostErr() != nil {
		return 0, nil // nothing to prune from: the service says it is lost
	}
	n := 0
	err := j.db.Update(func(tx *bolt.Tx) error {
		// Keys are collected first: deleting under a bbolt cursor can skip the
		// next key.
		var expired [][]byte
		end := string(expiryKey(cutoff, runKey{}))
		c := tx.Bucket(bucketExpiry).Cursor()
		for k, _ := c.First(); k != nil && string(k) < end; k, _ = c.Next() {
			expired = append(expired, append([]byte(nil), k...))
		}
		for _, k := range expired {
			if err := tx.Bucket(bucketRuns).Delete(k[8:]); err != nil {
				return err
			}
			if err := tx.Bucket(bucketExpiry).Delete(k); err != nil {
				return err
			}
		}
		n = len(expired)
		return nil
	})
	return n, err
}

func expiryKey(t time.Time, rk runKey) []byte {
	k := make([]byte, 8, 8+len(rk.id)+12)
	binary.BigEndian.PutUint64(k, uint64(t.UnixNano()))
	if rk == (runKey{}) {
		return k // the bound of a range: sorts before every key of its time
	}
	return append(k, rk.bytes()...)
}
