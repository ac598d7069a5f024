package packages

import "testing"

func TestCanonicalPEP440(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // "" when in is not a PEP 440 version
	}{
		{name: "plain", in: "1.26.4", want: "1.26.4"},
		{name: "trailing zeros", in: "1.2.0.0", want: "1.2"},
		{name: "zero", in: "0.0", want: "0"},
		{name: "inner zero kept", in: "1.0.1", want: "1.0.1"},
		{name: "leading zeros", in: "01.002", want: "1.2"},
		{name: "v prefix and case", in: "V1.0RC1", want: "1rc1"},
		{name: "epoch", in: "1!2.0", want: "1!2"},
		{name: "epoch zero", in: "0!2.0", want: "2"},
		{name: "alpha spelling", in: "1.0-alpha.1", want: "1a1"},
		{name: "beta without a number", in: "1.0beta", want: "1b0"},
		{name: "c is rc", in: "1.0c2", want: "1rc2"},
		{name: "preview is rc", in: "1.0.preview3", want: "1rc3"},
		{name: "implicit post", in: "1.0-1", want: "1.post1"},
		{name: "rev is post", in: "1.0_rev2", want: "1.post2"},
		{name: "dev", in: "1.0.dev", want: "1.dev0"},
		{name: "everything", in: "2!1.2.0a3.post4.dev5+Ubuntu-01_x", want: "2!1.2a3.post4.dev5+ubuntu.1.x"},
		{name: "not a version", in: "latest"},
		{name: "wildcard", in: "1.*"},
		{name: "empty local", in: "1.0+"},
		{name: "space", in: "1.0 "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := canonicalPEP440(tt.in)
			if ok != (tt.want != "") || got != tt.want {
				t.Fatalf("canonicalPEP440(%q): got %q, %v, want %q", tt.in, got, ok, tt.want)
			}
		})
	}
}

func TestSameVersion(t *testing.T) {
	tests := []struct {
		name     string
		language string
		a, b     string
		want     bool
	}{
		{name: "pep440 zero padding", language: "python", a: "1.2", b: "1.2.0", want: true},
		{name: "pep440 spelling", language: "python", a: "1.0alpha1", b: "1.0.0a1", want: true},
		{name: "pep440 post spelling", language: "python", a: "1.0-post1", b: "1.0.post1", want: true},
		{name: "pep440 local case", language: "python", a: "2.1+CPU", b: "2.1.0+cpu", want: true},
		{name: "pep440 another release", language: "python", a: "1.2", b: "1.2.1", want: false},
		{name: "pep440 local is another version", language: "python", a: "1.2", b: "1.2+cpu", want: false},
		{name: "pep440 prerelease", language: "python", a: "1.2", b: "1.2rc1", want: false},
		{name: "pep440 arbitrary string", language: "python", a: "Foo-Bar", b: "foo-bar", want: true},
		{name: "pep440 arbitrary string against a version", language: "python", a: "1.2-weird+x!", b: "1.2", want: false},
		{name: "semver equal", language: "javascript", a: "1.3.0", b: "1.3.0", want: true},
		{name: "semver build aside", language: "javascript", a: "1.3.0+a", b: "1.3.0+b", want: true},
		{name: "semver no padding", language: "javascript", a: "1.3", b: "1.3.0", want: false},
		{name: "semver prerelease", language: "javascript", a: "1.3.0-rc.1", b: "1.3.0", want: false},
		{name: "semver prerelease case", language: "javascript", a: "1.3.0-RC.1", b: "1.3.0-rc.1", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sameVersion(tt.language, tt.a, tt.b); got != tt.want {
				t.Fatalf("sameVersion(%q, %q, %q): got %v, want %v", tt.language, tt.a, tt.b, got, tt.want)
			}
			if got := sameVersion(tt.language, tt.b, tt.a); got != tt.want {
				t.Fatalf("sameVersion(%q, %q, %q): got %v, want %v", tt.language, tt.b, tt.a, got, tt.want)
			}
		})
	}
}

// TestNormalPEP440 holds what pip's vendored packaging (23.0) prints for each
// version: str(Version(in)), which "===" compares.
func TestNormalPEP440(t *testing.T) {
	for in, want := range map[string]string{
		"1.0.0":                "1.0.0",
		"01.002.0":             "1.2.0",
		"1.0-1":                "1.0.post1",
		"V1.0RC1":              "1.0rc1",
		"0!2.0":                "2.0",
		"1.0.dev":              "1.0.dev0",
		"2!1.2.0a3.post4.dev5": "2!1.2.0a3.post4.dev5",
		"latest":               "",
	} {
		got, ok := normalPEP440(in)
		if ok != (want != "") || got != want {
			t.Errorf("normalPEP440(%q): got %q, %v, want %q", in, got, ok, want)
		}
	}
}
