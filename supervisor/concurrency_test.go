package supervisor

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/client"
	"github.com/brig-sandbox/brig/internal/apitest"
)

// newCheckedClient is a client of socket of its own (its own connections),
// whose exchanges are checked against api/openapi.yaml.
func newCheckedClient(tb testing.TB, socket string) *client.Client {
	c := client.New(socket)
	base := c.HTTP.Transport.(*http.Transport)
	c.HTTP.Transport = apitest.Transport(tb, base)
	tb.Cleanup(base.CloseIdleConnections)
	return c
}

// TestConcurrentRunsKeepTheirOwnOutput: 200 runs from 8 clients at once
// through 4 slots: each gets its own output and only its own, under its own id,
// and each is answered the same afterwards.
func TestConcurrentRunsKeepTheirOwnOutput(t *testing.T) {
	const (
		clients   = 8
		perClient = 25
		slots     = 4
	)
	ts := newTestService(t, func(c *Config) { c.MaxConcurrent = slots; c.QueueSize = clients * perClient })
	ctx := context.Background()

	// The slots bound how many run at once, whatever the clients do.
	var maxRunning, maxQueued atomic.Int64
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(10 * time.Millisecond):
			}
			h, err := ts.client.Health(ctx)
			if err != nil {
				t.Errorf("Health: %v", err)
				return
			}
			if int64(h.Running) > maxRunning.Load() {
				maxRunning.Store(int64(h.Running))
			}
			if int64(h.Queued) > maxQueued.Load() {
				maxQueued.Store(int64(h.Queued))
			}
		}
	}()

	type outcome struct {
		id, token string
		res       *api.Result
	}
	results := make([][]outcome, clients)
	var wg sync.WaitGroup
	for ci := range clients {
		c := newCheckedClient(t, ts.socket)
		results[ci] = make([]outcome, perClient)
		for ri := range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				token := fmt.Sprintf("tok-%d-%d", ci, ri)
				id := fmt.Sprintf("conc-%d-%d", ci, ri)
				req := request("python", fmt.Sprintf("import sys\nprint(%q)\nprint(%q, file=sys.stderr)\n", token, token), withRunID(id))
				if ri%2 == 1 {
					req = request("javascript", fmt.Sprintf("console.log(%q); console.error(%q);", token, token), withRunID(id))
				}
				res, err := c.Run(ctx, req)
				if err != nil {
					t.Errorf("run %s: got %v, want 200 and its result", id, err)
					return
				}
				results[ci][ri] = outcome{id, token, res}
			}()
		}
	}
	wg.Wait()
	close(stopWatch)
	<-watched

	seen := map[string]bool{}
	for _, rs := range results {
		for _, o := range rs {
			if o.res == nil {
				continue
			}
			res := o.res
			if res.ID != o.id {
				t.Errorf("got id %q, want %q", res.ID, o.id)
			}
			if seen[res.ID] {
				t.Errorf("got id %q twice, want every run its own", res.ID)
			}
			seen[res.ID] = true
			if res.Outcome != api.OutcomeSucceeded || res.State != api.StateFinished {
				t.Errorf("run %s: got %s/%s reason %q (%s), want finished/succeeded", o.id, res.State, res.Outcome, res.Reason, res.Message)
			}
			if want := o.token + "\n"; res.Stdout != want || res.Stderr != want {
				t.Errorf("run %s: got stdout %q stderr %q, want %q in each (outputs of runs must never mix)", o.id, res.Stdout, res.Stderr, want)
			}
			got, err := ts.client.Get(ctx, o.id)
			if err != nil {
				t.Errorf("GET %s: %v", o.id, err)
			} else if !reflect.DeepEqual(got, res) {
				t.Errorf("GET %s: got %+v, want the result the run returned %+v", o.id, got, res)
			}
		}
	}
	if len(seen) != clients*perClient {
		t.Errorf("got %d distinct results, want %d", len(seen), clients*perClient)
	}
	if n := maxRunning.Load(); n > slots {
		t.Errorf("got %d runs executing at once, want at most %d", n, slots)
	}
	if maxQueued.Load() == 0 {
		t.Logf("the queue never held a run (the health poll missed it?)")
	}

	ts.stop(t) // each canonical line is written before Shutdown returns
	lines := ts.logs.Lines("run finished")
	if len(lines) != clients*perClient {
		t.Errorf("got %d %q lines, want %d", len(lines), "run finished", clients*perClient)
	}
	logged := map[string]int{}
	for _, l := range lines {
		id, _ := l[logID].(string)
		logged[id]++
	}
	for id := range seen {
		if logged[id] != 1 {
			t.Errorf("got %d %q lines for %s, want 1", logged[id], "run finished", id)
		}
	}
}

// TestGeneratedIDsSortable: ids the service makes are unique and sort in the
// order the runs were made.
func TestGeneratedIDsSortable(t *testing.T) {
	ts := newTestService(t)
	const n = 10
	var ids []string
	for range n {
		res := ts.mustRun(t, request("python", "pass"))
		ids = append(ids, res.ID)
	}
	for i, id := range ids {
		if len(id) != 26 {
			t.Errorf("got id %q, want a 26-character ULID", id)
		}
		if i > 0 && ids[i-1] >= id {
			t.Errorf("got id %q after %q, want ids that sort in creation order and never repeat", id, ids[i-1])
		}
	}
	if !slices.IsSorted(ids) {
		t.Errorf("got ids %q, want them sorted in creation order", ids)
	}
}

// TestIdempotentConcurrentRetries: the same id and body sent ten times at once
// runs once, and every sender gets that run's result.
func TestIdempotentConcurrentRetries(t *testing.T) {
	ts := newTestService(t)
	const (
		id      = "idem-1"
		senders = 10
	)
	// A random number: two runs would print two different ones.
	req := request("python", "import random, time\nprint(random.random())\ntime.sleep(0.3)\n", withRunID(id))
	ready := make(chan struct{})
	results := make([]*api.Result, senders)
	var wg sync.WaitGroup
	for i := range senders {
		c := newCheckedClient(t, ts.socket)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-ready
			var (
				res *api.Result
				err error
			)
			if i%2 == 0 {
				res, err = c.Run(context.Background(), req)
			} else {
				res, err = c.Stream(context.Background(), req, nil)
			}
			if err != nil {
				t.Errorf("sender %d: got %v, want the run's result", i, err)
				return
			}
			results[i] = res
		}()
	}
	close(ready)
	wg.Wait()
	var first *api.Result
	for i, res := range results {
		if res == nil {
			continue
		}
		if first == nil {
			first = res
			checkSucceeded(t, res, res.Stdout)
			continue
		}
		if !reflect.DeepEqual(res, first) {
			t.Errorf("sender %d: got %+v, want the same result as the first sender's %+v", i, res, first)
		}
	}
	ts.stop(t)
	if n := len(ts.logs.Lines("run finished")); n != 1 {
		t.Errorf("got %d %q lines, want 1: the code must run once", n, "run finished")
	}
}
