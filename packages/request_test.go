package packages

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParseRequestAccepts(t *testing.T) {
	tests := []struct {
		name           string
		language       string
		in             string
		wantName       string
		wantExtras     []string
		wantConstraint string
	}{
		// API.md's examples.
		{name: "python pinned", language: "python", in: "numpy==1.26.4", wantName: "numpy", wantConstraint: "==1.26.4"},
		{name: "python two clauses", language: "python", in: "pandas>=2,<3", wantName: "pandas", wantConstraint: ">=2,<3"},
		{name: "python compatible", language: "python", in: "requests~=2.31", wantName: "requests", wantConstraint: "~=2.31"},
		{name: "python open", language: "python", in: "requests>=0", wantName: "requests", wantConstraint: ">=0"},
		{name: "python extras", language: "python", in: "httpx[http2]==0.27.0", wantName: "httpx", wantExtras: []string{"http2"}, wantConstraint: "==0.27.0"},
		{name: "npm exact", language: "javascript", in: "lodash@4.17.21", wantName: "lodash", wantConstraint: "4.17.21"},
		{name: "npm caret", language: "javascript", in: "lodash@^4.17.0", wantName: "lodash", wantConstraint: "^4.17.0"},
		{name: "npm scoped partial", language: "javascript", in: "@types/node@20", wantName: "@types/node", wantConstraint: "20"},
		{name: "npm open", language: "javascript", in: "lodash@*", wantName: "lodash", wantConstraint: "*"},

		// Python names, extras and specifiers.
		{name: "python normalised name", language: "python", in: "Django_REST.framework==3", wantName: "django-rest-framework", wantConstraint: "==3"},
		{name: "python runs of separators", language: "python", in: "a-_.b>=1", wantName: "a-b", wantConstraint: ">=1"},
		{name: "python one-character name", language: "python", in: "x<1", wantName: "x", wantConstraint: "<1"},
		{name: "python extras lower-cased and sorted", language: "python", in: "pkg[Zeta_X, alpha,zeta-x,zeta_x]==1", wantName: "pkg", wantExtras: []string{"alpha", "zeta-x", "zeta_x"}, wantConstraint: "==1"},
		{name: "python empty extras", language: "python", in: "pkg[]==1", wantName: "pkg", wantConstraint: "==1"},
		{name: "python spaces around operators and commas", language: "python", in: "pandas >= 2 , < 3", wantName: "pandas", wantConstraint: ">= 2 , < 3"},
		{name: "python space after extras", language: "python", in: "httpx[http2] ==0.27.0", wantName: "httpx", wantExtras: []string{"http2"}, wantConstraint: "==0.27.0"},
		{name: "python wildcard", language: "python", in: "numpy==1.26.*", wantName: "numpy", wantConstraint: "==1.26.*"},
		{name: "python not-equal wildcard", language: "python", in: "numpy!=1.*", wantName: "numpy", wantConstraint: "!=1.*"},
		{name: "python arbitrary equality", language: "python", in: "foo===1.0-weird+thing", wantName: "foo", wantConstraint: "===1.0-weird+thing"},
		{name: "python prerelease post dev epoch", language: "python", in: "foo>=1!2.0rc1.post2.dev3", wantName: "foo", wantConstraint: ">=1!2.0rc1.post2.dev3"},
		{name: "python v prefix", language: "python", in: "foo>v1.0", wantName: "foo", wantConstraint: ">v1.0"},
		{name: "python compatible with three numbers", language: "python", in: "foo~=1.4.5", wantName: "foo", wantConstraint: "~=1.4.5"},
		{name: "python local version", language: "python", in: "torch==2.1.0+cpu", wantName: "torch", wantConstraint: "==2.1.0+cpu"},
		{name: "python local version not equal", language: "python", in: "alpha!=1.0+Local_2.x-1", wantName: "alpha", wantConstraint: "!=1.0+Local_2.x-1"},
		{name: "python local version in a range", language: "python", in: "alpha>=1,!=1.5+ubuntu1", wantName: "alpha", wantConstraint: ">=1,!=1.5+ubuntu1"},
		{name: "python parenthesised", language: "python", in: "alpha (>=1.0)", wantName: "alpha", wantConstraint: ">=1.0"},
		{name: "python parenthesised without a space", language: "python", in: "alpha(==1.0)", wantName: "alpha", wantConstraint: "==1.0"},
		{name: "python parenthesised after extras", language: "python", in: "httpx[http2] ( >=0.27, <1 )", wantName: "httpx", wantExtras: []string{"http2"}, wantConstraint: ">=0.27, <1"},

		// npm ranges.
		{name: "npm x", language: "javascript", in: "lodash@x", wantName: "lodash", wantConstraint: "x"},
		{name: "npm partial two", language: "javascript", in: "lodash@4.17", wantName: "lodash", wantConstraint: "4.17"},
		{name: "npm tilde", language: "javascript", in: "lodash@~1.2", wantName: "lodash", wantConstraint: "~1.2"},
		{name: "npm and", language: "javascript", in: "lodash@>=1 <2", wantName: "lodash", wantConstraint: ">=1 <2"},
		{name: "npm x range", language: "javascript", in: "lodash@1.x", wantName: "lodash", wantConstraint: "1.x"},
		{name: "npm capital X", language: "javascript", in: "lodash@1.2.X", wantName: "lodash", wantConstraint: "1.2.X"},
		{name: "npm hyphen range", language: "javascript", in: "lodash@1.2.3 - 2.3.4", wantName: "lodash", wantConstraint: "1.2.3 - 2.3.4"},
		{name: "npm union", language: "javascript", in: "lodash@^1.0.0 || >=2.1 <3 || 4", wantName: "lodash", wantConstraint: "^1.0.0 || >=2.1 <3 || 4"},
		{name: "npm prerelease and build", language: "javascript", in: "react@1.0.0-beta.1+build.7", wantName: "react", wantConstraint: "1.0.0-beta.1+build.7"},
		{name: "npm equals", language: "javascript", in: "lodash@=4.17.21", wantName: "lodash", wantConstraint: "=4.17.21"},
		{name: "npm name with dot and tilde", language: "javascript", in: "socket.io~x@1", wantName: "socket.io~x", wantConstraint: "1"},
		{name: "npm space after operator", language: "javascript", in: "left-pad@>= 1.3.0", wantName: "left-pad", wantConstraint: ">= 1.3.0"},
		{name: "npm spaces after operators", language: "javascript", in: "left-pad@>= 1.3.0  < 2 || = 3.0.0", wantName: "left-pad", wantConstraint: ">= 1.3.0  < 2 || = 3.0.0"},
		{name: "npm space after caret and tilde", language: "javascript", in: "lodash@^ 4.17.0 || ~ 5.1", wantName: "lodash", wantConstraint: "^ 4.17.0 || ~ 5.1"},
		{name: "npm legacy name with capitals", language: "javascript", in: "JSONStream@1.3.5", wantName: "JSONStream", wantConstraint: "1.3.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRequest(tt.language, tt.in)
			if err != nil {
				t.Fatalf("ParseRequest(%q, %q): got error %v, want none", tt.language, tt.in, err)
			}
			want := Request{Raw: tt.in, Name: tt.wantName, Extras: tt.wantExtras, Constraint: tt.wantConstraint}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ParseRequest(%q, %q): got %#v, want %#v", tt.language, tt.in, got, want)
			}
		})
	}
}

func TestParseRequestRefuses(t *testing.T) {
	tests := []struct {
		name     string
		language string
		in       string
		wantHint string // a piece of the message that tells how to write it
	}{
		// Python.
		{name: "python no constraint", language: "python", in: "requests", wantHint: "pin it as requests==VERSION, with the exact version you need, or leave it open as requests>=0"},
		{name: "python no constraint after extras", language: "python", in: "httpx[http2]", wantHint: "pin it as httpx[http2]==VERSION"},
		{name: "python direct URL", language: "python", in: "pkg @ https://example.com/pkg.whl", wantHint: "such as pkg==1.0.0"},
		{name: "python bare URL", language: "python", in: "https://example.com/pkg.whl", wantHint: "package index only"},
		{name: "python git", language: "python", in: "git+https://github.com/a/b", wantHint: "package index only"},
		{name: "python npm style", language: "python", in: "numpy@1.26.4", wantHint: "written as for npm; a Python run's packages are pip's, written name==version, such as numpy==1.26.4"},
		{name: "python npm range", language: "python", in: "lodash@*", wantHint: "written as for npm; a Python run's packages are pip's, written name==version: pin it as lodash==VERSION"},
		{name: "python npm caret", language: "python", in: "requests@^2.31", wantHint: "or leave it open as requests>=0"},
		{name: "python scoped npm", language: "python", in: "@types/node@20", wantHint: "is a scoped npm package: a Python run's packages are pip's"},
		{name: "python direct reference", language: "python", in: "pkg @ https://example.invalid/pkg.whl", wantHint: "is a URL or a direct reference"},
		{name: "python npm style range", language: "python", in: "numpy@^1", wantHint: "is written as for npm; a Python run's packages are pip's, written name==version: pin it as numpy==VERSION"},
		{name: "javascript pip style", language: "javascript", in: "lodash==4", wantHint: "written as for pip; a JavaScript run's packages are npm's, written name@range, such as lodash@4"},
		{name: "javascript pip style range", language: "javascript", in: "lodash>=4,<5", wantHint: "such as lodash@>=4 <5"},
		{name: "javascript pip style lower bound", language: "javascript", in: "numpy>=1", wantHint: "such as numpy@>=1"},
		{name: "javascript pip style compatible", language: "javascript", in: "lodash~=4.17", wantHint: "such as lodash@>=4.17 <5"},
		{name: "javascript pip style compatible 0.x", language: "javascript", in: "lodash~=0.5", wantHint: "such as lodash@>=0.5 <1"},
		{name: "javascript pip style compatible patch", language: "javascript", in: "lodash~=1.4.5", wantHint: "such as lodash@~1.4.5"},
		{name: "javascript pip style any", language: "javascript", in: "lodash==*", wantHint: "such as lodash@*"},
		{name: "javascript pip style wildcard", language: "javascript", in: "lodash==4.*", wantHint: "such as lodash@4"},
		{name: "javascript pip style exclusion", language: "javascript", in: "lodash!=4", wantHint: "such as lodash@1.0.0"},
		{name: "python semicolon in extras", language: "python", in: "good[x;y]==1.0", wantHint: "has a \";\" inside its extras: extras are names separated by commas"},
		{name: "python relative path", language: "python", in: "./x", wantHint: "is a path"},
		{name: "python absolute path", language: "python", in: "/x/y", wantHint: "is a path"},
		{name: "python parent path", language: "python", in: "../x", wantHint: "is a path"},
		{name: "python windows path", language: "python", in: `C:\x\y`, wantHint: "is a path"},
		{name: "python editable", language: "python", in: "-e .", wantHint: "installer option"},
		{name: "python index url", language: "python", in: "--index-url https://evil.example/simple", wantHint: "installer option"},
		{name: "python marker", language: "python", in: `numpy==1.26.4; python_version < "3.12"`, wantHint: "has an environment marker, which brig does not take (a run's interpreter is known, so the marker decides nothing): drop everything from the \";\", as in numpy==1.26.4"},
		{name: "python space in name", language: "python", in: "num py==1", wantHint: "without spaces"},
		{name: "python control character", language: "python", in: "numpy==1\n", wantHint: "on one line"},
		{name: "python tab", language: "python", in: "numpy\t==1", wantHint: "on one line"},
		{name: "python blank", language: "python", in: "    ", wantHint: "blank"},
		{name: "python leading space", language: "python", in: " numpy==1", wantHint: `write it as "numpy==1"`},
		{name: "python single equals", language: "python", in: "numpy=1.26.4", wantHint: "takes \"==\""},
		{name: "python no operator", language: "python", in: "numpy 1.26.4", wantHint: "write numpy==1.26.4"},
		{name: "python name starts with dot", language: "python", in: ".numpy==1", wantHint: "start and end with a letter or digit"},
		{name: "python name ends with hyphen", language: "python", in: "numpy-==1", wantHint: "start and end with a letter or digit"},
		{name: "python no name", language: "python", in: "==1.0", wantHint: "does not start with a package name"},
		{name: "python non-ASCII name", language: "python", in: "nümpy==1", wantHint: "after the name"},
		{name: "python compatible one number", language: "python", in: "requests~=2", wantHint: "~= needs at least two"},
		{name: "python wildcard with >=", language: "python", in: "numpy>=1.*", wantHint: "== or != only"},
		{name: "python bad version", language: "python", in: "numpy==latest", wantHint: "not a PEP 440 version"},
		{name: "python local version after >=", language: "python", in: "torch>=2.1.0+cpu", wantHint: "PEP 440 allows a local version (+label) only after == or !=, as in torch==2.1.0+cpu"},
		{name: "python local version after ~=", language: "python", in: "torch~=2.1+cpu", wantHint: "only after == or !="},
		{name: "python empty local version", language: "python", in: "torch==2.1.0+", wantHint: "a local version is a version, \"+\" and a label"},
		{name: "python bad local version", language: "python", in: "torch==2.1.0+cpu!", wantHint: "a local version is a version"},
		{name: "python local wildcard", language: "python", in: "torch==2.1.0+cpu.*", wantHint: "not a PEP 440 wildcard"},
		{name: "python operator without version", language: "python", in: "numpy>=", wantHint: "without a version"},
		{name: "python empty clause", language: "python", in: "numpy>=1,,<2", wantHint: "single commas"},
		{name: "python trailing comma", language: "python", in: "numpy>=1,", wantHint: "single commas"},
		{name: "python space inside version", language: "python", in: "numpy>=1 2", wantHint: "space inside the version"},
		{name: "python unclosed extras", language: "python", in: "httpx[http2==1", wantHint: "closing its extras"},
		{name: "python bad extra", language: "python", in: "httpx[-x]==1", wantHint: "invalid extra"},
		{name: "python parentheses unclosed", language: "python", in: "numpy (>=1", wantHint: "no \")\" closing its version constraint: write it as numpy (>=1.0.0), or without the parentheses, as numpy>=1.0.0"},
		{name: "python parentheses empty", language: "python", in: "numpy ()", wantHint: "no version constraint, which brig requires: pin it as numpy==VERSION"},
		{name: "python parenthesis after the constraint", language: "python", in: "numpy>=1)", wantHint: "not a PEP 440 version"},

		// JavaScript.
		{name: "npm no range", language: "javascript", in: "lodash", wantHint: "pin it as lodash@VERSION, with the exact version you need, or leave it open as lodash@*"},
		{name: "npm scoped no range", language: "javascript", in: "@types/node", wantHint: "pin it as @types/node@VERSION"},
		{name: "npm empty range", language: "javascript", in: "lodash@", wantHint: "pin it as lodash@VERSION"},
		{name: "npm latest tag", language: "javascript", in: "lodash@latest", wantHint: "a tag is not a version constraint: pin it as lodash@VERSION"},
		{name: "npm two ranges", language: "javascript", in: "lodash@1@2", wantHint: "has \"@\" more than once after its name"},
		{name: "npm scoped, two ranges", language: "javascript", in: "@types/node@20@21", wantHint: "has \"@\" more than once after its name"},
		{name: "npm next tag", language: "javascript", in: "react@next", wantHint: "a tag is not a version constraint"},
		{name: "npm v prefix", language: "javascript", in: "lodash@v4", wantHint: "as lodash@4"},
		{name: "npm URL", language: "javascript", in: "https://example.com/x.tgz", wantHint: "npm registry only"},
		{name: "npm URL after name", language: "javascript", in: "x@https://example.com/x.tgz", wantHint: "npm registry only"},
		{name: "npm git+", language: "javascript", in: "git+https://github.com/a/b.git", wantHint: "git source"},
		{name: "npm git ssh", language: "javascript", in: "git@github.com:a/b.git", wantHint: "git source"},
		{name: "npm github shorthand protocol", language: "javascript", in: "github:user/repo", wantHint: "git source"},
		{name: "npm github shorthand", language: "javascript", in: "user/repo", wantHint: "GitHub repository"},
		{name: "npm github after name", language: "javascript", in: "x@user/repo", wantHint: "git source or a path"},
		{name: "npm file", language: "javascript", in: "file:../x", wantHint: "is a path"},
		{name: "npm alias", language: "javascript", in: "my@npm:lodash@4", wantHint: "npm alias"},
		{name: "npm relative path", language: "javascript", in: "./x", wantHint: "is a path"},
		{name: "npm absolute path", language: "javascript", in: "/x/y", wantHint: "is a path"},
		{name: "npm home path", language: "javascript", in: "~/x", wantHint: "is a path"},
		{name: "npm tarball", language: "javascript", in: "x-1.0.0.tgz", wantHint: "tarball"},
		{name: "npm option", language: "javascript", in: "--registry=https://evil.example", wantHint: "installer option"},
		{name: "npm blank", language: "javascript", in: "   ", wantHint: "blank"},
		{name: "npm scoped upper case", language: "javascript", in: "@Types/node@20", wantHint: "which no scoped npm name has: scopes and scoped names are lower case; if you meant @types/node, write @types/node@20"},
		{name: "npm node_modules in capitals", language: "javascript", in: "Node_Modules@1", wantHint: "npm does not allow"},
		{name: "npm Ruby's pessimistic operator", language: "javascript", in: "lodash@~>4.17", wantHint: "brig does not take: write it with \"~\", as lodash@~4.17"},
		{name: "npm operator without a version", language: "javascript", in: "lodash@>=", wantHint: "not an npm version range"},
		{name: "npm operator twice", language: "javascript", in: "lodash@>= >= 1", wantHint: "not an npm version range"},
		{name: "npm starts with dot", language: "javascript", in: ".x@1", wantHint: "do not start with"},
		{name: "npm starts with underscore", language: "javascript", in: "_x@1", wantHint: "do not start with"},
		{name: "npm node_modules", language: "javascript", in: "node_modules@1", wantHint: "npm does not allow"},
		{name: "npm favicon", language: "javascript", in: "favicon.ico@1", wantHint: "npm does not allow"},
		{name: "npm scope without package", language: "javascript", in: "@types@1", wantHint: "@scope/name@range"},
		{name: "npm bad scope", language: "javascript", in: "@_x/y@1", wantHint: "invalid scope"},
		{name: "npm bad range", language: "javascript", in: "lodash@>=1.2.3.4", wantHint: "not an npm version range"},
		{name: "npm leading zero", language: "javascript", in: "lodash@01.2.3", wantHint: "not an npm version range"},
		{name: "npm prerelease on partial", language: "javascript", in: "lodash@1.2-beta", wantHint: "not an npm version range"},
		{name: "npm empty union member", language: "javascript", in: "lodash@1 ||", wantHint: "not an npm version range"},
		{name: "npm empty union member inside", language: "javascript", in: "lodash@1 || || 2", wantHint: "not an npm version range"},
		{name: "npm tab in range", language: "javascript", in: "lodash@>=1\t<2", wantHint: "on one line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRequest(tt.language, tt.in)
			var rerr *RequestError
			if !errors.As(err, &rerr) {
				t.Fatalf("ParseRequest(%q, %q): got %#v, %v, want a *RequestError", tt.language, tt.in, got, err)
			}
			if rerr.Index != -1 || rerr.Request != tt.in {
				t.Errorf("ParseRequest(%q, %q): got Index %d, Request %q, want -1, %q", tt.language, tt.in, rerr.Index, rerr.Request, tt.in)
			}
			if !strings.Contains(rerr.Message, tt.wantHint) {
				t.Errorf("ParseRequest(%q, %q): got message %q, want it to contain %q", tt.language, tt.in, rerr.Message, tt.wantHint)
			}
		})
	}
}

func TestParseRequestLength(t *testing.T) {
	tests := []struct {
		name     string
		language string
		in       string
		wantOK   bool
	}{
		{name: "python 2", language: "python", in: "a>", wantOK: false},
		{name: "python 3", language: "python", in: "a>0", wantOK: true},
		{name: "python 214", language: "python", in: strings.Repeat("a", 209) + "==1.0", wantOK: true},
		{name: "python 215", language: "python", in: strings.Repeat("a", 210) + "==1.0", wantOK: false},
		{name: "npm 2", language: "javascript", in: "a@", wantOK: false},
		{name: "npm 3", language: "javascript", in: "a@1", wantOK: true},
		{name: "npm 214", language: "javascript", in: strings.Repeat("a", 212) + "@1", wantOK: true},
		{name: "npm 215", language: "javascript", in: strings.Repeat("a", 213) + "@1", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRequest(tt.language, tt.in)
			if gotOK := err == nil; gotOK != tt.wantOK {
				t.Fatalf("ParseRequest(%q, %d characters): got error %v, want ok %v", tt.language, len(tt.in), err, tt.wantOK)
			}
			if err != nil && !strings.Contains(err.Error(), "3 to 214 characters") {
				t.Errorf("ParseRequest(%q, %d characters): got %q, want a message giving the bounds", tt.language, len(tt.in), err)
			}
		})
	}
}

// TestParseRequestLengthCountsCodePoints checks the bound counts code points, not
// bytes: 200 two-byte characters are within it, and refused for another reason.
func TestParseRequestLengthCountsCodePoints(t *testing.T) {
	for _, language := range []string{"python", "javascript"} {
		in := strings.Repeat("é", 200)
		_, err := ParseRequest(language, in)
		if err == nil || strings.Contains(err.Error(), "characters long") {
			t.Errorf("ParseRequest(%q, 200 × é): got %v, want an error other than the length", language, err)
		}
		in = strings.Repeat("é", 215)
		_, err = ParseRequest(language, in)
		if err == nil || !strings.Contains(err.Error(), "is 215 characters long") {
			t.Errorf("ParseRequest(%q, 215 × é): got %v, want the length error counting 215", language, err)
		}
	}
}

func TestParseRequestUnknownLanguage(t *testing.T) {
	_, err := ParseRequest("ruby", "rails==7")
	var rerr *RequestError
	if err == nil || errors.As(err, &rerr) {
		t.Errorf("ParseRequest(ruby): got %v, want a plain error", err)
	}
}

func TestParseRequests(t *testing.T) {
	tests := []struct {
		name      string
		language  string
		in        []string
		wantNames []string
		wantIndex int    // of the RequestError; -1 when the list is accepted
		wantHint  string // in the message
	}{
		{name: "empty", language: "python", in: nil, wantNames: []string{}, wantIndex: -1},
		{name: "python list", language: "python", in: []string{"numpy==1.26.4", "pandas>=2,<3"}, wantNames: []string{"numpy", "pandas"}, wantIndex: -1},
		{name: "npm list", language: "javascript", in: []string{"lodash@*", "@types/node@20"}, wantNames: []string{"lodash", "@types/node"}, wantIndex: -1},
		{name: "python duplicate after normalising", language: "python", in: []string{"numpy==1", "pandas>=2", "NumPy>=1"}, wantIndex: 2, wantHint: "asks for numpy again (packages[0] is \"numpy==1\")"},
		{name: "python duplicate with extras", language: "python", in: []string{"httpx==0.27.0", "httpx[http2]==0.27.0"}, wantIndex: 1, wantHint: "request each package once"},
		{name: "npm duplicate", language: "javascript", in: []string{"lodash@4", "lodash@^4.17.0"}, wantIndex: 1, wantHint: "lodash@>=4 <5"},
		{name: "invalid names its index", language: "javascript", in: []string{"lodash@4", "react"}, wantIndex: 1, wantHint: "pin it as react@VERSION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRequests(tt.language, tt.in)
			if tt.wantIndex < 0 {
				if err != nil {
					t.Fatalf("ParseRequests(%q): got error %v, want none", tt.in, err)
				}
				names := []string{}
				for _, r := range got {
					names = append(names, r.Name)
				}
				if !reflect.DeepEqual(names, tt.wantNames) {
					t.Errorf("ParseRequests(%q): got names %q, want %q", tt.in, names, tt.wantNames)
				}
				return
			}
			var rerr *RequestError
			if !errors.As(err, &rerr) {
				t.Fatalf("ParseRequests(%q): got %v, %v, want a *RequestError", tt.in, got, err)
			}
			if rerr.Index != tt.wantIndex || rerr.Request != tt.in[tt.wantIndex] {
				t.Errorf("ParseRequests(%q): got index %d request %q, want %d %q", tt.in, rerr.Index, rerr.Request, tt.wantIndex, tt.in[tt.wantIndex])
			}
			if !strings.Contains(rerr.Message, tt.wantHint) {
				t.Errorf("ParseRequests(%q): got message %q, want it to contain %q", tt.in, rerr.Message, tt.wantHint)
			}
			if wantPrefix := fmt.Sprintf("packages[%d]: ", tt.wantIndex); !strings.HasPrefix(rerr.Error(), wantPrefix) {
				t.Errorf("ParseRequests(%q): got Error() %q, want it to start with %q", tt.in, rerr.Error(), wantPrefix)
			}
		})
	}
}
