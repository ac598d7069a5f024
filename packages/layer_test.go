package packages

import (
	"testing"
)

func mustSet(t testing.TB, language, runtime string, requests ...string) Set {
	t.Helper()
	reqs, err := ParseRequests(language, requests)
	if err != nil {
		t.Fatalf("parsing %q: %v", requests, err)
	}
	return Set{Language: language, Runtime: runtime, Requests: reqs}
}

func TestSetKey(t *testing.T) {
	py := func(reqs ...string) Set { return mustSet(t, "python", "3.11.2", reqs...) }
	js := func(reqs ...string) Set { return mustSet(t, "javascript", "20.20.2", reqs...) }
	withOptions := func(s Set, opts ...string) Set { s.Options = opts; return s }
	withRuntime := func(s Set, r string) Set { s.Runtime = r; return s }

	tests := []struct {
		name string
		a, b Set
		same bool
	}{
		{name: "order", a: py("numpy==1.26.4", "requests>=2"), b: py("requests>=2", "numpy==1.26.4"), same: true},
		{name: "name spelling", a: py("Requests>=2"), b: py("requests>=2"), same: true},
		{name: "separators", a: py("typing_extensions>=4"), b: py("Typing.Extensions>=4"), same: true},
		{name: "space before the constraint", a: py("requests >=2"), b: py("requests>=2"), same: true},
		{name: "spaces in the constraint", a: py("pandas>=2, <3"), b: py("pandas >= 2,<3"), same: true},
		{name: "clause order", a: py("pandas>=2,<3"), b: py("pandas<3,>=2"), same: true},
		{name: "extras order and spelling", a: py("httpx[http2,Socks]==0.27.0"), b: py("httpx[socks,http2]==0.27.0"), same: true},
		// pip compares a requested extra lower-cased with the package's own
		// spelling: "foo_bar" is not "foo-bar" to it, and not to the key.
		{name: "extras' separators", a: py("pkg[foo_bar]==1"), b: py("pkg[foo-bar]==1"), same: false},
		{name: "npm range spaces", a: js("lodash@>=4  <5"), b: js("lodash@>=4 <5"), same: true},
		{name: "npm order", a: js("lodash@^4.17.0", "@types/node@20"), b: js("@types/node@20", "lodash@^4.17.0"), same: true},
		{name: "npm operator apart from its version", a: js("left-pad@>= 1.3.0  < 2"), b: js("left-pad@>=1.3.0 <2"), same: true},
		{name: "npm equals sign", a: js("lodash@=4.17.21 || = 3.10.1"), b: js("lodash@4.17.21 || 3.10.1"), same: true},
		{name: "npm equals sign is not >=", a: js("lodash@>=4.17.21"), b: js("lodash@4.17.21"), same: false},
		{name: "npm caret apart from its version", a: js("lodash@^ 4.17.0 || ~ 5"), b: js("lodash@^4.17.0 || ~5"), same: true},
		{name: "python parenthesised", a: py("Alpha (>=1.0, <2)"), b: py("alpha>=1.0,<2"), same: true},
		{name: "options order", a: withOptions(py("numpy>=1"), "b", "a"), b: withOptions(py("numpy>=1"), "a", "b"), same: true},
		// PEP 440 versions compared zero-padded, written another way.
		{name: "python zero padding", a: py("numpy==1.26.0"), b: py("numpy==1.26"), same: true},
		{name: "python leading zeros", a: py("numpy==01.26"), b: py("numpy==1.26"), same: true},
		{name: "python range padding", a: py("pandas>=2.0,<3.0.0"), b: py("pandas<3,>=2"), same: true},
		{name: "python pre-release spelling", a: py("black==24.1.0alpha1"), b: py("black==24.1a1"), same: true},
		{name: "python local label case", a: py("torch==2.1.0+CPU"), b: py("torch==2.1+cpu"), same: true},

		{name: "constraint", a: py("requests>=2"), b: py("requests>=2.1"), same: false},
		{name: "operator", a: py("requests>=2"), b: py("requests==2"), same: false},
		{name: "extras", a: py("httpx==0.27.0"), b: py("httpx[http2]==0.27.0"), same: false},
		{name: "runtime", a: py("numpy==1.26.4"), b: withRuntime(py("numpy==1.26.4"), "3.12.0"), same: false},
		{name: "language", a: py("left-pad>=1"), b: js("left-pad@>=1"), same: false},
		{name: "npm legacy capitals are another name", a: js("JSONStream@1.3.5"), b: js("jsonstream@1.3.5"), same: false},
		{name: "python local version", a: py("torch==2.1.0"), b: py("torch==2.1.0+cpu"), same: false},
		// Where the written form is the meaning, it stays.
		{name: "python compatible release counts segments", a: py("numpy~=1.26"), b: py("numpy~=1.26.0"), same: false},
		{name: "python wildcard counts segments", a: py("numpy==1.26.*"), b: py("numpy==1.26.0.*"), same: false},
		{name: "python arbitrary equality is a string", a: py("numpy===1.26"), b: py("numpy===1.26.0"), same: false},
		{name: "one more package", a: py("numpy>=1"), b: py("numpy>=1", "requests>=2"), same: false},
		{name: "options", a: py("numpy>=1"), b: withOptions(py("numpy>=1"), "source-builds"), same: false},
		// A request's name can't run into its constraint in the encoding.
		{name: "name and constraint boundary", a: py("ab==1"), b: py("a-b==1"), same: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka, kb := tt.a.Key(), tt.b.Key()
			if len(ka) != 64 || !keyRE().MatchString(ka) {
				t.Fatalf("got key %q, want 64 hex digits", ka)
			}
			if (ka == kb) != tt.same {
				t.Fatalf("got keys %s and %s, want them equal: %v", ka, kb, tt.same)
			}
		})
	}
}
