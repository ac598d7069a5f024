package rootfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFiles writes name → body under dir and returns the paths in the order given.
func writeFiles(t *testing.T, dir string, files [][2]string) []string {
	t.Helper()
	var paths []string
	for _, f := range files {
		p := filepath.Join(dir, f[0])
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f[1]), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

const deb822Bookworm = `Types: deb
# a comment inside the stanza
URIs: http://mirror.test/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.mirror.test/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`

func TestMirrorFromApt(t *testing.T) {
	tests := []struct {
		name    string
		files   [][2]string
		suite   string
		want    string
		wantErr error
	}{
		{
			name:  "deb822 entry carrying the suite",
			files: [][2]string{{"sources.list.d/debian.sources", deb822Bookworm}},
			suite: "bookworm",
			want:  "http://mirror.test/debian",
		},
		{
			name:  "deb822 security entry for its own suite",
			files: [][2]string{{"sources.list.d/debian.sources", deb822Bookworm}},
			suite: "bookworm-security",
			want:  "http://security.mirror.test/debian-security",
		},
		{
			name:  "deb822 other release falls back to the release mirror, not security",
			files: [][2]string{{"sources.list.d/debian.sources", deb822Bookworm}},
			suite: "trixie",
			want:  "http://mirror.test/debian",
		},
		{
			name: "deb822 deb-src, disabled and non-main stanzas skipped",
			files: [][2]string{{"sources.list.d/debian.sources", `Types: deb-src
URIs: http://src.mirror.test/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://disabled.mirror.test/debian
Suites: bookworm
Components: main
Enabled: no

Types: deb
URIs: http://contrib.mirror.test/debian
Suites: bookworm
Components: contrib non-free

Types: deb deb-src
URIs: http://mirror.test/debian/ http://second.mirror.test/debian
Suites:
 bookworm
Components: main contrib
`}},
			suite: "bookworm",
			want:  "http://mirror.test/debian",
		},
		{
			name: "one-line with options, deb-src and comments",
			files: [][2]string{{"sources.list", `# the release
deb-src http://src.mirror.test/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.test/debian bookworm main contrib # trailing
deb http://security.mirror.test/debian-security bookworm-security main
`}},
			suite: "bookworm",
			want:  "http://mirror.test/debian",
		},
		{
			name:  "one-line options with spaces inside the brackets",
			files: [][2]string{{"sources.list", "deb [ arch=amd64 trusted=no ] https://mirror.test/debian bookworm main\n"}},
			suite: "bookworm",
			want:  "https://mirror.test/debian",
		},
		{
			name: "sources.list first, then sources.list.d",
			files: [][2]string{
				{"sources.list", "deb http://first.mirror.test/debian bookworm main\n"},
				{"sources.list.d/debian.sources", deb822Bookworm},
			},
			suite: "bookworm",
			want:  "http://first.mirror.test/debian",
		},
		{
			name: "unusable scheme skipped",
			files: [][2]string{{"sources.list", `deb cdrom:[Debian GNU/Linux 12]/ bookworm main
deb file:/srv/mirror/debian bookworm main
`}},
			suite: "bookworm",
			want:  "file:/srv/mirror/debian",
		},
		{
			name:    "only deb-src",
			files:   [][2]string{{"sources.list", "deb-src http://src.mirror.test/debian bookworm main\n"}},
			suite:   "bookworm",
			wantErr: ErrNoMirror,
		},
		{
			name:    "only other repositories",
			files:   [][2]string{{"sources.list", "deb https://vendor.test/apt cloud-sdk-bookworm main\n"}},
			suite:   "bookworm",
			wantErr: ErrNoMirror,
		},
		{
			name:    "empty file",
			files:   [][2]string{{"sources.list.d/debian.sources", "# nothing\n"}},
			suite:   "bookworm",
			wantErr: ErrNoMirror,
		},
		{
			name:    "no files",
			suite:   "bookworm",
			wantErr: ErrNoMirror,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			got, err := mirrorFromApt(tt.suite, hostAptFiles(dir))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %q, %v; want error %v", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAptParseErrors(t *testing.T) {
	tests := []struct {
		name, file, body, wantIn string
	}{
		{"deb822 line without colon", "x.sources", "Types deb\n", "not a \"Field: value\" line"},
		{"deb822 continuation first", "x.sources", " bookworm\n", "continuation line"},
		{"one-line unclosed options", "x.list", "deb [arch=amd64 http://mirror.test/debian bookworm main\n", "unclosed"},
		{"one-line no suite", "x.list", "deb http://mirror.test/debian\n", "no URI and suite"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			paths := writeFiles(t, t.TempDir(), [][2]string{{tt.file, tt.body}})
			_, err := mirrorFromApt("bookworm", paths)
			if err == nil || !strings.Contains(err.Error(), tt.wantIn) || !strings.Contains(err.Error(), paths[0]) {
				t.Errorf("got error %v, want one naming %s and saying %q", err, paths[0], tt.wantIn)
			}
		})
	}
}

func TestHostAptFiles(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, [][2]string{
		{"sources.list.d/z.list", ""},
		{"sources.list.d/a.sources", ""},
		{"sources.list.d/vendor.list.disabled", ""},
		{"sources.list.d/notes.txt", ""},
		{"sources.list", ""},
	})
	var got []string
	for _, p := range hostAptFiles(dir) {
		got = append(got, strings.TrimPrefix(p, dir+"/"))
	}
	want := "sources.list sources.list.d/a.sources sources.list.d/z.list"
	if strings.Join(got, " ") != want {
		t.Errorf("got %v, want %s", got, want)
	}
}

func TestSuiteFromOSRelease(t *testing.T) {
	tests := []struct {
		name, body, want string
		wantErr          bool
	}{
		{"debian", "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\nID=debian\n", "bookworm", false},
		{"quoted", "VERSION_CODENAME=\"trixie\"\n", "trixie", false},
		{"missing", "ID=debian\n", "", true},
		{"empty", "VERSION_CODENAME=\n", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFiles(t, t.TempDir(), [][2]string{{"os-release", tt.body}})[0]
			got, err := suiteFromOSRelease(p)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("got %q, %v; want %q (error: %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
