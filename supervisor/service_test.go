package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/client"
)

func TestRunBothLanguages(t *testing.T) {
	ts := newTestService(t)
	for _, tc := range []struct {
		name, lang, code, want string
	}{
		{"python", "python", "print('hi')", "hi\n"},
		{"javascript", "javascript", "console.log('hi')", "hi\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := ts.mustRun(t, request(tc.lang, tc.code))
			if res.Outcome != api.OutcomeSucceeded || res.Stdout != tc.want || res.State != api.StateFinished {
				t.Fatalf("got %s/%s stdout %q (%s), want succeeded %q", res.State, res.Outcome, res.Stdout, res.Message, tc.want)
			}
			if len(res.ID) != 26 {
				t.Errorf("got generated id %q, want a 26-character ULID", res.ID)
			}
			// Rounded up (api.Millis): a run under a millisecond reads 1.
			if res.Usage.WallMS < 1 || res.Timing.TotalMS < res.Usage.WallMS || res.Usage.CPUMS < 0 {
				t.Errorf("usage %+v, timing %+v: want a wall time of at least 1 ms within the total", res.Usage, res.Timing)
			}
			got, err := ts.client.Get(context.Background(), res.ID)
			if err != nil || got.Stdout != tc.want {
				t.Fatalf("GET: got %+v, %v, want the same result", got, err)
			}
		})
	}
	ts.stop(t) // the canonical line follows the result; Shutdown waits for it
	if n := len(ts.logs.Lines("run finished")); n != 2 {
		t.Errorf("got %d canonical run lines, want 2", n)
	}
}

func TestValidationRefusesBeforeRunning(t *testing.T) {
	ts := newTestService(t)
	_, err := ts.client.Run(context.Background(), request("ruby", "puts 1"))
	apiErr(t, err, http.StatusBadRequest, "language")
}

// A client that asks for a stream and never reads it holds back neither its run
// nor anyone else's: events are appended without waiting for readers.
func TestStalledReaderBlocksNothing(t *testing.T) {
	ts := newTestService(t)
	conn, err := net.Dial("unix", ts.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A program that prints far more than a socket buffer holds.
	body := `{"id":"stalled","language":"python","code":"import sys\nfor i in range(20000): print('x' * 49)"}`
	fmt.Fprintf(conn, "POST /v1/runs HTTP/1.1\r\nHost: brig\r\nAccept: application/x-ndjson\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)

	// Another client is served meanwhile.
	res := ts.mustRun(t, request("python", "print('other')"))
	if res.Stdout != "other\n" {
		t.Fatalf("got %q from the other client's run, want other", res.Stdout)
	}
	// The stalled run finishes on its own, with all its output kept.
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := ts.client.Get(context.Background(), "stalled")
		if err == nil && got.State == api.StateFinished {
			if got.Outcome != api.OutcomeSucceeded || len(got.Stdout) != 1_000_000 {
				t.Fatalf("got %s with %d characters of stdout, want succeeded with 1000000", got.Outcome, len(got.Stdout))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("got the stalled reader's run still %v after 15 s (err %v), want it finished", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A journal that can't be written (a full or read-only state directory)
// refuses a run with 503 and a Retry-After in the API's error shape, never a
// 500 (API.md keeps it for defects) nor a dropped connection, and counts the
// refusal. An offline run is refused when its line can't be appended to the
// pending file, a networked one when its record can't be committed.
func TestJournalFailureIs503(t *testing.T) {
	for _, tc := range []struct {
		network string
		breakIt func(*testing.T, *journal) error
	}{
		{api.NetworkNone, func(t *testing.T, j *journal) error {
			// Read only, until the test ends: writes fail with EBADF.
			f, err := os.Open(j.path)
			if err == nil {
				writable := j.pending
				j.pending = f
				t.Cleanup(func() { f.Close(); j.pending = writable })
			}
			return err
		}},
		{api.NetworkAny, func(_ *testing.T, j *journal) error { return j.db.Close() }},
	} {
		t.Run(tc.network, func(t *testing.T) {
			ts := newTestService(t, func(c *Config) { c.NetworkModes = []string{api.NetworkNone, api.NetworkAny} })
			if err := tc.breakIt(t, ts.journal); err != nil {
				t.Fatal(err)
			}
			_, err := ts.client.Run(context.Background(), request("python", "print(1)", networked(tc.network)))
			ce := apiErr(t, err, http.StatusServiceUnavailable, "")
			if ce.API.Code != api.ErrorUnavailable || !strings.Contains(ce.API.Message, "could not record the run in its journal") || ce.RetryAfter != journalRetryAfter*time.Second {
				t.Fatalf("got %+v (Retry-After %v), want code unavailable naming the journal, with a Retry-After", ce.API, ce.RetryAfter)
			}
			if n := counter(t, ts.metrics, "brig_runs_refused_total", "code=unavailable"); n != 1 {
				t.Errorf("brig_runs_refused_total{code=unavailable}: got %v, want 1", n)
			}
			if n := counter(t, ts.metrics, "brig_journal_write_failures_total", "write=accept"); n != 1 {
				t.Errorf("brig_journal_write_failures_total{write=accept}: got %v, want 1", n)
			}
			ts.mu.Lock()
			left := len(ts.runs)
			ts.mu.Unlock()
			if left != 0 {
				t.Errorf("got %d runs in memory, want none: the run was refused", left)
			}
			if running, queued := ts.adm.counts(); running != 0 || queued != 0 {
				t.Fatalf("got %d running and %d queued after the refusal, want the slot given back", running, queued)
			}
		})
	}
}

// TestRequestsWaitForTheRunsRecord: a request that finds a run whose journal
// record is still being written waits for it, and where the write fails gets
// what a run that never was gets: a retry the same 503 as the run's own
// request, a GET, a DELETE and a stream 404. (The race probe of 2026-12-06:
// with a full state directory they had waited for ever, the streams after an
// "accepted" event.) The run is put in the service's table as submit puts it
// before the write, and refused as submit refuses it, so that every request
// arrives inside the window.
func TestRequestsWaitForTheRunsRecord(t *testing.T) {
	ts := newTestService(t)
	req := request("python", "print(1)", func(r *api.Request) { r.ID = "unrecorded" })
	body, _ := json.Marshal(req)
	sent, aerr := decodeRequest(body) // as the service reads it, its defaults filled in
	if aerr != nil {
		t.Fatal(aerr)
	}
	r := newRun(req.ID, requestKey(sent), sent, os.Geteuid(), time.Now())
	ts.mu.Lock()
	ts.runs[r.runKey()] = r
	ts.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type answer struct {
		what   string
		err    error
		events []api.Event
	}
	answers := make(chan answer, 4)
	go func() {
		_, err := ts.client.Run(ctx, req)
		answers <- answer{what: "a retry", err: err}
	}()
	go func() {
		_, err := ts.client.Get(ctx, req.ID)
		answers <- answer{what: "a GET", err: err}
	}()
	go func() {
		_, err := ts.client.Stop(ctx, req.ID)
		answers <- answer{what: "a DELETE", err: err}
	}()
	go func() {
		var evs []api.Event
		_, err := ts.client.Events(ctx, req.ID, func(ev api.Event) error { evs = append(evs, ev); return nil })
		answers <- answer{what: "a stream", err: err, events: evs}
	}()
	select {
	case a := <-answers:
		t.Fatalf("%s was answered before the run's record was written or refused: %v", a.what, a.err)
	case <-time.After(500 * time.Millisecond):
	}
	e := newError(api.ErrorUnavailable, "the service could not record the run in its journal (a test), so the program did not run")
	e.retryAfter = journalRetryAfter
	r.recordedAs(e)
	ts.mu.Lock()
	delete(ts.runs, r.runKey())
	ts.mu.Unlock()
	for range 4 {
		a := <-answers
		want := http.StatusNotFound
		if a.what == "a retry" {
			want = http.StatusServiceUnavailable
		}
		var ce *client.Error
		if !errors.As(a.err, &ce) || ce.Status != want || len(a.events) > 0 {
			t.Errorf("%s: got %v with events %v, want %d and no event", a.what, a.err, a.events, want)
		}
	}
}

// A result whose pending line can't be written (a full disk, where bbolt may
// still have free pages) is answered once committed, so that a crash right
// after the answer does not turn it into another result (a chaos audit: a
// networked run answered succeeded came back stopped and unknown).
func TestResultDurableWhenAnsweredWithoutPendingFile(t *testing.T) {
	u := newUpstreams(t)
	ts := newTestService(t, u.withNetwork)
	f, err := os.Open(ts.journal.path) // read only: writes fail with EBADF
	if err != nil {
		t.Fatal(err)
	}
	writable := ts.journal.pending
	ts.journal.pending = f
	t.Cleanup(func() { f.Close(); ts.journal.pending = writable })
	for i := range 3 {
		id := fmt.Sprintf("durable-nopending-%d", i)
		res, err := ts.client.Run(context.Background(), request("python", "print(1)", withRunID(id), networked(api.NetworkAny)))
		if err != nil {
			t.Fatal(err)
		}
		// The pending file is the one the test made unwritable: no line.
		rec, err := afterCrash(t, ts.state, id, journalFile)
		if err != nil || rec.Result == nil || rec.Result.State != api.StateFinished || rec.Result.Reason != res.Reason || rec.Result.Outcome != res.Outcome {
			t.Fatalf("run %s: answered %s %s; after a crash at the answer the journal held %+v (%v), want the same", id, res.Reason, res.Outcome, rec.Result, err)
		}
	}
	if n := counter(t, ts.metrics, "brig_journal_write_failures_total", "write=pending"); n != 3 {
		t.Errorf("brig_journal_write_failures_total{write=pending}: got %v, want 3", n)
	}
}

// afterCrash is the record of run id in the journal a crash would leave now:
// files of state (the journal's) copied as they are, opened and recovered as a
// restart does.
func afterCrash(t *testing.T, state, id string, files ...string) (*record, error) {
	t.Helper()
	crashed := t.TempDir()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(state, f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(crashed, f), b, 0o600)
	}
	j, err := openJournal(crashed, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	j.recover(interruptedResult, time.Now())
	return j.get(runKey{uid: os.Getuid(), id: id})
}

// A result survives a crash of the service right after it was answered: the
// state directory as it is at the answer (copied, as a crash would leave it)
// opens to the run finished, not stopped. And every run whose program started
// is in the start-time histogram, a warm start of under a millisecond too.
func TestResultDurableWhenAnswered(t *testing.T) {
	ts := newTestService(t)
	const runs = 5
	for i := range runs {
		id := fmt.Sprintf("durable-%d", i)
		res, err := ts.client.Run(context.Background(), request("python", "print(1)", withRunID(id)))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := afterCrash(t, ts.state, id, journalFile, pendingFile)
		if err != nil || rec.Result == nil || rec.Result.State != api.StateFinished || rec.Result.Outcome != res.Outcome {
			t.Fatalf("run %s: after a crash at its answer the journal held %+v (%v), want its result", id, rec, err)
		}
	}
	mfs, err := ts.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var started uint64
	for _, mf := range mfs {
		if mf.GetName() == "brig_run_start_seconds" {
			for _, m := range mf.GetMetric() {
				started += m.GetHistogram().GetSampleCount()
			}
		}
	}
	if started != runs {
		t.Errorf("got %d starts in brig_run_start_seconds, want %d", started, runs)
	}
}

// The run's log line names its cgroup as the cgroup package's own lines do, so
// that an operator can tie the kernel's OOM kill of a pooled sandbox's group,
// made before its run was known, to the run.
func TestRunLogNamesItsCgroup(t *testing.T) {
	ts := newTestService(t)
	res := ts.mustRun(t, request("python", "b = bytearray(400 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n", func(r *api.Request) {
		mib := 128
		r.MemoryMiB = &mib
	}))
	if res.Reason != api.ReasonMemory {
		t.Fatalf("got %s/%s (%s), want a memory failure", res.Outcome, res.Reason, res.Message)
	}
	ts.stop(t)
	runs := ts.logs.Lines("run finished")
	if len(runs) != 1 {
		t.Fatalf("got %d run lines, want 1", len(runs))
	}
	group, _ := runs[0]["cgroup"].(string)
	if !strings.HasPrefix(group, "/"+testCgroupParent+"/run-") {
		t.Fatalf("the run's line has cgroup %q, want a group under %s", group, testCgroupParent)
	}
	ooms := ts.logs.Lines("the kernel OOM-killed a process of the cgroup; killed the whole group")
	if len(ooms) != 1 || ooms[0]["cgroup"] != group {
		t.Fatalf("the cgroup's OOM lines %v, want one naming %q", ooms, group)
	}
}
