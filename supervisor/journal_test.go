package supervisor

import (
	"fmt"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
)

// BenchmarkJournal measures the two fsynced writes every run makes (README:
// "Journal"): go test -run XXX -bench Journal ./supervisor
func BenchmarkJournal(b *testing.B) {
	j, err := openJournal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer j.close()
	res := &api.Result{Language: "python", State: api.StateFinished, Stdout: "hello\n"}
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprint("run-", i)
		rec := &record{Key: "k", Language: "python", Network: api.NetworkNone, AcceptedAt: time.Now()}
		if err := j.accept(id, rec); err != nil {
			b.Fatal(err)
		}
		rec.FinishedAt, rec.Result = time.Now(), res
		if err := j.finish(id, rec); err != nil {
			b.Fatal(err)
		}
	}
}

func TestJournalRecoverAndPrune(t *testing.T) {
	j, err := openJournal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	old := time.Now().Add(-2 * time.Hour)
	j.accept("done", &record{Key: "k", Language: "python", Network: api.NetworkNone, AcceptedAt: old})
	j.finish("done", &record{Key: "k", Language: "python", Network: api.NetworkNone, AcceptedAt: old, FinishedAt: old, Result: &api.Result{ID: "done"}})
	j.accept("flying", &record{Key: "k", Language: "python", Network: api.NetworkAny, AcceptedAt: old})
	ids, err := j.recover(interruptedResult, time.Now())
	if err != nil || len(ids) != 1 || ids[0] != "flying" {
		t.Fatalf("got recovered %v, %v, want [flying]", ids, err)
	}
	rec, err := j.get("flying")
	if err != nil || rec.Result.Reason != api.ReasonStopped || rec.Result.Outcome != api.OutcomeUnknown {
		t.Fatalf("got %+v, %v, want stopped with outcome unknown (network any)", rec, err)
	}
	if n, err := j.prune(time.Now().Add(-time.Hour)); err != nil || n != 1 {
		t.Fatalf("got %d pruned, %v, want 1 (the old result, not the one just recovered)", n, err)
	}
	if _, err := j.get("done"); err != errNoRecord {
		t.Fatalf("got %v for the pruned run, want errNoRecord", err)
	}
}
