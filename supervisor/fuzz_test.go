package supervisor

import (
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/internal/text"
)

// updateFuzzCorpus rewrites the seed files of FuzzDecodeRequest from
// decodeSeeds: go test -run TestDecodeRequestCorpus -update-fuzz-corpus.
var updateFuzzCorpus = flag.Bool("update-fuzz-corpus", false, "write decodeSeeds to testdata/fuzz/FuzzDecodeRequest")

// decodeCorpusDir is FuzzDecodeRequest's corpus, in Go's fuzz file format.
var decodeCorpusDir = filepath.Join("testdata", "fuzz", "FuzzDecodeRequest")

// decodeSeeds are the seeds of FuzzDecodeRequest: valid requests, and each kind
// of invalid one. Each is also a file in decodeCorpusDir, named seed-<name>.
var decodeSeeds = []struct{ name, body string }{
	{"minimal", `{"language": "python", "code": "print(1)"}`},
	{"full", `{"id": "run-1.a_b:c", "language": "javascript", "code": "console.log(process.env.A)", "timeout_seconds": 300, "memory_mib": 2048, "packages": ["lodash@^4.17.0", "@types/node@20"], "env": {"A": "1", "_b": "é"}, "network": {"mode": "domains", "domains": ["example.com", "API.Example.org."]}}`},
	{"full-python", `{"id": "x", "language": "python", "code": "import sys\nprint(sys.argv)", "timeout_seconds": 1, "memory_mib": 128, "packages": ["numpy==1.26.4", "pandas>=2,<3", "httpx[http2]==0.27.0"], "env": {}, "network": {"mode": "none"}}`},
	{"bad-language", `{"language": "ruby", "code": "puts 1"}`},
	{"empty-code", `{"language": "python", "code": ""}`},
	{"timeout-range", `{"language": "python", "code": "1", "timeout_seconds": 301}`},
	{"timeout-type", `{"language": "python", "code": "1", "timeout_seconds": "30"}`},
	{"memory-float", `{"language": "python", "code": "1", "memory_mib": 512.5}`},
	{"package-unpinned", `{"language": "python", "code": "1", "packages": ["numpy==1", "requests"]}`},
	{"env-reserved", `{"language": "python", "code": "1", "env": {"PATH": "/bin"}}`},
	{"env-null-value", `{"language": "python", "code": "1", "env": {"A": null}}`},
	{"network-mode", `{"language": "python", "code": "1", "network": {"mode": "bogus"}}`},
	{"network-wildcard", `{"language": "python", "code": "1", "network": {"mode": "domains", "domains": ["*.example.com"]}}`},
	{"network-domains-empty", `{"language": "python", "code": "1", "network": {"mode": "none", "domains": []}}`},
	{"unknown-field", `{"language": "python", "code": "1", "extra": true}`},
	{"null-field", `{"language": "python", "code": "1", "id": null}`},
	{"not-object", `[]`},
	{"truncated", `{"language": "python", "code"`},
	{"trailing", `{"language": "python", "code": "1"} x`},
	{"invalid-utf8", "{\"language\": \"python\", \"code\": \"\xff\xfe\", \"id\": \"\xc3\"}"},
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkDecodeInvariants(t, body)
	})
}

// TestDecodeRequestCorpus checks FuzzDecodeRequest's invariants on every file of
// its corpus, so that plain go test covers the seeds and any crasher kept there.
func TestDecodeRequestCorpus(t *testing.T) {
	if *updateFuzzCorpus {
		writeDecodeCorpus(t)
	}
	ents, err := os.ReadDir(decodeCorpusDir)
	if err != nil {
		t.Fatalf("reading the corpus: %v", err)
	}
	bodies := map[string]bool{}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		t.Run(e.Name(), func(t *testing.T) {
			body, err := readCorpusFile(filepath.Join(decodeCorpusDir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			bodies[string(body)] = true
			checkDecodeInvariants(t, body)
		})
	}
	for _, s := range decodeSeeds {
		if !bodies[s.body] {
			t.Errorf("got no corpus file for seed %q, want seed-%s (run with -update-fuzz-corpus)", s.name, s.name)
		}
	}
}

// readCorpusFile parses one file of Go's fuzz corpus format of a []byte target:
// "go test fuzz v1", then []byte("...") in Go syntax.
func readCorpusFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) != 2 || lines[0] != "go test fuzz v1" {
		return nil, &corpusError{path, "want two lines: \"go test fuzz v1\" and []byte(\"...\")"}
	}
	quoted, ok := strings.CutPrefix(lines[1], "[]byte(")
	if quoted, ok = strings.CutSuffix(quoted, ")"); !ok {
		return nil, &corpusError{path, "want its second line to be []byte(\"...\")"}
	}
	s, err := strconv.Unquote(quoted)
	if err != nil {
		return nil, &corpusError{path, "unquoting " + quoted + ": " + err.Error()}
	}
	return []byte(s), nil
}

type corpusError struct{ path, msg string }

func (e *corpusError) Error() string { return e.path + ": " + e.msg }

func writeDecodeCorpus(t *testing.T) {
	if err := os.MkdirAll(decodeCorpusDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range decodeSeeds {
		data := "go test fuzz v1\n[]byte(" + strconv.Quote(s.body) + ")\n"
		if err := os.WriteFile(filepath.Join(decodeCorpusDir, "seed-"+s.name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkDecodeInvariants checks what decodeRequest promises for any body.
func checkDecodeInvariants(t *testing.T, body []byte) {
	t.Helper()
	req, aerr := decodeRequest(body)
	if aerr != nil {
		checkDecodeRefusal(t, body, aerr)
		return
	}
	checkAcceptedRequest(t, req)

	again, err := json.Marshal(req)
	if err != nil {
		t.Fatalf("got %v marshalling the accepted request %+v, want JSON", err, req)
	}
	req2, aerr2 := decodeRequest(again)
	if aerr2 != nil {
		t.Fatalf("got %s %q (%s) decoding the re-marshalled request %s, want it accepted", aerr2.body.Code, aerr2.body.Field, aerr2.body.Message, again)
	}
	if !sameRequest(req, req2) {
		t.Fatalf("got %s after a round trip, want %s", jsonOf(req2), jsonOf(req))
	}
	if k1, k2 := requestKey(req), requestKey(req2); k1 != k2 {
		t.Fatalf("got key %s after a round trip, want %s", k2, k1)
	}
}

func checkDecodeRefusal(t *testing.T, body []byte, aerr *apiError) {
	t.Helper()
	e := aerr.body
	if e.Code != api.ErrorInvalidRequest || statusOf(e.Code) != http.StatusBadRequest {
		t.Fatalf("got code %q (status %d), want %q (400)", e.Code, statusOf(e.Code), api.ErrorInvalidRequest)
	}
	if strings.TrimSpace(e.Message) == "" {
		t.Fatalf("got an empty message for field %q, want a sentence", e.Field)
	}
	if len(e.Field) > maxFieldBytes || len(e.Message) > maxMessageBytes {
		t.Fatalf("got a field of %d bytes and a message of %d, want at most %d and %d", len(e.Field), len(e.Message), maxFieldBytes, maxMessageBytes)
	}
	if e.Field == "" || fieldOfRequest(e.Field) {
		return
	}
	// Otherwise the field must be an unknown member that the body has (its
	// start, when clipMiddle shortened it).
	var members map[string]json.RawMessage
	if json.NewDecoder(bytes.NewReader(body)).Decode(&members) == nil {
		for m := range members {
			clipped := text.ClipMiddle(m, maxFieldBytes)
			if clipped == e.Field && !slices.Contains(requestFields, m) {
				return
			}
		}
	}
	t.Fatalf("got field %q (%s), want \"\", a field of the request or the body's unknown member", e.Field, e.Message)
}

// fieldOfRequest reports whether field names a request field or a part of one
// ("network.mode", "packages[3]", "env.NAME").
func fieldOfRequest(field string) bool {
	for _, f := range requestFields {
		if field == f || strings.HasPrefix(field, f+".") || strings.HasPrefix(field, f+"[") {
			return true
		}
	}
	return false
}

func checkAcceptedRequest(t *testing.T, req api.Request) {
	t.Helper()
	if req.ID != "" && (len(req.ID) > api.MaxIDChars || validateID(req.ID) != nil) {
		t.Errorf("got id %q, want 1 to 128 of A-Z a-z 0-9 . _ : -", req.ID)
	}
	if req.Language != "python" && req.Language != "javascript" {
		t.Errorf("got language %q, want python or javascript", req.Language)
	}
	if n := utf8.RuneCountInString(req.Code); n < 1 || n > api.MaxCodeChars {
		t.Errorf("got code of %d code points, want 1 to %d", n, api.MaxCodeChars)
	}
	if p := req.TimeoutSeconds; p == nil || *p < api.MinTimeoutSeconds || *p > api.MaxTimeoutSeconds {
		t.Errorf("got timeout_seconds %s, want 1 to 300", intPtrString(p))
	}
	if p := req.MemoryMiB; p == nil || *p < api.MinMemoryMiB || *p > api.MaxMemoryMiB {
		t.Errorf("got memory_mib %s, want 128 to 2048", intPtrString(p))
	}
	if req.Packages == nil || len(req.Packages) > api.MaxPackages {
		t.Errorf("got packages %#v, want a non-nil list of at most %d", req.Packages, api.MaxPackages)
	}
	if req.Env == nil || len(req.Env) > api.MaxEnvEntries {
		t.Errorf("got env %#v, want a non-nil map of at most %d", req.Env, api.MaxEnvEntries)
	}
	n := req.Network
	if n == nil {
		t.Fatalf("got network nil, want one with a mode")
	}
	switch n.Mode {
	case api.NetworkNone, api.NetworkRegistries, api.NetworkAny:
		if len(n.Domains) != 0 {
			t.Errorf("got domains %v with mode %q, want none", n.Domains, n.Mode)
		}
	case api.NetworkDomains:
		if len(n.Domains) < 1 || len(n.Domains) > api.MaxDomains {
			t.Errorf("got %d domains, want 1 to %d", len(n.Domains), api.MaxDomains)
		}
	default:
		t.Errorf("got network mode %q, want none, registries, domains or any", n.Mode)
	}
}

// sameRequest reports whether a and b ask for the same run with the same id. A
// nil and an empty list are the same (JSON omits both).
func sameRequest(a, b api.Request) bool {
	eqInt := func(x, y *int) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	eqNet := func(x, y *api.Network) bool {
		return (x == nil) == (y == nil) && (x == nil || x.Mode == y.Mode && slices.Equal(x.Domains, y.Domains))
	}
	return a.ID == b.ID && a.Language == b.Language && a.Code == b.Code &&
		eqInt(a.TimeoutSeconds, b.TimeoutSeconds) && eqInt(a.MemoryMiB, b.MemoryMiB) &&
		slices.Equal(a.Packages, b.Packages) && maps.Equal(a.Env, b.Env) && eqNet(a.Network, b.Network)
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
