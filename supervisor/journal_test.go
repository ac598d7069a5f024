package supervisor

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/client"
	"github.com/brig-sandbox/brig/internal/testutil"
)

// BenchmarkJournal measures the journal's two writes of every run (README:
// "Journal"): go test -run XXX -bench '^BenchmarkJournal$' ./supervisor
//   - accept: one fsynced transaction, before a networked run is handed to
//     its goroutine;
//   - acceptSoon: an offline run's, a line appended to the pending file
//     before the run is handed on, its transaction shared in the background
//     (the benchmark waits for each commit after its clock stops);
//   - finish: results written by 128 goroutines at once, as runs that end
//     together are, which share bbolt's Batch transactions: the journal's
//     capacity. (A result alone waits the batch's 10 ms for company, after its
//     run has been answered, its result in the pending file.)
func BenchmarkJournal(b *testing.B) {
	res := &api.Result{Language: "python", State: api.StateFinished, Stdout: "hello\n"}
	open := func(b *testing.B) *journal {
		j, err := openJournal(b.TempDir(), nil)
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
	b.Run("acceptSoon", func(b *testing.B) {
		j := open(b)
		commits := make([]*commit, 0, b.N)
		for i := range b.N {
			id := runKey{uid: 1000, id: fmt.Sprint("run-", i)}
			c, err := j.acceptSoon(id, &record{Key: "k", Language: "python", Network: api.NetworkNone, AcceptedAt: time.Now()})
			if err != nil {
				b.Fatal(err)
			}
			commits = append(commits, c)
		}
		b.StopTimer()
		for _, c := range commits {
			if <-c.done; c.err != nil {
				b.Fatal(c.err)
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

// BenchmarkJournalFull measures a committed acceptance and the journal's
// reopening once it holds what a benchmark harness leaves in it: fullRuns
// results of 3 kB each, the older half of them pruned (an hour's retention at
// about 14 runs/s, in its second hour; README: "Journal"):
// go test -run XXX -bench JournalFull/accept -benchtime 1000x ./supervisor, and
// JournalFull/reopen with -benchtime 5x (each reopen scans the file).
func BenchmarkJournalFull(b *testing.B) {
	const fullRuns = 100_000
	dir := b.TempDir()
	j, err := openJournal(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { j.close() }()
	old := time.Now().Add(-2 * time.Hour)
	res := &api.Result{Language: "python", State: api.StateFinished, Stdout: strings.Repeat("x", 3000)}
	for i := 0; i < fullRuns; i += 500 {
		finished := old
		if i >= fullRuns/2 {
			finished = time.Now()
		}
		err := j.db.Update(func(tx *bolt.Tx) error {
			for k := i; k < i+500; k++ {
				rec := &record{Key: "k", Language: "python", Network: api.NetworkNone, PeerUID: 1000, AcceptedAt: finished, FinishedAt: finished, Result: res}
				if err := finishLocked(tx, runKey{uid: 1000, id: fmt.Sprint("full-", k)}, rec); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if n, err := j.prune(time.Now().Add(-time.Hour)); err != nil || n != fullRuns/2 {
		b.Fatalf("pruned %d, %v, want %d", n, err, fullRuns/2)
	}
	b.Run("accept", func(b *testing.B) {
		cpu := processCPU()
		for i := range b.N {
			id := runKey{uid: 1000, id: fmt.Sprint("run-", i)}
			if err := j.accept(id, &record{Key: "k", Language: "python", Network: api.NetworkNone, AcceptedAt: time.Now()}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(processCPU()-cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	})
	b.Run("reopen", func(b *testing.B) {
		for range b.N {
			if err := j.close(); err != nil {
				b.Fatal(err)
			}
			if j, err = openJournal(dir, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestJournalRecoverAndPrune(t *testing.T) {
	j, err := openJournal(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	old := time.Now().Add(-2 * time.Hour)
	done, flying := runKey{uid: 1000, id: "done"}, runKey{uid: 1000, id: "flying"}
	j.accept(done, &record{Key: "k", Language: "python", Network: api.NetworkNone, PeerUID: 1000, AcceptedAt: old})
	j.finish(done, &record{Key: "k", Language: "python", Network: api.NetworkNone, PeerUID: 1000, AcceptedAt: old, FinishedAt: old, Result: &api.Result{ID: "done"}})
	j.accept(flying, &record{Key: "k", Language: "python", Network: api.NetworkAny, Packages: []string{"Pkg_A==1.0"}, PeerUID: 1000, AcceptedAt: old})
	keys, err := j.recover(interruptedResult, time.Now())
	if err != nil || len(keys) != 1 || keys[0] != flying {
		t.Fatalf("got recovered %v, %v, want [%v]", keys, err, flying)
	}
	rec, err := j.get(flying)
	if err != nil || rec.Result.Reason != api.ReasonStopped || rec.Result.Outcome != api.OutcomeUnknown {
		t.Fatalf("got %+v, %v, want stopped with outcome unknown (network any)", rec, err)
	}
	// Its package requests, each unresolved, as any other failed run's.
	if want := []api.PackageResult{{Request: "Pkg_A==1.0", Name: "pkg-a"}}; !slices.Equal(rec.Result.Packages, want) {
		t.Errorf("got packages %+v, want %+v", rec.Result.Packages, want)
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
	j, err := openJournal(t.TempDir(), nil)
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

	j := mustOpenJournal(t, dir)
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
	j2, err := openJournal(dir, nil)
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
	j := mustOpenJournal(t, dir)
	j.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaVersion, []byte("3")) })
	j.close()
	if j, err := openJournal(dir, nil); err == nil || !strings.Contains(err.Error(), "later brig") {
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
	j := mustOpenJournal(t, dir)
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

	j = mustOpenJournal(t, dir)
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
	j := mustOpenJournal(t, dir)
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

// A commit whose pending file's compaction then fails (a full disk) is a
// committed record: finish says so apart (compactError), and the service's
// finishRecord takes it for done, so that the run is not held as unwritten,
// which refuses every new run (the review of 2026-12-06).
func TestJournalCompactionFailureIsCommitted(t *testing.T) {
	dir := t.TempDir()
	s := &Service{journal: mustOpenJournal(t, dir), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	defer s.journal.close()
	k, now := runKey{uid: 1000, id: "done"}, time.Now()
	if err := s.journal.accept(k, &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now}); err != nil {
		t.Fatal(err)
	}
	rec := &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now, FinishedAt: now,
		Result: &api.Result{ID: "done", State: api.StateFinished, Outcome: api.OutcomeSucceeded}}
	if err := s.journal.answered(k, rec); err != nil {
		t.Fatal(err)
	}
	// The pending file past its bound, and unwritable: the compaction fails.
	s.journal.mu.Lock()
	s.journal.size = pendingMax + 1
	s.journal.pending.Close()
	s.journal.mu.Unlock()
	var ce *compactError
	if err := s.journal.finish(k, rec); !errors.As(err, &ce) {
		t.Fatalf("finish: got %v, want a compactError", err)
	}
	if got, err := s.journal.get(k); err != nil || got.Result == nil || got.Result.Outcome != api.OutcomeSucceeded {
		t.Fatalf("got %+v, %v, want the record committed", got, err)
	}
	if err := s.finishRecord("done", k, rec); err != nil {
		t.Errorf("finishRecord: got %v, want nil: the record is committed", err)
	}
}

// An offline run accepted soon is in the pending file at once and committed in
// the background; when the service crashes before the commit, the next open
// puts it in flight, for recover to finish as stopped, and keeps a record that
// was committed finished as it is (an accepted line never undoes a result).
func TestJournalAcceptSoon(t *testing.T) {
	dir := t.TempDir()
	j := mustOpenJournal(t, dir)
	now := time.Now()
	accepted := func(id string) *record {
		return &record{Key: "k", Language: "python", Network: api.NetworkNone, PeerUID: 1000, AcceptedAt: now}
	}
	soon := runKey{uid: 1000, id: "soon"}
	c, err := j.acceptSoon(soon, accepted("soon"))
	if err != nil {
		t.Fatal(err)
	}
	<-c.done
	if c.err != nil {
		t.Fatal(c.err)
	}
	if rec, err := j.get(soon); err != nil || rec.Result != nil {
		t.Fatalf("got %+v, %v, want the accepted record committed", rec, err)
	}
	// The crash: lines appended and never committed. "crashed" was accepted
	// only; "answered" was accepted, then its result committed without a line
	// of its own (as when answered's write failed).
	crashed, answered := runKey{uid: 1000, id: "crashed"}, runKey{uid: 1000, id: "answered"}
	for _, k := range []runKey{crashed, answered} {
		if err := j.appendPending(k, accepted(k.id)); err != nil {
			t.Fatal(err)
		}
	}
	res := &api.Result{ID: "answered", State: api.StateFinished, Outcome: api.OutcomeSucceeded, Stdout: "hi\n"}
	if err := j.finish(answered, &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now, FinishedAt: now, Result: res}); err != nil {
		t.Fatal(err)
	}
	j.close()

	j = mustOpenJournal(t, dir)
	defer j.close()
	keys, err := j.recover(interruptedResult, time.Now())
	if err != nil || !slices.Equal(keys, []runKey{crashed, soon}) {
		t.Fatalf("got %v, %v recovered as stopped, want [%v %v]", keys, err, crashed, soon)
	}
	if rec, err := j.get(crashed); err != nil || rec.Result == nil || rec.Result.Reason != api.ReasonStopped || rec.Result.Outcome != api.OutcomeFailed {
		t.Errorf("got %+v, %v for the crashed run, want stopped, failed (no network)", rec, err)
	}
	if rec, err := j.get(answered); err != nil || rec.Result == nil || rec.Result.Stdout != "hi\n" {
		t.Errorf("got %+v, %v for the finished run, want its result kept", rec, err)
	}
}

// A pending file past pendingMax is replaced, once a line is committed, by a
// file of the lines not yet committed alone: under steady load some always
// are, and the file would otherwise grow without end.
func TestJournalPendingFileStaysSmall(t *testing.T) {
	dir := t.TempDir()
	j := mustOpenJournal(t, dir)
	now := time.Now()
	waiting := runKey{uid: 1000, id: "waiting"}
	if err := j.appendPending(waiting, &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now}); err != nil {
		t.Fatal(err)
	}
	big := runKey{uid: 1000, id: "big"}
	rec := &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now, FinishedAt: now,
		Result: &api.Result{ID: "big", State: api.StateFinished, Outcome: api.OutcomeSucceeded, Stdout: strings.Repeat("x", pendingMax)}}
	if err := j.answered(big, rec); err != nil {
		t.Fatal(err)
	}
	if err := j.finish(big, rec); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, pendingFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != 1 || !strings.Contains(string(b), `"id":"waiting"`) {
		t.Fatalf("got a pending file of %d bytes, %d lines, want the one line not committed", len(b), n)
	}
	if err := j.appendPending(big, rec); err != nil { // appended to the new file
		t.Fatal(err)
	}
	j.close()
	j = mustOpenJournal(t, dir)
	defer j.close()
	if keys, err := j.recover(interruptedResult, time.Now()); err != nil || !slices.Equal(keys, []runKey{waiting}) {
		t.Errorf("got %v, %v recovered, want [%v]", keys, err, waiting)
	}
	if got, err := j.get(big); err != nil || got.Result == nil || len(got.Result.Stdout) != pendingMax {
		t.Errorf("got %v for the big result, want it committed", err)
	}
}

// An offline run starts and is answered while its journal record is still
// being committed; a networked run starts only once its record is committed,
// so that even a crash of the host leaves a record of a run that may have
// reached outside. Both are in the journal, finished, once the commit is let
// through.
func TestOfflineRunStartsBeforeItsCommit(t *testing.T) {
	ts := newTestService(t, func(c *Config) { c.NetworkModes = []string{api.NetworkNone, api.NetworkAny} })
	ctx := context.Background()
	release := holdCommits(t, ts.journal)
	defer release()

	offline := make(chan *api.Result, 1)
	go func() {
		res, err := ts.client.Run(ctx, request("python", "print('ran')", withRunID("offline")))
		if err != nil {
			t.Error(err)
		}
		offline <- res
	}()
	select {
	case res := <-offline:
		checkSucceeded(t, res, "ran\n")
	case <-time.After(20 * time.Second):
		t.Fatal("the offline run got no answer within 20s while its commit was held: it waited for it")
	}

	networkedRun := make(chan *api.Result, 1)
	go func() {
		res, err := ts.client.Run(ctx, request("python", "print('ran')", withRunID("networked"), networked(api.NetworkAny)))
		if err != nil {
			t.Error(err)
		}
		networkedRun <- res
	}()
	k := runKey{uid: os.Getuid(), id: "networked"} // the test is the peer
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		ts.mu.Lock()
		_, accepted := ts.runs[k]
		ts.mu.Unlock()
		if accepted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the networked run was not accepted within 5s")
		}
	}
	select {
	case <-networkedRun:
		t.Fatal("the networked run was answered while its record's commit was held")
	case <-time.After(time.Second):
	}
	ts.mu.Lock()
	r := ts.runs[k]
	ts.mu.Unlock()
	if snap := r.snapshot(); snap.State != api.StateQueued {
		t.Fatalf("got the networked run %s while its commit was held, want it queued", snap.State)
	}
	release()
	select {
	case res := <-networkedRun:
		checkSucceeded(t, res, "ran\n")
	case <-time.After(20 * time.Second):
		t.Fatal("the networked run got no answer within 20s of its commit")
	}
	for _, id := range []string{"offline", "networked"} {
		k := runKey{uid: os.Getuid(), id: id}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			rec, err := ts.journal.get(k)
			if err == nil && rec.Result != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("got %+v, %v for %s 5s after its answer, want its result committed", rec, err, id)
			}
		}
	}
}

// holdCommits holds every commit of j's (a write transaction of the test's)
// until release, which may be called more than once.
func holdCommits(t *testing.T, j *journal) (release func()) {
	t.Helper()
	tx, err := j.db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	return func() { once.Do(func() { tx.Rollback() }) }
}

// processCPU is the CPU this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The journal keeps no list of free pages on disk (openJournal): a brig from
// before that, opening it with bbolt's defaults, rebuilds the list, reads
// every record and writes; and this one opens what that one wrote.
func TestJournalFreelistNotSynced(t *testing.T) {
	dir := t.TempDir()
	j := mustOpenJournal(t, dir)
	if !j.db.NoFreelistSync || j.db.FreelistType != bolt.FreelistMapType {
		t.Fatalf("got the journal opened with NoFreelistSync %v and freelist %q, want true and %q (BenchmarkJournalFull)",
			j.db.NoFreelistSync, j.db.FreelistType, bolt.FreelistMapType)
	}
	old := time.Now().Add(-2 * time.Hour)
	res := &api.Result{ID: "r", State: api.StateFinished, Stdout: strings.Repeat("x", 3000)}
	for i := range 200 {
		at := old
		if i >= 100 {
			at = time.Now()
		}
		if err := j.finish(runKey{uid: 1000, id: fmt.Sprint("r", i)}, &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: at, FinishedAt: at, Result: res}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := j.prune(time.Now().Add(-time.Hour)); err != nil || n != 100 {
		t.Fatalf("pruned %d, %v, want 100", n, err)
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}

	db, err := bolt.Open(filepath.Join(dir, journalFile), 0o600, nil) // bbolt's defaults
	if err != nil {
		t.Fatal(err)
	}
	count := func(tx *bolt.Tx) int { return tx.Bucket(bucketRuns).Stats().KeyN }
	err = db.Update(func(tx *bolt.Tx) error {
		if n := count(tx); n != 100 {
			return fmt.Errorf("got %d records with bbolt's defaults, want 100", n)
		}
		return putRecord(tx, runKey{uid: 1000, id: "later"}, &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: time.Now()})
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	if j, err = openJournal(dir, nil); err != nil {
		t.Fatal(err)
	}
	defer j.close()
	if rec, err := j.get(runKey{uid: 1000, id: "later"}); err != nil || rec.Key != "k" {
		t.Fatalf("got %+v, %v, want the record the default options wrote", rec, err)
	}
	if rec, err := j.get(runKey{uid: 1000, id: "r150"}); err != nil || rec.Result == nil || len(rec.Result.Stdout) != 3000 {
		t.Fatalf("got %v for a kept result, want it whole", err)
	}
}

// mustOpenJournal opens the journal in dir or ends the test.
func mustOpenJournal(tb testing.TB, dir string) *journal {
	tb.Helper()
	j, err := openJournal(dir, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return j
}

// A journal file that is not a whole bbolt database is refused at the open
// with what to do, never a crash of the service (a fault on its mapped pages,
// a panic of bbolt's checks); an empty one is made new, and the pending
// file's unreadable lines are counted, for the service to say so.
func TestJournalDamaged(t *testing.T) {
	dir := t.TempDir()
	j := mustOpenJournal(t, dir)
	now := time.Now()
	for i := range 300 {
		k := runKey{uid: 1000, id: fmt.Sprintf("run-%d", i)}
		rec := &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now, FinishedAt: now,
			Result: &api.Result{ID: k.id, State: api.StateFinished, Outcome: api.OutcomeSucceeded, Stdout: strings.Repeat("x", 5000)}}
		if err := j.accept(k, rec); err != nil {
			t.Fatal(err)
		}
		if err := j.finish(k, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(filepath.Join(dir, journalFile))
	if err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	garbage := func(b []byte) []byte {
		for i := range b {
			b[i] = byte(i*7 + 13)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		file []byte
	}{
		{"cut to half", whole[:len(whole)/2]},
		{"cut to 100 bytes", whole[:100]},
		// bbolt's own words for these: "file size too small".
		{"cut to one page", whole[:page]},
		{"cut to 5000 bytes", whole[:5000]},
		{"its pages after the meta pages garbage", append(slices.Clone(whole[:2*page]), garbage(make([]byte, len(whole)-2*page))...)},
		{"both meta pages garbage", append(garbage(make([]byte, 2*page)), whole[2*page:]...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			if err := os.WriteFile(filepath.Join(d, journalFile), tc.file, 0o600); err != nil {
				t.Fatal(err)
			}
			j, err := openJournal(d, nil)
			if err == nil {
				j.close()
				t.Fatal("got the damaged journal opened, want it refused")
			}
			if !errors.Is(err, errDamaged) || !strings.Contains(err.Error(), "move it aside (mv ") {
				t.Errorf("got %v, want it refused as damaged, saying what to do", err)
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, journalFile), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, pendingFile), []byte("GARBAGE{{{\n\n{\"id\":\"torn\",\"uid\":1000,\"rec"), 0o600)
		j := mustOpenJournal(t, d)
		defer j.close()
		if !j.wasEmpty || j.skipped != 2 {
			t.Errorf("got wasEmpty %v and %d lines skipped, want true and 2", j.wasEmpty, j.skipped)
		}
	})
}

// A write of the pending file that fails part-way (a full disk) leaves no part
// of its line behind: the next line, written once there is room, is read whole
// at the next open, not glued to the torn one and lost with it.
func TestJournalPendingTornWrite(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Tmpfs(t, "1m")
	j := mustOpenJournal(t, dir)
	// Fill the disk, then free two pages of it: less than the next record's
	// line, which the full disk cuts short after them.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for chunk := make([]byte, 4096); ; size += 4096 {
		if _, err := filler.Write(chunk); err != nil {
			break
		}
	}
	if err := filler.Truncate(size - 2*4096); err != nil {
		t.Fatal(err)
	}
	filler.Close()
	now := time.Now()
	answer := func(id, out string) error {
		return j.answered(runKey{uid: 1000, id: id}, &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now, FinishedAt: now,
			Result: &api.Result{ID: id, State: api.StateFinished, Outcome: api.OutcomeSucceeded, Stdout: out}})
	}
	if err := answer("torn", strings.Repeat("t", 4*4096)); err == nil {
		t.Fatal("got the line written on a full disk, want ENOSPC")
	}
	os.Remove(filepath.Join(dir, "filler"))
	if err := answer("after", "kept\n"); err != nil {
		t.Fatal(err)
	}
	j.db.Close() // a crash: nothing committed, the pending file as it is
	j.pending.Close()
	j.lock.Close()
	j = mustOpenJournal(t, dir)
	defer j.close()
	if rec, err := j.get(runKey{uid: 1000, id: "after"}); err != nil || rec.Result == nil || rec.Result.Stdout != "kept\n" {
		t.Errorf("got %+v, %v for the line after the torn write, want its result", rec, err)
	}
	if j.skipped != 0 {
		t.Errorf("got %d lines skipped, want none: the torn part was cut off", j.skipped)
	}
}

// TestJournalPartialLineAfterTheWholeCommit: a result kept in the pending file
// without its output, whose whole record was committed later, is not replayed
// over it by a start after a crash that came before the file's compaction (the
// review of 2026-12-06); with nothing committed, it is.
func TestJournalPartialLineAfterTheWholeCommit(t *testing.T) {
	now := time.Now()
	for _, committed := range []bool{true, false} {
		dir := t.TempDir()
		j := mustOpenJournal(t, dir)
		k := runKey{uid: 1000, id: "kept"}
		if err := j.accept(k, &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now}); err != nil {
			t.Fatal(err)
		}
		res := func(out string) *api.Result {
			return &api.Result{ID: k.id, State: api.StateFinished, Outcome: api.OutcomeSucceeded, Stdout: out}
		}
		short := &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now, FinishedAt: now, Result: res(""), Partial: true}
		if err := j.answered(k, short); err != nil {
			t.Fatal(err)
		}
		if committed {
			if err := j.finish(k, &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now, FinishedAt: now, Result: res("whole\n"), line: short.line}); err != nil {
				t.Fatal(err)
			}
		}
		j.db.Close() // a crash: the pending file as it is
		j.pending.Close()
		j.lock.Close()
		j = mustOpenJournal(t, dir)
		want := "whole\n"
		if !committed {
			want = ""
		}
		if rec, err := j.get(k); err != nil || rec.Result == nil || rec.Result.Stdout != want {
			t.Errorf("committed %v: got %+v, %v; want the result with stdout %q", committed, rec, err, want)
		}
		j.close()
	}
}

// With each prune the pending file loses its committed lines, however small
// it is, so that no result's output stays on disk past its record.
func TestJournalCompactPending(t *testing.T) {
	dir := t.TempDir()
	j := mustOpenJournal(t, dir)
	defer j.close()
	now := time.Now()
	done := runKey{uid: 1000, id: "done"}
	rec := &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now, FinishedAt: now,
		Result: &api.Result{ID: "done", State: api.StateFinished, Outcome: api.OutcomeSucceeded, Stdout: "secret output\n"}}
	if err := j.answered(done, rec); err != nil {
		t.Fatal(err)
	}
	if err := j.finish(done, rec); err != nil {
		t.Fatal(err)
	}
	waiting := runKey{uid: 1000, id: "waiting"}
	if err := j.appendPending(waiting, &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: now}); err != nil {
		t.Fatal(err)
	}
	read := func() string {
		b, err := os.ReadFile(filepath.Join(dir, pendingFile))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if !strings.Contains(read(), "secret output") {
		t.Fatal("the committed line is not in the pending file before the compaction: nothing to test")
	}
	if err := j.compactPending(); err != nil {
		t.Fatal(err)
	}
	if got := read(); strings.Contains(got, "secret output") || !strings.Contains(got, `"id":"waiting"`) || strings.Count(got, "\n") != 1 {
		t.Errorf("got a pending file %q after the compaction, want the line not committed alone", got)
	}
}

// A journal left mostly free pages by its prunes is compacted at the start:
// bbolt never gives freed pages back, so a burst of large outputs kept the
// file at its peak for good. What is kept stays whole, and the compacted
// journal is the one in use (and locked) from then on.
func TestJournalCompactsWhenSparse(t *testing.T) {
	defer func(v int64) { sparseAbove = v }(sparseAbove)
	sparseAbove = 1 << 20
	dir := t.TempDir()
	path := filepath.Join(dir, journalFile)
	j := mustOpenJournal(t, dir)
	defer func() { j.close() }()
	now := time.Now()
	big := strings.Repeat("x", 100_000)
	finish := func(id string, at time.Time) {
		k := runKey{uid: 1000, id: id}
		rec := &record{Key: "k", Language: "python", PeerUID: 1000, AcceptedAt: at, FinishedAt: at,
			Result: &api.Result{ID: id, State: api.StateFinished, Outcome: api.OutcomeSucceeded, Stdout: big}}
		if err := j.accept(k, rec); err != nil {
			t.Fatal(err)
		}
		if err := j.finish(k, rec); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 60 {
		finish(fmt.Sprintf("old-%d", i), now.Add(-2*time.Hour))
	}
	finish("kept", now)
	if before, after, err := j.compactIfSparse(path); err != nil || after != before {
		t.Fatalf("a full journal: got %d to %d bytes (%v), want it left as it is", before, after, err)
	}
	if n, err := j.prune(now.Add(-time.Hour)); err != nil || n != 60 {
		t.Fatalf("pruned %d (%v), want 60", n, err)
	}
	before, after, err := j.compactIfSparse(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bytes before, %d after", before, after)
	if before < 6<<20 || after > before/4 {
		t.Errorf("got %d bytes before and %d after, want a journal of 6 MB or more cut to a quarter or less", before, after)
	}
	if rec, err := j.get(runKey{uid: 1000, id: "kept"}); err != nil || rec.Result == nil || rec.Result.Stdout != big {
		t.Errorf("the kept run after the compaction: got %v (%v), want its whole result", rec, err)
	}
	if _, err := j.get(runKey{uid: 1000, id: "old-3"}); !errors.Is(err, errNoRecord) {
		t.Errorf("a pruned run after the compaction: got %v, want none", err)
	}
	finish("later", now) // the journal in use is the new file
	if _, err := os.Stat(path + ".compact"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the compaction's temporary file: got %v, want it gone", err)
	}
	if _, err := openJournal(dir, nil); err == nil || !strings.Contains(err.Error(), "another process holds it") {
		t.Errorf("a second open of the compacted journal: got %v, want it refused", err)
	}
	j.close()
	j = mustOpenJournal(t, dir)
	if rec, err := j.get(runKey{uid: 1000, id: "later"}); err != nil || rec.Result == nil {
		t.Errorf("a run finished after the compaction, after a reopen: got %v (%v)", rec, err)
	}
}

// TestOutputIsNotHTMLEscaped: '<', '>' and '&' in a run's output stay a byte
// each in its answer, its stream and its journal record, where Go's default
// encoding writes six ("\u003c"): a million '<' had made a 6 MB result and
// grown journal.db by 5 MB (an audit).
func TestOutputIsNotHTMLEscaped(t *testing.T) {
	ts := newTestService(t)
	const out = `<a href="x">&amp;</a>`
	body, err := json.Marshal(request("python", "print('<a href=\"x\">&amp;</a>')", withRunID("html-1")))
	if err != nil {
		t.Fatal(err)
	}
	resp, b := rawAPIRequest(t, ts, http.MethodPost, "/v1/runs", body, "Content-Type", "application/json")
	if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`<a href=\"x\">&amp;</a>`)) {
		t.Errorf("the result: got %d %s, want the output's < > & as they are", resp.StatusCode, b)
	}
	resp, b = rawAPIRequest(t, ts, http.MethodGet, "/v1/runs/html-1/events", nil)
	if resp.StatusCode != http.StatusOK || bytes.Count(b, []byte(`<a href=\"x\">&amp;</a>`)) != 2 {
		t.Errorf("the stream: got %d %s, want the output's < > & as they are in its stdout event and its result", resp.StatusCode, b)
	}
	// The result is committed through bbolt's Batch after the answer.
	var stored []byte
	for deadline := time.Now().Add(5 * time.Second); !bytes.Contains(stored, []byte(`"result"`)); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the journal's record 5s after the answer: %s, want its result", stored)
		}
		if err := ts.journal.db.View(func(tx *bolt.Tx) error {
			stored = append(stored[:0], tx.Bucket(bucketRuns).Get(runKey{uid: os.Getuid(), id: "html-1"}.bytes())...)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Contains(stored, []byte(`<a href=\"x\">&amp;</a>`)) {
		t.Errorf("the journal's record: got %s, want the output's < > & as they are", stored)
	}
	rec, err := ts.journal.get(runKey{uid: os.Getuid(), id: "html-1"})
	if err != nil || rec.Result == nil || rec.Result.Stdout != out+"\n" {
		t.Errorf("the record read back: got %+v, %v, want stdout %q", rec, err, out+"\n")
	}
}

// TestLockStateDir: a state directory whose journal another holder has open
// is refused; the lock taken is the one the journal then holds, and its
// taker's until the taker closes it.
func TestLockStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	lock, err := LockStateDir(dir)
	if err != nil {
		t.Fatalf("a state directory not made yet: got %v, want it made and locked", err)
	}
	if _, err := LockStateDir(dir); err == nil || !strings.Contains(err.Error(), "another process holds it") {
		t.Errorf("with its lock held: got %v, want it refused", err)
	}
	j, err := openJournal(dir, lock)
	if err != nil {
		t.Fatalf("opening the journal under the lock taken: %v", err)
	}
	if _, err := openJournal(dir, nil); err == nil || !strings.Contains(err.Error(), "another process holds it") {
		t.Errorf("a second journal beside the open one: got %v, want it refused", err)
	}
	// The lock stays its taker's until it closes it: a service holds it
	// through its sandboxes' teardown, after its journal has closed.
	j.close()
	if _, err := LockStateDir(dir); err == nil {
		t.Errorf("with the journal closed and the lock still held: got it taken again, want it refused")
	}
	lock.Close()
	again, err := LockStateDir(dir)
	if err != nil {
		t.Errorf("with its lock closed: got %v, want the lock", err)
	} else {
		again.Close()
	}
}

// TestStateDirOthersMayWrite: a state directory another user may write to,
// sticky or not, is refused before a file is made in it, with what to do (the
// operator probe of 2026-12-06: another user's link laid in a sticky 1777
// state directory had root overwrite a file of theirs, and their journal files
// made first were taken as the service's).
func TestStateDirOthersMayWrite(t *testing.T) {
	for _, mode := range []uint32{0o1777, 0o777, 0o775} {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		lock, err := LockStateDir(dir)
		if err == nil {
			lock.Close()
		}
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("writable by its group or others (mode %o)", mode)) || !strings.Contains(err.Error(), "chmod 0755 "+dir) {
			t.Errorf("mode %o: got %v, want it refused with what to do", mode, err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) > 0 {
			t.Errorf("mode %o: the refused directory got %d files, want none", mode, len(ents))
		}
	}
}

// TestJournalRequestKey: a record's request key is read from its first
// member, as record writes it, and from a record that does not begin so by
// decoding it whole; a missing one is errNoRecord.
func TestJournalRequestKey(t *testing.T) {
	j := mustOpenJournal(t, t.TempDir())
	defer j.close()
	now := time.Now()
	written := runKey{uid: 1000, id: "written"}
	if err := j.accept(written, &record{Key: "k1", Language: "python", PeerUID: 1000, AcceptedAt: now}); err != nil {
		t.Fatal(err)
	}
	other := runKey{uid: 1000, id: "other-order"}
	if err := j.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRuns).Put(other.bytes(), []byte(`{"language":"python","key":"k2","peer_uid":1000}`))
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		k    runKey
		want string
		err  error
	}{{written, "k1", nil}, {other, "k2", nil}, {runKey{uid: 1000, id: "none"}, "", errNoRecord}} {
		if got, err := j.requestKey(tc.k); got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("requestKey(%v) = %q, %v; want %q, %v", tc.k, got, err, tc.want, tc.err)
		}
	}
}

// TestJournalDamagedRecord: a record whose value bbolt keeps but JSON can't
// read (bbolt has no checksum of a value) is named as damaged, for the
// operator, where a bare decoding error had been the answer (the crash probe).
func TestJournalDamagedRecord(t *testing.T) {
	j := mustOpenJournal(t, t.TempDir())
	k := runKey{uid: 1000, id: "damaged"}
	if err := j.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRuns).Put(k.bytes(), []byte(`{Xid":1}`)) }); err != nil {
		t.Fatal(err)
	}
	_, err := j.read(k, nil)
	if err == nil || !strings.Contains(err.Error(), `the journal's record of run "damaged" (uid 1000) is damaged`) || !strings.Contains(err.Error(), "journal.db") {
		t.Errorf("got %v, want the record named as damaged", err)
	}
	// A retry's read of its key alone, too.
	if _, err := j.requestKey(k); err == nil || !strings.Contains(err.Error(), "is damaged") {
		t.Errorf("requestKey: got %v, want the record named as damaged", err)
	}
}

// TestJournalLostUnderTheService: once the journal's file is gone from its
// path (the state directory deleted or moved under the service), the service
// says so in its health, refuses new runs with a 503 that says what to do
// instead of answering runs whose results no start will read, and its stop
// fails (the operator probe of 2026-12-06: every result lost at the restart,
// the health "ok" and the stop clean).
func TestJournalLostUnderTheService(t *testing.T) {
	ts := newTestService(t)
	ctx := context.Background()
	ts.mustRun(t, request("python", "print(1)"))
	path := filepath.Join(ts.state, journalFile)
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := ts.client.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h.Status == "failing" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the health 10 s after the journal went: %q, want failing", h.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, err := ts.client.Run(ctx, request("python", "print(2)"))
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || !strings.Contains(ce.API.Message, "journal is lost") ||
		!strings.Contains(ce.API.Message, "Send it to another brig") || ce.RetryAfter != 0 || strings.Contains(ce.API.Message, ts.state) {
		t.Errorf("a run with the journal gone: got %v, want a 503 without Retry-After or the host's path that says the journal is lost and to send it elsewhere", err)
	}
	// Reads are refused too, as a 503, not a 500 nor a read of the file.
	if _, err := ts.client.Get(ctx, "never-was"); !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || !strings.Contains(ce.API.Message, "journal is lost") {
		t.Errorf("a GET with the journal gone: got %v, want a 503 that says the journal is lost", err)
	}
	if !strings.Contains(ts.logs.String(), "the journal is lost") {
		t.Errorf("the log does not say the journal is lost")
	}
	// The refused POST's request line names the id the service made, as the
	// refusal's own line does (the docs probe of 2026-12-06).
	refused := ts.logs.Lines("recording an accepted run in the journal: the run is refused")
	tied := false
	for _, l := range ts.logs.Lines("request") {
		if len(refused) == 1 && l["status"] == float64(http.StatusServiceUnavailable) && l["id"] != nil && l["id"] == refused[0]["id"] {
			tied = true
		}
	}
	if !tied {
		t.Errorf("the refused run's request line does not name the id its refusal's line does (%d refusal lines)", len(refused))
	}
	err = ts.Service.Shutdown(ctx)
	ts.Service = nil
	if err == nil || !strings.Contains(err.Error(), "gone from the disk") {
		t.Errorf("Shutdown: got %v, want it to fail, saying the journal is gone", err)
	}
}

// TestJournalCutShort: a journal file cut short under the service (a log
// rotation's copytruncate) is lost, where only a replaced file was seen and
// the next read past its end killed the service with SIGBUS (the crash probe
// of 2026-12-06). checkFiles is asked directly: a read of the cut file here
// would fault as the service's did.
func TestJournalCutShort(t *testing.T) {
	dir := t.TempDir()
	j := mustOpenJournal(t, dir)
	defer j.close()
	path := filepath.Join(dir, journalFile)
	if err := j.watch(path); err != nil {
		t.Fatal(err)
	}
	if err := j.checkFiles(); err != nil {
		t.Fatalf("the journal as opened: %v", err)
	}
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	if err := j.checkFiles(); err == nil || !strings.Contains(err.Error(), "cut short under the service") {
		t.Errorf("the journal cut short: got %v, want it lost", err)
	}
	if err := j.appendPending(runKey{uid: 0, id: "after"}, &record{}); err == nil {
		t.Errorf("a record after the journal was lost: taken, want it refused")
	}
	// Nor read: a read past the cut faults the process (the review of
	// 2026-12-06: a GET after the look killed the service with SIGBUS).
	var lost *journalLost
	if _, err := j.read(runKey{uid: 0, id: "any"}, nil); !errors.As(err, &lost) {
		t.Errorf("a read of the lost journal: got %v, want its loss", err)
	}
	if _, err := j.owners("any"); !errors.As(err, &lost) {
		t.Errorf("a lookup in the lost journal: got %v, want its loss", err)
	}
}
