package supervisor

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/brig-sandbox/brig/api"
)

// BenchmarkJournal measures the journal's two writes of every run (README:
// "Journal"): go test -run XXX -bench Journal ./supervisor
//   - accept: one fsynced transaction, before the run is handed to its
//     goroutine;
//   - finish: results written by 128 goroutines at once, as runs that end
//     together are, which share bbolt's Batch transactions: the journal's
//     capacity. (A result alone waits the batch's 10 ms for company, after its
//     run has been answered, its result in the pending file.)
func BenchmarkJournal(b *testing.B) {
	res := &api.Result{Language: "python", State: api.StateFinished, Stdout: "hello\n"}
	open := func(b *testing.B) *journal {
		j, err := openJournal(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { j.close() })
		return j
	}
	b.Run("accept", func(b *testing.B) {
		j := open(b)
		for i := range b.N {
			id := runKey{uid: 1000, id: fmt.Sprint("run-", i)}
			if err := j.accept(id, &record{Key: "k", Language: "python", Network: api.NetworkNone, AcceptedAt: time.Now()}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("finish", func(b *testing.B) {
		j := open(b)
		var n atomic.Int64
		b.SetParallelism(64) // per CPU: 128 on this machine
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				id := runKey{uid: 1000, id: fmt.Sprint("run-", n.Add(1))}
				rec := &record{Key: "k", Language: "python", Network: api.NetworkNone, AcceptedAt: time.Now(), FinishedAt: time.Now(), Result: res}
				if err := j.finish(id, rec); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func TestJournalRecoverAndPrune(t *testing.T) {
	j, err := openJournal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	old := time.Now().Add(-2 * time.Hour)
	done, flying := runKey{uid: 1000, id: "done"}, runKey{uid: 1000, id: "flying"}
	j.accept(done, &record{Key: "k", Language: "python", Network: api.NetworkNone, PeerUID: 1000, AcceptedAt: old})
	j.finish(done, &record{Key: "k", Language: "python", Network: api.NetworkNone, PeerUID: 1000, AcceptedAt: old, FinishedAt: old, Result: &api.Result{ID: "done"}})
	j.accept(flying, &record{Key: "k", Language: "python", Network: api.NetworkAny, PeerUID: 1000, AcceptedAt: old})
	keys, err := j.recover(interruptedResult, time.Now())
	if err != nil || len(keys) != 1 || keys[0] != flying {
		t.Fatalf("got recovered %v, %v, want [%v]", keys, err, flying)
	}
	rec, err := j.get(flying)
	if err != nil || rec.Result.Reason != api.ReasonStopped || rec.Result.Outcome != api.OutcomeUnknown {
		t.Fatalf("got %+v, %v, want stopped with outcome unknown (network any)", rec, err)
	}
	if n, err := j.prune(time.Now().Add(-time.Hour)); err != nil || n != 1 {
		t.Fatalf("got %d pruned, %v, want 1 (the old result, not the one just recovered)", n, err)
	}
	if _, err := j.get(done); err != errNoRecord {
		t.Fatalf("got %v for the pruned run, want errNoRecord", err)
	}
}

// A run's key is its id within its owner's uid: the same id under two uids is
// two records, and owners finds both.
func TestJournalScopesIDsByUID(t *testing.T) {
	j, err := openJournal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	now := time.Now()
	for _, k := range []runKey{{uid: 1001, id: "same"}, {uid: 1002, id: "same"}, {uid: 1001, id: "same2"}, {uid: 0, id: "sam"}} {
		rec := &record{Key: k.id + itoa(k.uid), Language: "python", PeerUID: k.uid, AcceptedAt: now, FinishedAt: now, Result: &api.Result{ID: k.id}}
		if err := j.accept(k, rec); err != nil {
			t.Fatal(err)
		}
		if err := j.finish(k, rec); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		key  runKey
		want string // the record's Key; "" for none
	}{
		{"first uid", runKey{uid: 1001, id: "same"}, "same1001"},
		{"second uid", runKey{uid: 1002, id: "same"}, "same1002"},
		{"uid without that id", runKey{uid: 1003, id: "same"}, ""},
		{"a prefix of another id", runKey{uid: 1001, id: "sam"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := j.get(tc.key)
			got := ""
			if err == nil {
				got = rec.Key
			} else if err != errNoRecord {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got record %q, want %q", got, tc.want)
			}
		})
	}
	uids, err := j.owners("same")
	if err != nil || !slices.Equal(uids, []int{1001, 1002}) {
		t.Fatalf("got owners of \"same\" %v, %v, want [1001 1002] (not those of same2 or sam)", uids, err)
	}
}

// A journal of version 1 (keyed by id alone, no meta bucket) is migrated in
// place when opened: every record, in-flight entry and expiry entry is rekeyed
// by its record's peer_uid, and a restart finishes the in-flight one.
func TestJournalMigratesVersion1(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * time.Hour)
	db, err := bolt.Open(filepath.Join(dir, journalFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	v1 := func(id string, uid int, finished bool) []byte {
		rec := record{Key: "k-" + id, Language: "python", Network: api.NetworkNone, PeerUID: uid, AcceptedAt: old}
		if finished {
			rec.FinishedAt, rec.Result = old, &api.Result{ID: id, State: api.StateFinished}
		}
		b, _ := json.Marshal(rec)
		return b
	}
	err = db.Update(func(tx *bolt.Tx) error {
		runs, _ := tx.CreateBucket(bucketRuns)
		inflight, _ := tx.CreateBucket(bucketInflight)
		expiry, _ := tx.CreateBucket(bucketExpiry)
		runs.Put([]byte("done"), v1("done", 1001, true))
		runs.Put([]byte("flying"), v1("flying", 1002, false))
		inflight.Put([]byte("flying"), nil)
		k := make([]byte, 8)
		binary.BigEndian.PutUint64(k, uint64(old.UnixNano()))
		return expiry.Put(append(k, "done"...), nil)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	j, err := openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	keys, err := j.recover(interruptedResult, time.Now())
	if want := (runKey{uid: 1002, id: "flying"}); err != nil || len(keys) != 1 || keys[0] != want {
		t.Fatalf("got recovered %v, %v, want [%v]", keys, err, want)
	}
	for _, tc := range []struct {
		name    string
		key     runKey
		found   bool
		stopped bool
	}{
		{"finished run under its uid", runKey{uid: 1001, id: "done"}, true, false},
		{"in-flight run under its uid", runKey{uid: 1002, id: "flying"}, true, true},
		{"finished run under another uid", runKey{uid: 1002, id: "done"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := j.get(tc.key)
			if got := err == nil; got != tc.found {
				t.Fatalf("got found %v (%v), want %v", got, err, tc.found)
			}
			if tc.found && tc.stopped && rec.Result.Reason != api.ReasonStopped {
				t.Errorf("got reason %q, want stopped", rec.Result.Reason)
			}
		})
	}
	// The old expiry entry now names the rekeyed run: pruning removes it.
	if n, err := j.prune(time.Now().Add(-time.Hour)); err != nil || n != 1 {
		t.Fatalf("got %d pruned, %v, want 1 (the migrated old result)", n, err)
	}
	if _, err := j.get(runKey{uid: 1001, id: "done"}); err != errNoRecord {
		t.Fatalf("got %v for the pruned run, want errNoRecord", err)
	}
	j.close()
	// Opening again leaves a version 2 journal as it is.
	j2, err := openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.close()
	if _, err := j2.get(runKey{uid: 1002, id: "flying"}); err != nil {
		t.Fatalf("got %v after a second open, want the record kept", err)
	}
}

func TestJournalRefusesALaterVersion(t *testing.T) {
	dir := t.TempDir()
	j, err := openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	j.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaVersion, []byte("3")) })
	j.close()
	if j, err := openJournal(dir); err == nil || !strings.Contains(err.Error(), "later brig") {
		if j != nil {
			j.close()
		}
		t.Fatalf("got %v, want a refusal naming a later brig", err)
	}
}

// A result answered and not yet committed (the service crashed between the
// two) is in the journal when it is next opened; a line the crash tore is
// skipped, and the pending file is emptied.
func TestJournalCommitsAnsweredResults(t *testing.T) {
	dir := t.TempDir()
	j, err := openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	k := runKey{uid: 1000, id: "answered"}
	now := time.Now()
	if err := j.accept(k, &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now}); err != nil {
		t.Fatal(err)
	}
	res := &api.Result{ID: "answered", State: api.StateFinished, Outcome: api.OutcomeSucceeded, Stdout: "hi\n"}
	if err := j.answered(k, &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now, FinishedAt: now, Result: res}); err != nil {
		t.Fatal(err)
	}
	j.pending.WriteString(`{"id":"torn","uid":1000,"rec`) // the crash, mid-line
	j.close()                                             // without finish: its transaction never ran

	j, err = openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	rec, err := j.get(k)
	if err != nil || rec.Result == nil || rec.Result.Outcome != api.OutcomeSucceeded || rec.Result.Stdout != "hi\n" {
		t.Fatalf("got %+v, %v, want the answered result", rec, err)
	}
	if keys, err := j.recover(interruptedResult, time.Now()); err != nil || len(keys) != 0 {
		t.Errorf("got %v, %v recovered as interrupted, want none: the run finished", keys, err)
	}
	if st, err := os.Stat(filepath.Join(dir, pendingFile)); err != nil || st.Size() != 0 {
		t.Errorf("got the pending file %v, %v, want it emptied", st, err)
	}
}

// A clean stop with every answered result committed leaves the pending file
// empty.
func TestJournalCloseEmptiesCommittedPending(t *testing.T) {
	dir := t.TempDir()
	j, err := openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	k, now := runKey{uid: 1000, id: "done"}, time.Now()
	rec := &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now}
	if err := j.accept(k, rec); err != nil {
		t.Fatal(err)
	}
	rec = &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now, FinishedAt: now,
		Result: &api.Result{ID: "done", State: api.StateFinished, Outcome: api.OutcomeSucceeded}}
	if err := j.answered(k, rec); err != nil {
		t.Fatal(err)
	}
	if err := j.finish(k, rec); err != nil {
		t.Fatal(err)
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, pendingFile)); err != nil || st.Size() != 0 {
		t.Errorf("got the pending file %v, %v, want it empty after a clean stop", st, err)
	}
}
