package rootfs

import (
	"errors"
	"testing"
)

// fakeProvider answers with a root that names it.
type fakeProvider string

func (f fakeProvider) Name() string { return string(f) }

func (f fakeProvider) Root(lang Language) (*Root, error) {
	if _, err := ParseLanguage(string(lang)); err != nil {
		return nil, err
	}
	return &Root{Language: lang, Lower: string(f)}, nil
}

// TestMixed: each language gets its built root when it has one, the host's
// otherwise, and the name says which mix this is. No root needed.
func TestMixed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		built    []Language
		wantName string
		want     map[Language]string
	}{
		{"none built", nil, "host", map[Language]string{Python: "host", JavaScript: "host"}},
		{"python built", []Language{Python}, "host+built", map[Language]string{Python: "built", JavaScript: "host"}},
		{"all built", []Language{Python, JavaScript}, "built", map[Language]string{Python: "built", JavaScript: "built"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMixed(fakeProvider("host"), fakeProvider("built"), tc.built)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Name(); got != tc.wantName {
				t.Errorf("Name: got %q, want %q", got, tc.wantName)
			}
			for lang, want := range tc.want {
				r, err := m.Root(lang)
				if err != nil {
					t.Fatalf("Root(%s): %v", lang, err)
				}
				if r.Lower != want {
					t.Errorf("Root(%s): got the %s root, want the %s one", lang, r.Lower, want)
				}
			}
			if _, err := m.Root("ruby"); !errors.Is(err, ErrUnknownLanguage) {
				t.Errorf("Root(ruby): got %v, want ErrUnknownLanguage", err)
			}
		})
	}
	if _, err := NewMixed(fakeProvider("host"), nil, []Language{Python}); err == nil {
		t.Error("NewMixed with a built language and no built provider: got no error")
	}
}
