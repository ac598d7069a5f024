package rootfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ErrForeignInterpreter is returned by a build whose tree holds the other language's
// interpreter: a Python rootfs must not run node, nor a JavaScript one python3.
var ErrForeignInterpreter = errors.New("rootfs holds another language's interpreter")

// languagePackages are the Debian packages (by name prefix) that each language's
// rootfs must hold only for that language. Debian's nodejs depends on libnode and the
// node-* libraries libnode loads; python3 on python3.X, python3-minimal and
// libpython3*.
var languagePackages = map[Language][]string{
	Python:     {"python", "libpython"},
	JavaScript: {"nodejs", "libnode", "node-"},
}

// languageFiles are interpreter paths that must not exist in the other language's
// rootfs, checked whatever dpkg says (a file may come from outside a package).
var languageFiles = map[Language][]string{
	Python:     {"/usr/bin/python3", "/usr/bin/python", "/usr/local/bin/python3"},
	JavaScript: {"/usr/bin/node", "/usr/bin/nodejs", "/usr/local/bin/node"},
}

// otherLanguage is the language whose interpreter a lang rootfs must not have.
func otherLanguage(lang Language) Language {
	if lang == Python {
		return JavaScript
	}
	return Python
}

// installedPackages parses dpkg's status file and returns the names of the packages
// that are installed ("install ok installed"), sorted.
func installedPackages(r io.Reader) ([]string, error) {
	var out []string
	var name, status string
	flush := func() {
		if name != "" && strings.HasSuffix(status, " installed") {
			out = append(out, name)
		}
		name, status = "", ""
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			flush()
		case strings.HasPrefix(line, "Package:"):
			name = strings.TrimSpace(strings.TrimPrefix(line, "Package:"))
		case strings.HasPrefix(line, "Status:"):
			status = strings.TrimSpace(strings.TrimPrefix(line, "Status:"))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	flush()
	sort.Strings(out)
	return out, nil
}

// foreignPackages returns the installed packages that belong to the language other
// than lang.
func foreignPackages(lang Language, installed []string) []string {
	var bad []string
	for _, p := range installed {
		for _, prefix := range languagePackages[otherLanguage(lang)] {
			if strings.HasPrefix(p, prefix) {
				bad = append(bad, p)
				break
			}
		}
	}
	return bad
}

// checkExclusive fails with ErrForeignInterpreter when the tree at root holds the
// other language's packages (by dpkg's status) or interpreter files.
func checkExclusive(root string, lang Language) error {
	f, err := os.Open(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		return fmt.Errorf("reading the built tree's dpkg status: %w", err)
	}
	installed, err := installedPackages(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("parsing the built tree's dpkg status: %w", err)
	}
	if bad := foreignPackages(lang, installed); len(bad) > 0 {
		return fmt.Errorf("%w: the %s rootfs has %s installed (pulled in as a dependency?)", ErrForeignInterpreter, lang, strings.Join(bad, ", "))
	}
	for _, p := range languageFiles[otherLanguage(lang)] {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			return fmt.Errorf("%w: the %s rootfs has %s", ErrForeignInterpreter, lang, p)
		}
	}
	return nil
}
