package text

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc…"},
		{"ab€cd", 3, "ab…"}, // € is three bytes: not cut inside
		{"€€", 1, "…"},
	} {
		if got := Clip(tc.s, tc.n); got != tc.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestClipMiddle(t *testing.T) {
	got := ClipMiddle("ab€"+strings.Repeat("€", 100)+"yz", 100)
	if !utf8.ValidString(got) || !strings.HasPrefix(got, "ab€") || !strings.HasSuffix(got, "€yz") || len(got) > 100 {
		t.Errorf("got %q, want its ends kept, whole characters, at most 100 bytes", got)
	}
	if got := ClipMiddle(strings.Repeat("x", 1000), 100); len(got) > 100 || !strings.Contains(got, "bytes left out") {
		t.Errorf("got %q, want at most 100 bytes saying what was left out", got)
	}
	if got := ClipMiddle("short", 100); got != "short" {
		t.Errorf("got %q, want it whole", got)
	}
}
