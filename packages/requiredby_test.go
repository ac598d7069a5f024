package packages

import (
	"reflect"
	"testing"
)

// TestPythonRequiredBy: pip's report of what each package requires names, for
// each dependency, the requests that pulled it in, through dependencies of
// dependencies; a requirement of an extra counts only when the package was
// installed with that extra (by a request, or by another requirement), and one
// on a package not installed is no edge. A dependency reached through another
// request is that request's alone.
func TestPythonRequiredBy(t *testing.T) {
	set := Set{Language: "python", Requests: mustRequests(t, "python", "App[Fast]>=1", "tool==2")}
	r := &driverResult{Packages: []driverPackage{
		{Name: "app", Version: "1.0", Extras: []string{"fast"},
			Requires: []string{"Mid_Lib>=1", "speedups; extra == 'fast'", "docs-theme; extra == \"docs\"", "absent>=1; python_version < '3'", "tool>=1"}},
		{Name: "mid.lib", Version: "1.0", Requires: []string{"leaf[Extra_One] (>=2)", "six"}},
		{Name: "leaf", Version: "2.0", Requires: []string{"by-extra; extra == 'extra-one'"}},
		{Name: "by-extra", Version: "1.0"},
		{Name: "speedups", Version: "1.0"},
		{Name: "docs-theme", Version: "1.0"},
		{Name: "tool", Version: "2", Requires: []string{"six>=1.10", "tool-only"}},
		{Name: "tool-only", Version: "1"},
		{Name: "six", Version: "1.16.0"},
	}}
	got, err := pythonResolved(set, r, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"app": nil, "tool": nil,
		"mid-lib": {"app"}, "leaf": {"app"}, "speedups": {"app"},
		"by-extra":   {"app"}, // leaf's extra, which mid.lib asks for
		"docs-theme": nil,     // its extra was not asked for (another package may need it)
		"six":        {"app", "tool"},
		"tool-only":  {"tool"}, // app needs it through tool, a request named for its own
	}
	for _, p := range got {
		if !reflect.DeepEqual(p.RequiredBy, want[p.Name]) {
			t.Errorf("%s: required by %q, want %q", p.Name, p.RequiredBy, want[p.Name])
		}
	}
}

// TestNpmRequiredBy: a name is found as Node finds it, nested first, then in
// each package the requiring one is nested in, then at the top.
func TestNpmRequiredBy(t *testing.T) {
	set := Set{Language: "javascript", Requests: mustRequests(t, "javascript", "app@^1", "@s/tool@2")}
	r := &driverResult{Packages: []driverPackage{
		{Name: "app", Version: "1.0.0", Path: "node_modules/app", Requires: []string{"dep", "shared"}},
		{Name: "dep", Version: "1.0.0", Path: "node_modules/app/node_modules/dep", Requires: []string{"shared", "@s/util"}},
		{Name: "shared", Version: "1.0.0", Path: "node_modules/app/node_modules/shared"},
		{Name: "@s/util", Version: "1.0.0", Path: "node_modules/@s/util"},
		{Name: "@s/tool", Version: "2.0.0", Path: "node_modules/@s/tool", Requires: []string{"shared", "dep"}},
		{Name: "shared", Version: "2.0.0", Path: "node_modules/shared"},
		{Name: "dep", Version: "3.0.0", Path: "node_modules/dep"},
	}}
	got, err := npmResolved(set, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"app@1.0.0": nil, "@s/tool@2.0.0": nil,
		"dep@1.0.0":     {"app"},
		"shared@1.0.0":  {"app"},
		"@s/util@1.0.0": {"app"},
		"shared@2.0.0":  {"@s/tool"},
		"dep@3.0.0":     {"@s/tool"},
	}
	for _, p := range got {
		if k := p.Name + "@" + p.Version; !reflect.DeepEqual(p.RequiredBy, want[k]) {
			t.Errorf("%s: required by %q, want %q", k, p.RequiredBy, want[k])
		}
	}
}

func TestRequestList(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{{nil, ""}, {[]string{"a"}, "a"}, {[]string{"a", "b"}, "a and b"}, {[]string{"a", "b", "c"}, "a, b and c"}} {
		if got := requestList(tc.in); got != tc.want {
			t.Errorf("requestList(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
