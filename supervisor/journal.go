package supervisor

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/brig-sandbox/brig/api"
)

// The journal keeps every accepted run's record in a bbolt file in the state
// directory, so that a restarted service answers for every id it accepted. Each
// write is one fsynced transaction (about 0.2 ms here): a run is in the journal
// before it starts, and its result is before its id leaves memory.
var (
	// bucketRuns maps a run id to its record (JSON).
	bucketRuns = []byte("runs")
	// bucketInflight holds the ids of runs accepted and not finished: what a
	// restart must finish as stopped.
	bucketInflight = []byte("inflight")
	// bucketExpiry holds finished-at (8 bytes, big-endian Unix ns) + id: the
	// order in which results expire.
	bucketExpiry = []byte("expiry")
)

// journalFile is the journal's name in the state directory.
const journalFile = "journal.db"

// record is what the journal keeps of a run.
type record struct {
	Key        string    `json:"key"`
	Language   string    `json:"language"`
	Network    string    `json:"network"`
	PeerUID    int       `json:"peer_uid"`
	AcceptedAt time.Time `json:"accepted_at"`
	// Started is whether the program started (the replayed stream has a started
	// event).
	Started    bool        `json:"started,omitempty"`
	FinishedAt time.Time   `json:"finished_at,omitzero"`
	Result     *api.Result `json:"result,omitempty"`
}

type journal struct {
	db *bolt.DB
}

// errNoRecord is get's answer for an id the journal does not hold.
var errNoRecord = errors.New("no such run in the journal")

func openJournal(stateDir string) (*journal, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the state directory: %w", err)
	}
	path := filepath.Join(stateDir, journalFile)
	// The lock timeout turns a second service on the same state directory into
	// an error instead of a hang.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("opening the journal %s: %w (is another brig serve using this state directory?)", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketRuns, bucketInflight, bucketExpiry} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("initialising the journal %s: %w", path, err)
	}
	return &journal{db: db}, nil
}

func (j *journal) close() error { return j.db.Close() }

// accept records a run that was just accepted.
func (j *journal) accept(id string, rec *record) error {
	return j.db.Update(func(tx *bolt.Tx) error {
		if err := putRecord(tx, id, rec); err != nil {
			return err
		}
		return tx.Bucket(bucketInflight).Put([]byte(id), nil)
	})
}

// finish records a run's result.
func (j *journal) finish(id string, rec *record) error {
	return j.db.Update(func(tx *bolt.Tx) error { return finishLocked(tx, id, rec) })
}

func finishLocked(tx *bolt.Tx, id string, rec *record) error {
	if err := putRecord(tx, id, rec); err != nil {
		return err
	}
	if err := tx.Bucket(bucketInflight).Delete([]byte(id)); err != nil {
		return err
	}
	return tx.Bucket(bucketExpiry).Put(expiryKey(rec.FinishedAt, id), nil)
}

func putRecord(tx *bolt.Tx, id string, rec *record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketRuns).Put([]byte(id), b)
}

// get returns the record of id, or errNoRecord.
func (j *journal) get(id string) (*record, error) {
	var rec *record
	err := j.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRuns).Get([]byte(id))
		if b == nil {
			return errNoRecord
		}
		rec = new(record)
		return json.Unmarshal(b, rec)
	})
	return rec, err
}

// recover finishes every run that was in flight when the service last stopped,
// with the result stop gives it, and returns their ids.
func (j *journal) recover(stop func(id string, rec *record) *api.Result, now time.Time) ([]string, error) {
	var ids []string
	err := j.db.Update(func(tx *bolt.Tx) error {
		var pending []string
		tx.Bucket(bucketInflight).ForEach(func(k, _ []byte) error {
			pending = append(pending, string(k))
			return nil
		})
		for _, id := range pending {
			var rec record
			if b := tx.Bucket(bucketRuns).Get([]byte(id)); b == nil || json.Unmarshal(b, &rec) != nil {
				// Nothing to answer with: drop the dangling entry.
				if err := tx.Bucket(bucketInflight).Delete([]byte(id)); err != nil {
					return err
				}
				continue
			}
			rec.Result = stop(id, &rec)
			rec.FinishedAt = now
			if err := finishLocked(tx, id, &rec); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	return ids, err
}

// prune removes the results that finished before cutoff and returns how many.
func (j *journal) prune(cutoff time.Time) (int, error) {
	n := 0
	err := j.db.Update(func(tx *bolt.Tx) error {
		// Keys are collected first: deleting under a bbolt cursor can skip the
		// next key.
		var expired [][]byte
		end := string(expiryKey(cutoff, ""))
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

func expiryKey(t time.Time, id string) []byte {
	k := make([]byte, 8, 8+len(id))
	binary.BigEndian.PutUint64(k, uint64(t.UnixNano()))
	return append(k, id...)
}
