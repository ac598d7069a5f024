package packages

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/brig-sandbox/brig/egress"
)

// Where the package managers are looked for, and how long each may take to say
// where its registry is. No registry is named here: the managers say.
const (
	DefaultNpm             = "/usr/bin/npm"
	DefaultPython          = "/usr/bin/python3"
	DefaultRegistryTimeout = 10 * time.Second
)

// ErrNoManager is returned (wrapped) by RegistryHosts when the language's
// package manager is not installed (no npm, or a Python without pip): the
// language then has no registry, and a `registries` network admits nothing for
// it.
var ErrNoManager = errors.New("the package manager is not installed")

// Managers are the package managers whose own settings say where a language's
// packages come from: those brig's installers run.
type Managers struct {
	// Npm is the npm executable; empty means DefaultNpm.
	Npm string
	// Python is the interpreter whose pip is asked; empty means DefaultPython.
	Python string
	// Timeout bounds each manager's answer; zero means DefaultRegistryTimeout.
	Timeout time.Duration
}

// RegistryHosts returns the host names of the package registries of language
// ("python" or "javascript"), normalised as egress.ParseDomain does, sorted and
// without duplicates. configured are the operator's registry URLs for the
// language; when there are none, the package manager is asked at run time:
// npm's `registry` setting, and pip's index URL, extra index URLs and
// find-links URLs as pip resolves them from its config files and PIP_*
// variables, plus pip's own file host when the index is pip's built-in default.
//
// The managers run with the service's environment, as brig's installers do, so
// that an operator's settings (npmrc, pip.conf, PIP_INDEX_URL) count; a clean
// HOME would silently skip a mirror set up for root. It is meant to be called
// once at the service's start, not per run: each call runs a process.
func (m Managers) RegistryHosts(ctx context.Context, language string, configured []string) ([]string, error) {
	r, err := m.Registry(ctx, language, configured)
	return r.Hosts, err
}

// Registry is where a language's packages come from.
type Registry struct {
	// Indexes are the URLs brig's installer gives the package manager, in
	// order: for Python the index, then the extra indexes; for JavaScript the
	// npm registry.
	Indexes []string
	// Hosts are the host names network mode registries admits: the indexes'
	// and the hosts the indexes send files from (see RegistryHosts).
	Hosts []string
	// Ports are the ports network mode registries admits on them: 80, 443
	// and any other a registry URL names (RegistryPortsOf).
	Ports []int
}

// Registry reads the registry of language as RegistryHosts does, with the
// installer's URLs besides the hosts.
func (m Managers) Registry(ctx context.Context, language string, configured []string) (Registry, error) {
	indexes, all := configured, configured
	if len(configured) == 0 {
		switch language {
		case languagePython:
			ps, err := m.pipSettings(ctx)
			if err != nil {
				return Registry{}, err
			}
			if !ps.NoIndex && ps.IndexURL != "" {
				indexes = append([]string{ps.IndexURL}, ps.ExtraIndexURLs...)
			}
			all = ps.urls()
		case languageJavaScript:
			urls, err := m.npmRegistry(ctx)
			if err != nil {
				return Registry{}, err
			}
			indexes, all = urls, urls
		default:
			return Registry{}, fmt.Errorf("reading the registries: unknown language %q (want %s or %s)", language, languagePython, languageJavaScript)
		}
	}
	hosts, err := RegistryHostsOf(all)
	if err != nil {
		return Registry{}, err
	}
	return Registry{Indexes: indexes, Hosts: hosts, Ports: RegistryPortsOf(all)}, nil
}

// RegistryPortsOf returns the ports network mode registries admits on the
// registry hosts of urls: the web's, 80 and 443 (a package manager follows
// an index to its files, and redirects, on either), and any other port a URL
// names, sorted. Not every port: a registry host may be a mirror that serves
// more than packages. A URL RegistryHostsOf refuses adds nothing. It is pure.
func RegistryPortsOf(urls []string) []int {
	ports := []int{80, 443}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Port() == "" {
			continue
		}
		if n, err := strconv.Atoi(u.Port()); err == nil && n >= 1 && n <= 65535 {
			ports = append(ports, n)
		}
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}

// shown is a registry URL as its messages give it: as written, or without its
// password where it has one (Redacted also escapes what it keeps, so that "not
// a url" read "not%20a%20url").
func shown(raw string, u *url.URL) string {
	if _, has := u.User.Password(); has {
		return u.Redacted()
	}
	return raw
}

// RegistryHostsOf returns the host names of registry URLs (http or https, with
// a host name: an IP address can't be admitted by name), normalised, sorted and
// without duplicates. It is pure.
func RegistryHostsOf(urls []string) ([]string, error) {
	hosts := []string{}
	for i, raw := range urls {
		// The messages show a URL without its password: a registry URL may
		// carry credentials, and these errors are logged.
		u, err := url.Parse(raw)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, fmt.Errorf("registry URL %d: %w", i+1, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return nil, fmt.Errorf("registry URL %q: give an http or https URL, such as https://registry.example/", shown(raw, u))
		}
		host, err := egress.ParseDomain(u.Hostname())
		if err != nil {
			return nil, fmt.Errorf("registry URL %q: %w", shown(raw, u), err)
		}
		hosts = append(hosts, host)
	}
	slices.Sort(hosts)
	return slices.Compact(hosts), nil
}

func (m Managers) timeout() time.Duration {
	if m.Timeout > 0 {
		return m.Timeout
	}
	return DefaultRegistryTimeout
}

// output runs a manager and returns its standard output. A manager that is not
// there is ErrNoManager.
func (m Managers) output(ctx context.Context, name string, args ...string) ([]byte, error) {
	if _, err := os.Stat(name); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", name, ErrNoManager)
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout())
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	// npm checks for a newer npm when it runs; asking where the registry is must
	// not reach it.
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false", "NO_UPDATE_NOTIFIER=1", "PIP_DISABLE_PIP_VERSION_CHECK=1")
	cmd.WaitDelay = time.Second // a child that keeps the pipes open can't hold the start
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("running %s %s: no answer within %s", name, strings.Join(args, " "), m.timeout())
	}
	if err != nil {
		return nil, fmt.Errorf("running %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func (m Managers) npmRegistry(ctx context.Context) ([]string, error) {
	npm := m.Npm
	if npm == "" {
		npm = DefaultNpm
	}
	out, err := m.output(ctx, npm, "config", "get", "registry")
	if err != nil {
		return nil, fmt.Errorf("reading npm's registry: %w", err)
	}
	u := strings.TrimSpace(string(out))
	if u == "" || u == "undefined" || u == "null" {
		return nil, fmt.Errorf("reading npm's registry: `%s config get registry` gave %q, not a URL (Hint: set it in the config, [egress.registries] javascript)", npm, u)
	}
	return []string{u}, nil
}

// pipProbe prints, as one JSON object, the indexes pip install would use here:
// pip's own option parser reads its config files and PIP_* variables, so the
// precedence is pip's. A Python without pip prints {"pip": false}.
const pipProbe = `import json, sys
try:
    import pip
except ImportError:
    print(json.dumps({"pip": False}))
    sys.exit(0)
from pip._internal.commands import create_command
from pip._internal.models.index import PyPI
opts, _ = create_command("install").parse_args([])
print(json.dumps({"pip": True, "version": pip.__version__, "index_url": opts.index_url,
    "extra_index_urls": opts.extra_index_urls, "find_links": opts.find_links,
    "no_index": opts.no_index, "default_index": PyPI.simple_url, "file_host": PyPI.file_storage_domain}))
`

// pipSettings is what pipProbe prints.
type pipSettings struct {
	Pip            bool     `json:"pip"`
	Version        string   `json:"version"`
	IndexURL       string   `json:"index_url"`
	ExtraIndexURLs []string `json:"extra_index_urls"`
	FindLinks      []string `json:"find_links"`
	NoIndex        bool     `json:"no_index"`
	DefaultIndex   string   `json:"default_index"`
	FileHost       string   `json:"file_host"`
}

func (m Managers) pipSettings(ctx context.Context) (pipSettings, error) {
	python := m.Python
	if python == "" {
		python = DefaultPython
	}
	var ps pipSettings
	out, err := m.output(ctx, python, "-c", pipProbe)
	if err != nil {
		return ps, fmt.Errorf("reading pip's index: %w", err)
	}
	if err := json.Unmarshal(lastLine(out), &ps); err != nil {
		return ps, fmt.Errorf("reading pip's index: %s printed %q, not its settings: %w", python, out, err)
	}
	if !ps.Pip {
		return ps, fmt.Errorf("reading pip's index: %s has no pip: %w", python, ErrNoManager)
	}
	return ps, nil
}

// urls are the URLs pip install fetches from: its index (unless --no-index),
// the extra indexes, the find-links that are URLs (not directories), and the
// file host of pip's built-in index when that index is the one in use (a
// mirror serves its files itself, or says where in its own configuration).
func (ps pipSettings) urls() []string {
	var urls []string
	if !ps.NoIndex {
		if ps.IndexURL != "" {
			urls = append(urls, ps.IndexURL)
		}
		urls = append(urls, ps.ExtraIndexURLs...)
		if ps.FileHost != "" && ps.IndexURL != "" && strings.TrimSuffix(ps.IndexURL, "/") == strings.TrimSuffix(ps.DefaultIndex, "/") {
			urls = append(urls, "https://"+ps.FileHost+"/")
		}
	}
	for _, l := range ps.FindLinks {
		if strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://") {
			urls = append(urls, l)
		}
	}
	return urls
}

// lastLine is the last non-empty line of out: what a probe prints after
// anything a site hook may have printed first.
func lastLine(out []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	return lines[len(lines)-1]
}
