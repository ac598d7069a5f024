package rootfs

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// status is a dpkg status file in the shape of a built JavaScript tree's: a removed
// python3 (config-files) must not count as installed.
const status = `Package: base-files
Status: install ok installed
Priority: required
Version: 12.4+deb12u10
Description: Debian base system miscellaneous files
 This package contains the basic filesystem hierarchy.

Package: nodejs
Status: install ok installed
Version: 18.20.4+dfsg-1~deb12u2
Depends: libc6 (>= 2.34), libnode108 (= 18.20.4+dfsg-1~deb12u2)

Package: libnode108
Status: install ok installed
Version: 18.20.4+dfsg-1~deb12u2

Package: node-acorn
Status: install ok installed

Package: python3
Status: deinstall ok config-files
Version: 3.11.2-1+b1
`

func TestInstalledPackages(t *testing.T) {
	got, err := installedPackages(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"base-files", "libnode108", "node-acorn", "nodejs"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestForeignPackages(t *testing.T) {
	tests := []struct {
		name      string
		lang      Language
		installed []string
		want      []string
	}{
		{"python tree clean", Python, []string{"base-files", "libpython3.11-stdlib", "python3", "python3.11-minimal"}, nil},
		{"python tree with node", Python, []string{"libnode108", "node-acorn", "nodejs", "python3"}, []string{"libnode108", "node-acorn", "nodejs"}},
		{"javascript tree clean", JavaScript, []string{"libnode108", "nodejs", "perl-base"}, nil},
		{"javascript tree with python", JavaScript, []string{"libpython3-stdlib", "nodejs", "python3", "python3-minimal", "python3.11"}, []string{"libpython3-stdlib", "python3", "python3-minimal", "python3.11"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := foreignPackages(tt.lang, tt.installed); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCheckExclusive(t *testing.T) {
	tests := []struct {
		name    string
		lang    Language
		status  string
		files   []string
		wantErr error
	}{
		{"javascript, python removed", JavaScript, status, []string{"usr/bin/node"}, nil},
		{"python tree holding nodejs", Python, status, []string{"usr/bin/python3"}, ErrForeignInterpreter},
		{"javascript tree with a stray python3 file", JavaScript, "Package: nodejs\nStatus: install ok installed\n", []string{"usr/bin/python3"}, ErrForeignInterpreter},
		{"python tree with a stray node link", Python, "Package: python3\nStatus: install ok installed\n", []string{"usr/bin/nodejs"}, ErrForeignInterpreter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			files := [][2]string{{"var/lib/dpkg/status", tt.status}}
			for _, f := range tt.files {
				files = append(files, [2]string{f, ""})
			}
			writeFiles(t, root, files)
			if err := checkExclusive(root, tt.lang); !errors.Is(err, tt.wantErr) {
				t.Errorf("got %v, want %v", err, tt.wantErr)
			}
		})
	}
	if err := checkExclusive(t.TempDir(), Python); err == nil {
		t.Error("no dpkg status: got no error, want one")
	}
}
