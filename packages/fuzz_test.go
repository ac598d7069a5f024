package packages

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// pyNormalisedRE is what a PEP 503 normalised name looks like.
var pyNormalisedRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// corpusDir holds FuzzParseRequest's seed corpus, which TestParseRequestCorpus
// also runs without -fuzz.
const corpusDir = "testdata/fuzz/FuzzParseRequest"

func FuzzParseRequest(f *testing.F) {
	for _, seed := range [][2]string{
		{"python", "numpy==1.26.4"},
		{"python", "pandas>=2,<3"},
		{"python", "httpx[http2]==0.27.0"},
		{"python", "Django_REST.framework ~= 3.1 , != 3.1.2"},
		{"python", "foo===x; os_name=='nt'"},
		{"python", "pkg @ https://example.com/p.whl"},
		{"javascript", "lodash@^4.17.0"},
		{"javascript", "@types/node@20"},
		{"javascript", "lodash@1.2.3 - 2.3.4 || >=5.0.0-rc.1+b <6"},
		{"javascript", "x@npm:y@1"},
		{"python", "torch[cuda] (==2.1.0+cu121, !=2.1.1)"},
		{"javascript", "JSONStream@>= 1.3.0 < 2 || ~ 2"},
		{"ruby", "rails==7"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(checkParseInvariants)
}

// checkParseInvariants is what any input must satisfy: no panic; an accepted
// request is within the length bounds, has a name and a constraint and keeps Raw;
// a refused one is a *RequestError with a message.
func checkParseInvariants(t *testing.T, language, s string) {
	r, err := ParseRequest(language, s)
	if language != languagePython && language != languageJavaScript {
		if err == nil {
			t.Fatalf("ParseRequest(%q, %q): got %#v, want an error for the language", language, s, r)
		}
		return
	}
	if err != nil {
		var rerr *RequestError
		if !errors.As(err, &rerr) || rerr.Message == "" || rerr.Request != s || rerr.Index != -1 {
			t.Fatalf("ParseRequest(%q, %q): got error %#v, want a *RequestError with a message", language, s, err)
		}
		return
	}
	if n := utf8.RuneCountInString(s); n < minRequestChars || n > maxRequestChars {
		t.Errorf("ParseRequest(%q, %q): accepted %d characters, want %d to %d", language, s, n, minRequestChars, maxRequestChars)
	}
	if r.Raw != s || r.Name == "" || r.Constraint == "" {
		t.Errorf("ParseRequest(%q, %q): got %#v, want Raw equal to the input and a Name and Constraint", language, s, r)
	}
	if language == languagePython && !pyNormalisedRE.MatchString(r.Name) {
		t.Errorf("ParseRequest(%q, %q): got Name %q, want a PEP 503 normalised name", language, s, r.Name)
	}
}

// TestParseRequestCorpus runs the fuzz invariants over the seed corpus, so that
// plain `go test` checks it.
func TestParseRequestCorpus(t *testing.T) {
	entries, err := os.ReadDir(corpusDir)
	if err != nil {
		t.Fatalf("reading the corpus: %v", err)
	}
	if len(entries) == 0 {
		t.Fatalf("got no files in %s, want the seed corpus", corpusDir)
	}
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			args, err := readCorpusFile(filepath.Join(corpusDir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if len(args) != 2 {
				t.Fatalf("got %d values, want 2 (language, request)", len(args))
			}
			checkParseInvariants(t, args[0], args[1])
		})
	}
}

// readCorpusFile reads a corpus file of Go's fuzzing format whose values are all
// strings: the "go test fuzz v1" line, then one string("...") a line.
func readCorpusFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() || sc.Text() != "go test fuzz v1" {
		return nil, errors.New("reading " + path + `: want the first line "go test fuzz v1"`)
	}
	var args []string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		quoted, ok := strings.CutPrefix(line, "string(")
		if ok {
			quoted, ok = strings.CutSuffix(quoted, ")")
		}
		v, err := strconv.Unquote(quoted)
		if !ok || err != nil {
			return nil, errors.New("reading " + path + ": want string(\"...\") lines, got " + line)
		}
		args = append(args, v)
	}
	return args, sc.Err()
}
