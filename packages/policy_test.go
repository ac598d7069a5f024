package packages

import (
	"errors"
	"strings"
	"testing"
)

func TestPolicyCheck(t *testing.T) {
	tests := []struct {
		name     string
		policy   PolicyConfig
		language string
		requests []string
		// blocked is the Request of the refusal, "" when admitted; rule its
		// Rule; message a part of its Message.
		blocked, rule, message string
	}{
		{name: "empty mode admits all", policy: PolicyConfig{}, language: "python", requests: []string{"numpy==1.26.4", "requests>=0"}},
		{name: "open admits all", policy: PolicyConfig{Mode: "open", Deny: []string{"numpy"}}, language: "python", requests: []string{"numpy==1.26.4"}},

		{name: "allow exact name", policy: PolicyConfig{Mode: "allow", Allow: []string{"numpy"}}, language: "python", requests: []string{"numpy>=1"}},
		{name: "allow glob", policy: PolicyConfig{Mode: "allow", Allow: []string{"numpy", "django-*"}}, language: "python", requests: []string{"Django_REST.framework>=3"}},
		{name: "allow entry normalised per PEP 503", policy: PolicyConfig{Mode: "allow", Allow: []string{"Typing_Extensions"}}, language: "python", requests: []string{"typing.extensions>=4"}},
		{
			name: "allow refuses another name", policy: PolicyConfig{Mode: "allow", Allow: []string{"numpy", "django-*"}},
			language: "python", requests: []string{"numpy>=1", "requests>=2"},
			blocked: "requests>=2", rule: "allow", message: "requests is not on this host's allow list (allowed: numpy, django-*)",
		},
		{name: "allow scoped npm glob", policy: PolicyConfig{Mode: "allow", Allow: []string{"@types/*"}}, language: "javascript", requests: []string{"@types/node@20"}},
		{
			name: "allow scoped glob is not another scope", policy: PolicyConfig{Mode: "allow", Allow: []string{"@types/*"}},
			language: "javascript", requests: []string{"@evil/node@20"},
			blocked: "@evil/node@20", rule: "allow", message: "@evil/node is not on this host's allow list",
		},
		{name: "allow star admits scoped names", policy: PolicyConfig{Mode: "allow", Allow: []string{"*"}}, language: "javascript", requests: []string{"@types/node@20"}},
		{
			name: "npm names are not folded like Python's", policy: PolicyConfig{Mode: "allow", Allow: []string{"lodash_x"}},
			language: "javascript", requests: []string{"lodash-x@1"},
			blocked: "lodash-x@1", rule: "allow",
		},

		{name: "deny admits others", policy: PolicyConfig{Mode: "deny", Deny: []string{"evil-*"}}, language: "python", requests: []string{"numpy==1.26.4"}},
		{
			name: "allow npm name is exact", policy: PolicyConfig{Mode: "allow", Allow: []string{"jsonstream"}},
			language: "javascript", requests: []string{"JSONStream@1.3.5"},
			blocked: "JSONStream@1.3.5", rule: "allow", message: "JSONStream is not on this host's allow list",
		},
		{name: "allow npm legacy capitals", policy: PolicyConfig{Mode: "allow", Allow: []string{"JSON*"}}, language: "javascript", requests: []string{"JSONStream@1.3.5"}},
		{name: "deny npm name is exact", policy: PolicyConfig{Mode: "deny", Deny: []string{"jsonstream"}}, language: "javascript", requests: []string{"JSONStream@1.3.5"}},
		{
			name: "deny glob", policy: PolicyConfig{Mode: "deny", Deny: []string{"evil-*"}},
			language: "python", requests: []string{"numpy==1.26.4", "Evil_Pkg>=0"},
			blocked: "Evil_Pkg>=0", rule: "deny:evil-*", message: "evil-pkg is refused by this host's deny list (entry evil-*)",
		},
		{
			name: "deny npm name", policy: PolicyConfig{Mode: "deny", Deny: []string{"left-pad"}},
			language: "javascript", requests: []string{"left-pad@*"},
			blocked: "left-pad@*", rule: "deny:left-pad", message: "left-pad is refused",
		},

		{name: "reviewed exact pin", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy==1.26.4"}}, language: "python", requests: []string{"numpy==1.26.4"}},
		{name: "reviewed triple equals", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy==1.26.4"}}, language: "python", requests: []string{"NumPy===1.26.4"}},
		// What a refusal of a local build says to request instead.
		{name: "reviewed triple equals, zero padded", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"alpha==1.0"}}, language: "python", requests: []string{"alpha===1.0.0"}},
		{name: "reviewed with extras", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"httpx==0.27.0"}}, language: "python", requests: []string{"httpx[http2]==0.27.0"}},
		{name: "reviewed one of two versions", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy==1.26.4", "numpy==2.0.0"}}, language: "python", requests: []string{"numpy==2.0.0"}},
		{
			name: "reviewed refuses a range", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy==1.26.4"}},
			language: "python", requests: []string{"numpy>=1"},
			blocked: "numpy>=1", rule: "reviewed", message: "numpy>=1 asks for a version of numpy that is not reviewed on this host (reviewed: numpy==1.26.4): pin one of them exactly, as numpy==1.26.4",
		},
		{
			name: "reviewed refuses another version", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy==1.26.4"}},
			language: "python", requests: []string{"numpy==1.26.3"},
			blocked: "numpy==1.26.3", rule: "reviewed",
		},
		{
			name: "reviewed refuses a wildcard", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy==1.26.4"}},
			language: "python", requests: []string{"numpy==1.26.*"},
			blocked: "numpy==1.26.*", rule: "reviewed",
		},
		{
			name: "reviewed refuses a name not listed", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy==1.26.4"}},
			language: "python", requests: []string{"requests==2.32.3"},
			blocked: "requests==2.32.3", rule: "reviewed", message: "requests has no reviewed version on this host",
		},
		// PEP 440 equality: zero padding, spellings, PEP 503 names.
		{name: "reviewed zero padding", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"alpha==1.0"}}, language: "python", requests: []string{"alpha==1.0.0"}},
		{name: "reviewed zero padding the other way", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"foo-bar==1.2.0"}}, language: "python", requests: []string{"foo_bar==1.2"}},
		{name: "reviewed name and version spelled otherwise", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"Foo_Bar==1.2"}}, language: "python", requests: []string{"foo.bar==v1.2.0"}},
		{name: "reviewed prerelease spelling", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"alpha==1.0a1"}}, language: "python", requests: []string{"alpha==1.0.0-ALPHA.1"}},
		{name: "reviewed post release spelling", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"alpha==1.0.post1"}}, language: "python", requests: []string{"alpha==1.0-1"}},
		{name: "reviewed parenthesised pin", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"alpha==1.0"}}, language: "python", requests: []string{"alpha (==1.0)"}},
		{name: "reviewed local version", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"torch==2.1.0+cpu"}}, language: "python", requests: []string{"torch==2.1+CPU"}},
		{
			name: "reviewed zero padding is not a prefix", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"alpha==1.0"}},
			language: "python", requests: []string{"alpha==1.0.1"},
			blocked: "alpha==1.0.1", rule: "reviewed", message: "pin one of them exactly, as alpha==1.0",
		},
		{
			name: "reviewed local version is another version", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"torch==2.1.0"}},
			language: "python", requests: []string{"torch==2.1.0+cpu"},
			blocked: "torch==2.1.0+cpu", rule: "reviewed",
		},
		{
			name: "reviewed prerelease is another version", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"alpha==1.0"}},
			language: "python", requests: []string{"alpha==1.0rc1"},
			blocked: "alpha==1.0rc1", rule: "reviewed",
		},
		{
			name: "reviewed advice keeps the extras", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"httpx==0.27.0"}},
			language: "python", requests: []string{"HTTPX[HTTP2]>=0.27"},
			blocked: "HTTPX[HTTP2]>=0.27", rule: "reviewed", message: "pin one of them exactly, as httpx[http2]==0.27.0",
		},
		{name: "reviewed npm exact", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"lodash@4.17.21"}}, language: "javascript", requests: []string{"lodash@4.17.21"}},
		{name: "reviewed npm equals apart", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"left-pad@1.3.0"}}, language: "javascript", requests: []string{"left-pad@= 1.3.0"}},
		{name: "reviewed npm build metadata aside", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"react@1.0.0-beta.1+b7"}}, language: "javascript", requests: []string{"react@1.0.0-beta.1"}},
		{
			name: "reviewed npm has no zero padding", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"lodash@4.17.21"}},
			language: "javascript", requests: []string{"lodash@4.17"},
			blocked: "lodash@4.17", rule: "reviewed", message: "as lodash@4.17.21",
		},
		{
			name: "reviewed npm prerelease is another version", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"react@1.0.0"}},
			language: "javascript", requests: []string{"react@1.0.0-rc.1"},
			blocked: "react@1.0.0-rc.1", rule: "reviewed",
		},
		{name: "reviewed npm legacy capitals", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"JSONStream@1.3.5"}}, language: "javascript", requests: []string{"JSONStream@1.3.5"}},
		{
			name: "reviewed npm capitals are another name", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"jsonstream@1.3.5"}},
			language: "javascript", requests: []string{"JSONStream@1.3.5"},
			blocked: "JSONStream@1.3.5", rule: "reviewed", message: "JSONStream has no reviewed version",
		},
		{name: "reviewed npm equals", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"@types/node@20.11.0"}}, language: "javascript", requests: []string{"@types/node@=20.11.0"}},
		{
			name: "reviewed npm caret refused", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"lodash@4.17.21"}},
			language: "javascript", requests: []string{"lodash@^4.17.21"},
			blocked: "lodash@^4.17.21", rule: "reviewed", message: "pin one of them exactly, as lodash@4.17.21",
		},
		{
			name: "reviewed pair of the other language does not count", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"lodash==4.17.21"}},
			language: "javascript", requests: []string{"lodash@4.17.21"},
			blocked: "lodash@4.17.21", rule: "reviewed",
		},
		{
			name: "unknown mode fails closed", policy: PolicyConfig{Mode: "permissive"},
			language: "python", requests: []string{"numpy==1.26.4"},
			blocked: "numpy==1.26.4", rule: "permissive",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs, err := ParseRequests(tt.language, tt.requests)
			if err != nil {
				t.Fatalf("parsing %q: %v", tt.requests, err)
			}
			err = tt.policy.Check(tt.language, reqs)
			if tt.blocked == "" {
				if err != nil {
					t.Fatalf("got %v, want the requests admitted", err)
				}
				return
			}
			var b *BlockedError
			if !errors.As(err, &b) {
				t.Fatalf("got %v, want a *BlockedError", err)
			}
			if !errors.Is(err, ErrBlocked) {
				t.Errorf("errors.Is(%v, ErrBlocked) is false", err)
			}
			if b.Request != tt.blocked || b.Rule != tt.rule {
				t.Errorf("got request %q rule %q, want %q %q", b.Request, b.Rule, tt.blocked, tt.rule)
			}
			if !strings.Contains(b.Message, tt.message) {
				t.Errorf("got message %q, want it to hold %q", b.Message, tt.message)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name   string
		policy PolicyConfig
		want   string // part of the error, "" for none
	}{
		{name: "zero", policy: PolicyConfig{}},
		{name: "open", policy: PolicyConfig{Mode: "open"}},
		{name: "allow", policy: PolicyConfig{Mode: "allow", Allow: []string{"numpy", "django-*", "@types/*"}}},
		{name: "deny with no list", policy: PolicyConfig{Mode: "deny"}},
		{name: "reviewed", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy==1.26.4", "lodash@4.17.21", "@types/node@20.11.0-beta.1"}}},
		{name: "reviewed local version and legacy npm name", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"torch==2.1.0+cpu", "JSONStream@1.3.5"}}},
		{name: "reviewed scoped npm capitals", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"@Types/node@20.11.0"}}, want: "not an npm name@version pair"},
		{name: "unknown mode", policy: PolicyConfig{Mode: "strict"}, want: `unknown mode "strict"`},
		{name: "allow with no list", policy: PolicyConfig{Mode: "allow"}, want: "empty allow list"},
		{name: "reviewed with no list", policy: PolicyConfig{Mode: "reviewed"}, want: "empty reviewed list"},
		{name: "bad glob", policy: PolicyConfig{Mode: "allow", Allow: []string{"num[py"}}, want: `entry "num[py" is not a valid glob`},
		{name: "blank entry", policy: PolicyConfig{Mode: "deny", Deny: []string{" "}}, want: "blank"},
		{name: "spaced entry", policy: PolicyConfig{Mode: "deny", Deny: []string{"numpy "}}, want: "spaces"},
		{name: "allow globs of every shape", policy: PolicyConfig{Mode: "allow", Allow: []string{"*", "py?est", "[a-c]*", "[!x]y", "@brig/*", "@*/util", "zope.interface", "Foo_Bar"}}},
		{name: "deny with a version", policy: PolicyConfig{Mode: "deny", Deny: []string{"numpy", "requests>=2"}}, want: `entry "requests>=2" is not a package name or a glob of names`},
		{name: "deny an npm name@version", policy: PolicyConfig{Mode: "deny", Deny: []string{"lodash@4.17.21"}}, want: `pin versions with mode "reviewed"`},
		{name: "allow a pinned pair", policy: PolicyConfig{Mode: "allow", Allow: []string{"numpy==1.0"}}, want: `entry "numpy==1.0" is not a package name`},
		{name: "allow a path", policy: PolicyConfig{Mode: "allow", Allow: []string{"numpy", "../x"}}, want: `entry "../x"`},
		{name: "deny a URL", policy: PolicyConfig{Mode: "deny", Deny: []string{"https://evil.example/x.whl"}}, want: `entry "https://evil.example/x.whl"`},
		{name: "reviewed range", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy>=1"}}, want: `entry "numpy>=1" is neither`},
		{name: "reviewed npm range", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"lodash@^4.17.21"}}, want: "exact version"},
		{name: "reviewed npm partial", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"lodash@4.17"}}, want: "exact version"},
		{name: "reviewed bad python version", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy==latest"}}, want: "not a Python name==version"},
		{name: "a deny list with the mode left out", policy: PolicyConfig{Deny: []string{"lodash"}}, want: `the deny list names "lodash" and 0 more, which mode "open" does not read: set mode = "deny"`},
		{name: "an allow list under deny", policy: PolicyConfig{Mode: "deny", Deny: []string{"a"}, Allow: []string{"b", "c"}}, want: `the allow list names "b" and 1 more, which mode "deny" does not read`},
		{name: "a reviewed list under allow", policy: PolicyConfig{Mode: "allow", Allow: []string{"b"}, Reviewed: []string{"numpy==1.26.4"}}, want: `the reviewed list names "numpy==1.26.4" and 0 more`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error holding %q", err, tt.want)
			}
		})
	}
}

// TestPolicyCheckNamesEveryRefusal: one refusal names every refused request,
// up to six, the first's request and rule its own.
func TestPolicyCheckNamesEveryRefusal(t *testing.T) {
	reqs, err := ParseRequests("javascript", []string{"lodash@4.17.21", "left-pad@1.3.0", "is-odd@3", "a@1", "b@1", "c@1", "d@1", "e@1", "f@1"})
	if err != nil {
		t.Fatal(err)
	}
	err = PolicyConfig{Mode: "deny", Deny: []string{"left-pad", "is-odd", "?"}}.Check("javascript", reqs)
	var b *BlockedError
	if !errors.As(err, &b) || b.Request != "left-pad@1.3.0" || b.Rule != "deny:left-pad" {
		t.Fatalf("got %#v, want left-pad's refusal first", err)
	}
	want := "left-pad is refused by this host's deny list (entry left-pad); is-odd is refused by this host's deny list (entry is-odd); a is refused"
	if !strings.HasPrefix(b.Message, want) || !strings.HasSuffix(b.Message, "; and 2 more of the requests are refused") || strings.Contains(b.Message, "lodash") {
		t.Errorf("got %q, want it to start %q, name five after the first, and say two more", b.Message, want)
	}
	// An allow list is quoted once.
	err = PolicyConfig{Mode: "allow", Allow: []string{"lodash"}}.Check("javascript", reqs[:3])
	if !errors.As(err, &b) || b.Message != "left-pad is not on this host's allow list (allowed: lodash); is-odd is not on it either" {
		t.Errorf("allow: got %v", err)
	}
}

func TestPolicyMessageListsAtMostTen(t *testing.T) {
	var allow []string
	for _, c := range "abcdefghijkl" {
		allow = append(allow, string(c)+"pkg")
	}
	reqs, err := ParseRequests("python", []string{"numpy>=1"})
	if err != nil {
		t.Fatal(err)
	}
	err = PolicyConfig{Mode: "allow", Allow: allow}.Check("python", reqs)
	if err == nil || !strings.HasSuffix(err.Error(), "jpkg and 2 more)") {
		t.Fatalf("got %v, want the list cut after ten entries", err)
	}
}

func TestPolicyCheckResolved(t *testing.T) {
	resolved := []Resolved{
		{Name: "numpy", Version: "1.26.4", Request: "numpy==1.26.4"},
		{Name: "six", Version: "1.16.0"},
	}
	// As the supervisor gives them: RequiredBy in the run's spelling.
	pulled := []Resolved{
		{Name: "numpy", Version: "1.26.4", Request: "numpy==1.26.4"},
		{Name: "python-dateutil", Version: "2.9.0", Request: "python-dateutil>=2"},
		{Name: "six", Version: "1.16.0", RequiredBy: []string{"numpy==1.26.4", "python-dateutil>=2"}},
	}
	tests := []struct {
		name     string
		policy   PolicyConfig
		language string
		pkgs     []Resolved
		want     string // part of the refusal, "" when admitted
	}{
		{name: "open", policy: PolicyConfig{}, language: "python", pkgs: resolved},
		{name: "allow admits dependencies", policy: PolicyConfig{Mode: "allow", Allow: []string{"numpy"}}, language: "python", pkgs: resolved},
		{name: "deny admits others", policy: PolicyConfig{Mode: "deny", Deny: []string{"evil"}}, language: "python", pkgs: resolved},
		{
			name: "deny refuses a dependency", policy: PolicyConfig{Mode: "deny", Deny: []string{"six"}}, language: "python", pkgs: resolved,
			want: "six==1.16.0, a dependency the install resolved, is refused by this host's deny list (entry six)",
		},
		{name: "reviewed all", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy==1.26.4", "Six==1.16.0"}}, language: "python", pkgs: resolved},
		{
			name: "reviewed refuses an unreviewed dependency", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy==1.26.4", "six==1.15.0"}}, language: "python", pkgs: resolved,
			want: "six==1.16.0, a dependency the install resolved, is not a reviewed version on this host (reviewed: six==1.15.0), which installs only reviewed name and version pairs: add a reviewed version of it to the requests, as six==1.15.0",
		},
		{
			name: "reviewed refuses a dependency with no reviewed version", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy==1.26.4"}}, language: "python", pkgs: resolved,
			want: "six==1.16.0, a dependency the install resolved, has no reviewed version on this host",
		},
		// PEP 440 equality: "foo_bar==1.2" installs 1.2.0, reviewed as foo-bar==1.2.
		{
			name: "reviewed zero padding", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"foo-bar==1.2", "Six==1.16"}}, language: "python",
			pkgs: []Resolved{{Name: "foo-bar", Version: "1.2.0", Request: "foo_bar==1.2"}, {Name: "six", Version: "1.16.0"}},
		},
		// PEP 440's == matches local builds, and pip takes the newest
		// (1.0+evil over 1.0): the reviewed pin alpha==1.0 never installs
		// while the index has one, and the refusal says to request ===,
		// which matches 1.0 alone (the probe's hint said to request
		// alpha==1.0, which the run had).
		{
			name: "reviewed local build refused", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"alpha==1.0"}}, language: "python",
			pkgs: []Resolved{{Name: "alpha", Version: "1.0+evil", Request: "alpha==1.0"}},
			want: "alpha==1.0+evil, which alpha==1.0 resolved to, is not a reviewed version on this host (reviewed: alpha==1.0), which installs only reviewed name and version pairs: " +
				"pip's == matches a version's local builds too (PEP 440) and took 1.0+evil; request alpha===1.0, which matches 1.0 alone",
		},
		{
			name: "reviewed local build's hint keeps the request's extras and the index's spelling", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"httpx==0.27"}}, language: "python",
			pkgs: []Resolved{{Name: "httpx", Version: "0.27.0+cpu", Request: "HTTPX[http2]==0.27"}},
			want: "request httpx[http2]===0.27.0, which matches 0.27.0 alone",
		},
		{
			name: "reviewed local build of a dependency", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"app==2.0", "alpha==1.0"}}, language: "python",
			pkgs: []Resolved{{Name: "app", Version: "2.0", Request: "app==2.0"}, {Name: "alpha", Version: "1.0+local", RequiredBy: []string{"app==2.0"}}},
			want: "alpha==1.0+local, a dependency of app==2.0, is not a reviewed version on this host (reviewed: alpha==1.0), which installs only reviewed name and version pairs: " +
				"add it to the requests as alpha===1.0 (pip's == matches a version's local builds too, PEP 440, and took 1.0+local), or request versions of app==2.0 whose dependencies are reviewed",
		},
		// A local build that is not of a reviewed version: the hint as before.
		{
			name: "reviewed local build of another version", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"app==2.0", "alpha==1.0"}}, language: "python",
			pkgs: []Resolved{{Name: "app", Version: "2.0", Request: "app==2.0"}, {Name: "alpha", Version: "1.1+local", RequiredBy: []string{"app==2.0"}}},
			want: "add a reviewed version of it to the requests, as alpha==1.0, or",
		},
		{
			name: "reviewed npm legacy capitals", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"JSONStream@1.3.5", "through@2.3.8"}}, language: "javascript",
			pkgs: []Resolved{{Name: "JSONStream", Version: "1.3.5", Request: "JSONStream@1.3.5"}, {Name: "through", Version: "2.3.8"}},
		},
		{
			name: "reviewed refuses a request resolved elsewhere", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"lodash@4.17.20"}}, language: "javascript",
			pkgs: []Resolved{{Name: "lodash", Version: "4.17.21", Request: "lodash@4.17.21"}},
			want: "lodash@4.17.21, which lodash@4.17.21 resolved to, is not a reviewed version",
		},
		{name: "reviewed npm", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"@types/node@20.11.0"}}, language: "javascript", pkgs: []Resolved{{Name: "@types/node", Version: "20.11.0"}}},
		// deny refuses a package by any of its names: the review's
		// dependency installed as evil whose tarball named it okjs had
		// passed a deny list naming evil.
		{
			name: "deny refuses a dependency by an alias", policy: PolicyConfig{Mode: "deny", Deny: []string{"evil"}}, language: "javascript",
			pkgs: []Resolved{{Name: "okjs", Version: "1.0.0", Aliases: []string{"evil"}}},
			want: "evil@1.0.0, a dependency the install resolved, is refused by this host's deny list (entry evil)",
		},
		// reviewed judges the registry's name: an alias is no pair the
		// registry serves (glob@10's "string-width-cjs":
		// "npm:string-width@^4.2.0"), nor is a tarball's claim to be a
		// reviewed package (the last review's okjs, fetched as evil).
		{
			name: "reviewed judges an alias by its registry name", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"string-width@4.2.3"}}, language: "javascript",
			pkgs: []Resolved{{Name: "string-width", Version: "4.2.3", Aliases: []string{"string-width-cjs"}}},
		},
		{
			name: "reviewed refuses a tarball claiming a reviewed name", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"okjs@1.0.0"}}, language: "javascript",
			pkgs: []Resolved{{Name: "evil", Version: "1.0.0", Aliases: []string{"okjs"}}},
			want: "evil@1.0.0, a dependency the install resolved, has no reviewed version on this host",
		},
		{
			name: "reviewed refuses a package from outside the registry", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"gitdep@1.0.0", "app@1.0.0"}}, language: "javascript",
			pkgs: []Resolved{{Name: "app", Version: "1.0.0", Request: "app@1.0.0"}, {Name: "gitdep", Version: "1.0.0", Source: "git+https://git.test/gitdep.git#0123abc", RequiredBy: []string{"app@1.0.0"}}},
			want: "gitdep@1.0.0, a dependency of app@1.0.0, was installed from git+https://git.test/gitdep.git#0123abc, not from the registry",
		},
		// A dependency whose requesters are known names them, and what to change.
		{
			name: "deny names the requests that pulled a dependency in", policy: PolicyConfig{Mode: "deny", Deny: []string{"six"}}, language: "python", pkgs: pulled,
			want: "six==1.16.0, a dependency of numpy==1.26.4 and python-dateutil>=2, is refused by this host's deny list (entry six): request versions of numpy==1.26.4 and python-dateutil>=2 that do not depend on it, or other packages",
		},
		{
			name: "reviewed names the request that pulled a dependency in", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy==1.26.4", "python-dateutil==2.9.0", "six==1.15.0"}}, language: "python", pkgs: pulled,
			want: "six==1.16.0, a dependency of numpy==1.26.4 and python-dateutil>=2, is not a reviewed version on this host (reviewed: six==1.15.0), which installs only reviewed name and version pairs: add a reviewed version of it to the requests, as six==1.15.0, or request versions of numpy==1.26.4 and python-dateutil>=2 whose dependencies are reviewed",
		},
		{
			name: "reviewed names the request of a dependency with no reviewed version", policy: PolicyConfig{Mode: "reviewed", Reviewed: []string{"numpy==1.26.4", "python-dateutil==2.9.0"}}, language: "python", pkgs: pulled,
			want: "has no reviewed version on this host, which installs only reviewed name and version pairs: request versions of numpy==1.26.4 and python-dateutil>=2 whose dependencies are all reviewed here",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.CheckResolved(tt.language, tt.pkgs)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want the packages admitted", err)
				}
				return
			}
			if !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want a refusal holding %q", err, tt.want)
			}
		})
	}
}
