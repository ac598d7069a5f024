package packages

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/egress"
)

func TestRegistryHostsOf(t *testing.T) {
	tests := []struct {
		name     string
		urls     []string
		want     []string
		wantHint string // a piece of the error; "" when it passes
	}{
		{name: "none", urls: nil, want: []string{}},
		{name: "one", urls: []string{"https://registry.test/"}, want: []string{"registry.test"}},
		{name: "path and port", urls: []string{"http://Mirror.Example.TEST:8080/py/simple"}, want: []string{"mirror.example.test"}},
		{name: "sorted without duplicates", urls: []string{"https://files.test/", "https://registry.test/a", "https://registry.test/b"}, want: []string{"files.test", "registry.test"}},
		{name: "user info", urls: []string{"https://user:secret@registry.test/"}, want: []string{"registry.test"}},
		{name: "not http", urls: []string{"ftp://registry.test/"}, wantHint: "http or https"},
		{name: "no scheme", urls: []string{"registry.test"}, wantHint: "http or https"},
		{name: "IP address", urls: []string{"http://10.0.0.5:8080/simple"}, wantHint: "IP address"},
		{name: "IPv6 address", urls: []string{"http://[fd00::1]/simple"}, wantHint: "IP address"},
		{name: "single label", urls: []string{"http://mirror/simple"}, wantHint: "full host name"},
		{name: "unparsable", urls: []string{"https://registry.test/%zz"}, wantHint: "invalid URL escape"},
		{name: "password not shown", urls: []string{"ftp://user:secret@registry.test/"}, wantHint: "user:xxxxx@"},
		// As written: Redacted escaped it ("not%20a%20url").
		{name: "spaces shown as written", urls: []string{"not a url"}, wantHint: `"not a url": give an http or https URL`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RegistryHostsOf(tt.urls)
			if tt.wantHint != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantHint) {
					t.Fatalf("RegistryHostsOf(%q): got %v, %v, want an error containing %q", tt.urls, got, err, tt.wantHint)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("RegistryHostsOf(%q): got %q, %v, want %q", tt.urls, got, err, tt.want)
			}
		})
	}
}

func TestPipSettingsURLs(t *testing.T) {
	const def = "https://index.test/simple"
	tests := []struct {
		name string
		ps   pipSettings
		want []string
	}{
		{
			name: "built-in index brings its file host",
			ps:   pipSettings{Pip: true, IndexURL: def, DefaultIndex: def, FileHost: "files.test"},
			want: []string{def, "https://files.test/"},
		},
		{
			name: "built-in index written with a slash",
			ps:   pipSettings{Pip: true, IndexURL: def + "/", DefaultIndex: def, FileHost: "files.test"},
			want: []string{def + "/", "https://files.test/"},
		},
		{
			name: "a mirror does not bring the built-in file host",
			ps:   pipSettings{Pip: true, IndexURL: "https://mirror.test/simple", DefaultIndex: def, FileHost: "files.test"},
			want: []string{"https://mirror.test/simple"},
		},
		{
			name: "extra indexes and find-links URLs, not directories",
			ps: pipSettings{Pip: true, IndexURL: "https://mirror.test/simple", DefaultIndex: def, FileHost: "files.test",
				ExtraIndexURLs: []string{"https://extra.test/simple"}, FindLinks: []string{"/opt/wheels", "https://links.test/wheels/", "file:///x"}},
			want: []string{"https://mirror.test/simple", "https://extra.test/simple", "https://links.test/wheels/"},
		},
		{
			name: "no index: find-links only",
			ps:   pipSettings{Pip: true, NoIndex: true, IndexURL: def, DefaultIndex: def, FileHost: "files.test", FindLinks: []string{"http://links.test/"}},
			want: []string{"http://links.test/"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.ps.urls(); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// fakeManager writes an executable shell script that stands for npm or python3.
func fakeManager(t *testing.T, name, script string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestManagersRegistryHosts(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	pipJSON := `{"pip": true, "version": "99", "index_url": "https://index.test/simple", "extra_index_urls": ["https://extra.test/"], "find_links": [], "no_index": false, "default_index": "https://index.test/simple", "file_host": "files.test"}`
	tests := []struct {
		name       string
		m          Managers
		language   string
		configured []string
		want       []string
		wantErr    error  // errors.Is
		wantHint   string // a piece of the error
	}{
		{
			name: "npm's registry", language: "javascript",
			m:    Managers{Npm: fakeManager(t, "npm", `[ "$*" = "config get registry" ] && echo https://Registry.test/ || exit 3`)},
			want: []string{"registry.test"},
		},
		{
			name: "configured URLs, npm not asked", language: "javascript",
			m:          Managers{Npm: fakeManager(t, "npm", "exit 1")},
			configured: []string{"https://registry.test/", "https://mirror.test/npm/"},
			want:       []string{"mirror.test", "registry.test"},
		},
		{
			name: "no npm", language: "javascript", m: Managers{Npm: missing},
			wantErr: ErrNoManager,
		},
		{
			name: "npm without a registry", language: "javascript",
			m:        Managers{Npm: fakeManager(t, "npm", "echo undefined")},
			wantHint: "not a URL",
		},
		{
			name: "npm fails", language: "javascript",
			m:        Managers{Npm: fakeManager(t, "npm", "echo broken >&2; exit 2")},
			wantHint: "broken",
		},
		{
			name: "npm hangs", language: "javascript",
			m:        Managers{Npm: fakeManager(t, "npm", "exec sleep 60"), Timeout: 50 * time.Millisecond},
			wantHint: "no answer within 50ms",
		},
		{
			name: "pip's index, its file host and the extra index", language: "python",
			m:    Managers{Python: fakeManager(t, "python3", `[ "$1" = "-c" ] && echo 'a line from a site hook' && echo '`+pipJSON+`'`)},
			want: []string{"extra.test", "files.test", "index.test"},
		},
		{
			name: "configured URLs, pip not asked", language: "python",
			m:          Managers{Python: missing},
			configured: []string{"https://registry.test/simple", "https://files.test/"},
			want:       []string{"files.test", "registry.test"},
		},
		{
			name: "a Python without pip", language: "python",
			m:       Managers{Python: fakeManager(t, "python3", `echo '{"pip": false}'`)},
			wantErr: ErrNoManager,
		},
		{
			name: "no Python", language: "python", m: Managers{Python: missing},
			wantErr: ErrNoManager,
		},
		{
			name: "pip prints nonsense", language: "python",
			m:        Managers{Python: fakeManager(t, "python3", "echo nonsense")},
			wantHint: "not its settings",
		},
		{
			name: "pip's index is an IP address", language: "python",
			m:        Managers{Python: fakeManager(t, "python3", `echo '{"pip": true, "index_url": "http://192.0.2.1/simple"}'`)},
			wantHint: "IP address",
		},
		{name: "unknown language", language: "ruby", wantHint: "unknown language"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.m.RegistryHosts(context.Background(), tt.language, tt.configured)
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %q, %v, want %v", got, err, tt.wantErr)
				}
			case tt.wantHint != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantHint) {
					t.Fatalf("got %q, %v, want an error containing %q", got, err, tt.wantHint)
				}
			default:
				if err != nil || !slices.Equal(got, tt.want) {
					t.Fatalf("got %q, %v, want %q", got, err, tt.want)
				}
			}
		})
	}
}

// The probe runs against the host's own pip and npm, when they are installed:
// their answers must be registry host names. Nothing is fetched; the names are
// not written here.
func TestRegistryPortsOf(t *testing.T) {
	for _, tt := range []struct {
		urls []string
		want []int
	}{
		{nil, []int{80, 443}},
		{[]string{"https://registry.example/simple/", "http://files.example/"}, []int{80, 443}},
		{[]string{"https://mirror.example:8443/simple/", "http://mirror.example:3141/", "https://x.example:443/"}, []int{80, 443, 3141, 8443}},
		{[]string{"http://bad.example:0/", "http://bad.example:99999/", "::not a url"}, []int{80, 443}},
	} {
		if got := RegistryPortsOf(tt.urls); !slices.Equal(got, tt.want) {
			t.Errorf("RegistryPortsOf(%q): got %v, want %v", tt.urls, got, tt.want)
		}
	}
}

func TestRegistryHostsOfThisHost(t *testing.T) {
	for _, lang := range []string{"python", "javascript"} {
		t.Run(lang, func(t *testing.T) {
			hosts, err := Managers{}.RegistryHosts(context.Background(), lang, nil)
			if errors.Is(err, ErrNoManager) {
				t.Skipf("this host has no package manager for %s: %v", lang, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(hosts) == 0 {
				t.Fatalf("got no registry host, want at least one")
			}
			for _, h := range hosts {
				if got, err := egress.ParseDomain(h); err != nil || got != h {
					t.Errorf("host %q: got %q, %v from ParseDomain, want it unchanged", h, got, err)
				}
			}
		})
	}
}
