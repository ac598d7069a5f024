package supervisor

import (
	"context"
	"net/http"
	"testing"

	"github.com/brig-sandbox/brig/api"
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
			got, err := ts.client.Get(context.Background(), res.ID)
			if err != nil || got.Stdout != tc.want {
				t.Fatalf("GET: got %+v, %v, want the same result", got, err)
			}
		})
	}
	ts.stop(t) // the canonical line follows the result; Shutdown waits for it
	if n := len(ts.logs.lines("run finished")); n != 2 {
		t.Errorf("got %d canonical run lines, want 2", n)
	}
}

func TestValidationRefusesBeforeRunning(t *testing.T) {
	ts := newTestService(t)
	_, err := ts.client.Run(context.Background(), request("ruby", "puts 1"))
	apiErr(t, err, http.StatusBadRequest, "language")
}
