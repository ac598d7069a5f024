package rootfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The host files a build reads its defaults from. No mirror host name is written in
// brig: the Debian mirror is the one the host's own apt uses.
const (
	hostAptDir    = "/etc/apt"
	hostOSRelease = "/etc/os-release"
)

// ErrNoMirror is returned when neither an option nor the host's apt configuration
// names a usable Debian mirror.
var ErrNoMirror = errors.New("no Debian mirror found")

// aptSource is one entry of apt's configuration: a deb822 stanza or a one-line
// "deb" line.
type aptSource struct {
	Types      []string // "deb", "deb-src"
	URIs       []string
	Suites     []string
	Components []string
	Enabled    bool
	File       string // where it was read, for errors
}

func (s aptSource) has(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// hostAptFiles lists the files apt reads under etcApt (normally /etc/apt), in apt's
// order: sources.list, then sources.list.d/*.list and *.sources sorted by name. Files
// apt ignores (other suffixes, such as ".disabled") are left out.
func hostAptFiles(etcApt string) []string {
	var files []string
	if _, err := os.Stat(filepath.Join(etcApt, "sources.list")); err == nil {
		files = append(files, filepath.Join(etcApt, "sources.list"))
	}
	ents, _ := os.ReadDir(filepath.Join(etcApt, "sources.list.d"))
	var names []string
	for _, e := range ents {
		if n := e.Name(); !e.IsDir() && (strings.HasSuffix(n, ".list") || strings.HasSuffix(n, ".sources")) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		files = append(files, filepath.Join(etcApt, "sources.list.d", n))
	}
	return files
}

// readAptFiles parses each file by its suffix: deb822 for ".sources", one-line for
// the rest.
func readAptFiles(paths []string) ([]aptSource, error) {
	var all []aptSource
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("reading apt sources %q: %w", p, err)
		}
		var srcs []aptSource
		if strings.HasSuffix(p, ".sources") {
			srcs, err = parseDeb822Sources(io.LimitReader(f, 1<<20))
		} else {
			srcs, err = parseOneLineSources(io.LimitReader(f, 1<<20))
		}
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("parsing apt sources %q: %w", p, err)
		}
		for i := range srcs {
			srcs[i].File = p
		}
		all = append(all, srcs...)
	}
	return all, nil
}

// parseDeb822Sources reads the deb822 format of sources.list(5): stanzas separated
// by blank lines, "Field: value" lines, continuation lines starting with a space,
// "#" comments.
func parseDeb822Sources(r io.Reader) ([]aptSource, error) {
	var out []aptSource
	fields := map[string]string{}
	last := ""
	flush := func() {
		if len(fields) == 0 {
			return
		}
		s := aptSource{
			Types:      strings.Fields(fields["types"]),
			URIs:       strings.Fields(fields["uris"]),
			Suites:     strings.Fields(fields["suites"]),
			Components: strings.Fields(fields["components"]),
			Enabled:    !strings.EqualFold(strings.TrimSpace(fields["enabled"]), "no"),
		}
		out = append(out, s)
		fields = map[string]string{}
		last = ""
	}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
			continue
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] == ' ' || line[0] == '\t':
			if last == "" {
				return nil, fmt.Errorf("line %d: continuation line outside a field", n)
			}
			fields[last] += " " + strings.TrimSpace(line)
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				return nil, fmt.Errorf("line %d: %q is not a \"Field: value\" line", n, line)
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	flush()
	return out, nil
}

// parseOneLineSources reads the one-line format: "deb [options] uri suite
// component...", with "#" comments.
func parseOneLineSources(r io.Reader) ([]aptSource, error) {
	var out []aptSource
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		typ, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		if strings.HasPrefix(rest, "[") {
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return nil, fmt.Errorf("line %d: unclosed \"[\" in %q", n, line)
			}
			rest = rest[end+1:]
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: %q has no URI and suite", n, line)
		}
		out = append(out, aptSource{
			Types:      []string{typ},
			URIs:       f[:1],
			Suites:     f[1:2],
			Components: f[2:],
			Enabled:    true,
		})
	}
	return out, sc.Err()
}

// chooseMirror picks the Debian mirror from apt's entries: the first URI of the first
// enabled "deb" entry with component main whose suites include suite. When no entry
// carries suite (an option asked for another release than the host's), it takes the
// first such entry that has a plain release suite, one without a "-updates" or
// "-security" part, since those are served from the release's mirror.
func chooseMirror(srcs []aptSource, suite string) (string, error) {
	usable := func(s aptSource) bool {
		if !s.Enabled || !s.has(s.Types, "deb") || !s.has(s.Components, "main") || len(s.URIs) == 0 {
			return false
		}
		return validMirror(s.URIs[0]) == nil
	}
	for _, s := range srcs {
		if usable(s) && s.has(s.Suites, suite) {
			return strings.TrimRight(s.URIs[0], "/"), nil
		}
	}
	for _, s := range srcs {
		if !usable(s) {
			continue
		}
		for _, su := range s.Suites {
			if !strings.Contains(su, "-") && !strings.Contains(su, "/") {
				return strings.TrimRight(s.URIs[0], "/"), nil
			}
		}
	}
	return "", fmt.Errorf("%w: no enabled \"deb\" entry with component main for suite %q", ErrNoMirror, suite)
}

// validMirror accepts the URL schemes debootstrap fetches from.
func validMirror(m string) error {
	u, err := url.Parse(m)
	if err != nil {
		return fmt.Errorf("mirror %q: %w", m, err)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return fmt.Errorf("mirror %q has no host", m)
		}
	case "file":
		if u.Path == "" {
			return fmt.Errorf("mirror %q has no path", m)
		}
	default:
		return fmt.Errorf("mirror %q: debootstrap fetches only http, https and file URLs", m)
	}
	return nil
}

// mirrorFromApt reads the apt files and chooses the mirror for suite.
func mirrorFromApt(suite string, files []string) (string, error) {
	if len(files) == 0 {
		return "", fmt.Errorf("%w: no apt sources files (set the mirror explicitly)", ErrNoMirror)
	}
	srcs, err := readAptFiles(files)
	if err != nil {
		return "", err
	}
	m, err := chooseMirror(srcs, suite)
	if err != nil {
		return "", fmt.Errorf("%w in %s (set the mirror explicitly)", err, strings.Join(files, ", "))
	}
	return m, nil
}

// suiteFromOSRelease returns VERSION_CODENAME from an os-release(5) file.
func suiteFromOSRelease(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("reading %q: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && k == "VERSION_CODENAME" {
			v = strings.Trim(v, `"'`)
			if v == "" {
				break
			}
			return v, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading %q: %w", path, err)
	}
	return "", fmt.Errorf("%q has no VERSION_CODENAME (set the suite explicitly)", path)
}
