package supervisor

import (
	"net/http/httptest"
	"testing"
)

// The stream is chosen by the weights of Accept's media ranges: NDJSON when
// the client weighs it at least as high as anything that takes the JSON
// result.
func TestWantsStream(t *testing.T) {
	for _, tc := range []struct {
		accept string
		want   bool
	}{
		{"", false},
		{"application/json", false},
		{"*/*", false},
		{"application/x-ndjson", true},
		{"Application/X-NDJSON", true},
		{"application/x-ndjson, application/json", true},
		{"application/json, application/x-ndjson", true},
		{"application/json, application/x-ndjson;q=0.5", false},
		{"application/json;q=0.4, application/x-ndjson;q=0.5", true},
		{"application/x-ndjson; q=0.9, */*;q=0.1", true},
		{"application/x-ndjson;q=0", false},
		{"application/x-ndjson;q=0.5, application/*", false},
		{"text/html, application/x-ndjson;q=0.2", true},
		{"application/x-ndjson;q=bogus", true}, // an unreadable weight is the default, 1
		// Each type weighs its most specific range (the contract probe).
		{"application/x-ndjson;q=0.5, application/json;q=0, */*", true},
		{"application/x-ndjson;q=0.5, application/json;q=0.1, */*;q=0.9", true},
		{"application/x-ndjson;q=0.5, application/*;q=0.4, */*", true},
		{"application/x-ndjson;q=0.5, application/*;q=0.6", false},
		{"application/*", false},
		{"application/x-ndjson;q=0, */*", false},
	} {
		r := httptest.NewRequest("POST", "/v1/runs", nil)
		if tc.accept != "" {
			r.Header.Set("Accept", tc.accept)
		}
		if got := wantsStream(r); got != tc.want {
			t.Errorf("Accept %q: got stream %v, want %v", tc.accept, got, tc.want)
		}
	}
}
