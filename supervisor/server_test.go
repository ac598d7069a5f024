package supervisor

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/brig-sandbox/brig/internal/testutil"
)

// A refusal's log line leaves out the user and password of a URL the request
// gave (the operator audit: a package given as git+https://user:token@... was
// logged with its token); the answer keeps what was sent.
func TestRefusalLogLeavesOutCredentials(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`"git+https://tok:SECRETTOKEN@example.test/a/b" is a URL`, `"git+https://REDACTED@example.test/a/b" is a URL`},
		{`"https://user:SECRETPW@host.test/" is not a host name`, `"https://REDACTED@host.test/" is not a host name`},
		{`"lodash@4" is fine, as is mail user@host`, `"lodash@4" is fine, as is mail user@host`},
	} {
		if got := redactUserinfo(tc.in); got != tc.want {
			t.Errorf("redactUserinfo(%q): got %q, want %q", tc.in, got, tc.want)
		}
	}
	logs := &testutil.LogBuffer{}
	ts := newTestService(t, func(c *Config) { c.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	req := request("python", "print(1)")
	req.Packages = []string{"git+https://tok:SECRETTOKEN@example.test/a/b"}
	_, err := ts.client.Run(context.Background(), req)
	if ce := apiErr(t, err, http.StatusBadRequest, "packages[0]"); !strings.Contains(ce.API.Message, "SECRETTOKEN") {
		t.Errorf("the answer: got %q, want what was sent", ce.API.Message)
	}
	if strings.Contains(logs.String(), "SECRETTOKEN") || !strings.Contains(logs.String(), "REDACTED@example.test") {
		t.Errorf("the log: got %s, want the token left out", logs.String())
	}
}
