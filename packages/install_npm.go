package packages

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/brig-sandbox/brig/internal/text"
)

// npmDriverSource is the program the JavaScript installer's jail runs: npm's
// own CLI, in process, as its bin/npm-cli.js starts it, installing the
// dependencies of a package.json it writes in npmPrefix. npm is found where
// Node's global packages live (prefix/lib/node_modules beside the running
// node), not at a written path. Its output goes to stderr (the progress) and
// is watched for its error lines; when npm exits, one result line on stdout
// lists the packages of the lockfile it wrote. %s is the base64 of the JSON
// of npmConfig, so that no request or URL is ever read as JavaScript.
const npmDriverSource = `'use strict'
const fs = require('node:fs')
const path = require('node:path')

const CONFIG = JSON.parse(Buffer.from('%s', 'base64').toString('utf8'))
const MARKER = %q

const stdout = process.stdout.write.bind(process.stdout)
const stderr = process.stderr.write.bind(process.stderr)
const seen = { errors: [], tail: [], partial: '' }
function watch (chunk) {
  const lines = (seen.partial + String(chunk)).split('\n')
  seen.partial = lines.pop()
  for (let line of lines) {
    line = line.trimEnd().slice(0, 2000)
    if (!line) continue
    if ((line.startsWith('npm error') || line.startsWith('npm ERR!')) && seen.errors.length < 30) seen.errors.push(line)
    seen.tail.push(line)
    if (seen.tail.length > 20) seen.tail.shift()
  }
}
process.stderr.write = function (chunk, ...rest) { watch(chunk); return stderr(chunk, ...rest) }
process.stdout.write = function (chunk, ...rest) { watch(chunk); return stderr(chunk, ...rest) }

fs.writeFileSync(path.join(CONFIG.prefix, 'package.json'), JSON.stringify({
  name: CONFIG.rootName, version: '0.0.0', private: true, dependencies: CONFIG.dependencies
}))

process.on('exit', (code) => {
  const result = { runtime: process.versions.node, exit: code, packages: [], errors: seen.errors, tail: seen.tail }
  if (code === 0) {
    try {
      const lock = JSON.parse(fs.readFileSync(path.join(CONFIG.prefix, 'package-lock.json'), 'utf8'))
      for (const [key, p] of Object.entries(lock.packages || {})) {
        if (!key.startsWith('node_modules/') || p.link) continue
        // An optional dependency npm skipped (another platform's build) is
        // in the lockfile, not on the disk: not the layer's.
        if (p.optional && !fs.existsSync(path.join(CONFIG.prefix, key))) continue
        const name = p.name || key.slice(key.lastIndexOf('node_modules/') + 'node_modules/'.length)
        const requires = Object.keys({ ...p.dependencies, ...p.optionalDependencies, ...p.peerDependencies })
        result.packages.push({ name, version: p.version || '', hash: p.integrity || '', path: key, resolved: p.resolved || '', requires })
        // The run's package events say so: a native addon's require() fails
        // later, with words that don't say why (the npm probe of 2026-12-06).
        if (p.hasInstallScript) {
          stderr('brig: ' + name + '@' + p.version + ' has an install script, which brig never runs: ' +
            'if it builds or downloads a native addon, that addon is missing and require() of it fails; ' +
            'a pure-JavaScript package instead works\n')
        }
      }
    } catch (err) {
      result.exit = 1
      result.errors.push('reading the lockfile: ' + err.message)
    }
  }
  stdout(MARKER + JSON.stringify(result) + '\n')
})

const npmDir = path.dirname(require.resolve('npm/package.json', {
  paths: [path.join(path.dirname(process.execPath), '..', 'lib', 'node_modules')]
}))
process.argv = [process.argv[0], path.join(npmDir, 'bin', 'npm-cli.js'), ...CONFIG.args]
require(path.join(npmDir, 'lib', 'cli.js'))(process)
`

// npmConfig is what the npm driver is given.
type npmConfig struct {
	Prefix   string `json:"prefix"`
	RootName string `json:"rootName"`
	// Dependencies are the package.json's: name to range.
	Dependencies map[string]string `json:"dependencies"`
	Args         []string          `json:"args"`
}

// npmConfigOf is the driver's configuration for requests from registry.
func npmConfigOf(reqs []Request, urls []string) npmConfig {
	deps := make(map[string]string, len(reqs))
	for _, r := range reqs {
		deps[r.Name] = r.Constraint
	}
	registry := ""
	if len(urls) > 0 {
		registry = urls[0]
	}
	return npmConfig{
		Prefix:       npmPrefix,
		RootName:     npmRootName,
		Dependencies: deps,
		Args: []string{
			"install",
			"--prefix", npmPrefix,
			"--registry", registry,
			// No package's preinstall, install, postinstall or prepare
			// script runs: no package code at install time.
			"--ignore-scripts",
			"--no-audit",
			"--no-fund",
			"--update-notifier=false",
			"--progress=false",
			// The lockfile is where the resolved versions are read.
			"--package-lock=true",
			// A registry that fails (5xx, a reset) is retried twice within
			// about 6 s, not npm's 10 to 60 s backoff, which made a run wait
			// 70 s to learn that its registry was down.
			"--fetch-retries=2",
			"--fetch-retry-mintimeout=1000",
			"--fetch-retry-maxtimeout=5000",
		},
	}
}

// npmDriver is the driver program for cfg.
func npmDriver(cfg npmConfig) (string, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(npmDriverSource, base64.StdEncoding.EncodeToString(b), resultMarker), nil
}

// npmResolved turns the driver's result into the layer's packages, or npm's
// failure into an error.
func npmResolved(set Set, r *driverResult, registries []string) ([]Resolved, error) {
	if r.Exit != 0 {
		return nil, npmError(r, registries)
	}
	top := make(map[string]Request, len(set.Requests)) // lockfile path -> request
	for _, q := range set.Requests {
		top["node_modules/"+q.Name] = q
	}
	resolved := make([]Resolved, 0, len(r.Packages))
	paths := make([]string, 0, len(r.Packages))
	for _, p := range r.Packages {
		if p.Name == "" || p.Version == "" {
			return nil, fmt.Errorf("the javascript installer reported a package without a name or version: %+v", p)
		}
		// A package may go by three names: the registry's, in the URL
		// it was fetched from; the folder it is installed in (an alias's,
		// "string-width-cjs": "npm:string-width@^4"); and its lockfile
		// name, its package.json's, which a tarball may make another
		// package's (the package audit's namediff, whose lock read
		// okjs@1.0.0). It is named as the registry serves it: a request by
		// the name the run asked for, a dependency by its URL, else (a
		// mirror's layout, a bundled one) by its lockfile name; the others
		// are its aliases, by which deny refuses it too.
		folder := p.Path[strings.LastIndex(p.Path, "node_modules/")+len("node_modules/"):]
		q, requested := top[p.Path]
		registry, fromRegistry := npmRegistryName(p.Resolved)
		name := p.Name
		switch {
		case requested:
			name = folder // the name the run asked the registry for
		case fromRegistry:
			name = registry
		}
		r := Resolved{Name: name, Version: p.Version, Hash: p.Hash, Request: q.Raw}
		for _, n := range []string{folder, registry, p.Name} {
			if n != "" && n != name && !slices.Contains(r.Aliases, n) {
				r.Aliases = append(r.Aliases, n)
			}
		}
		// Fetched other than over HTTP (a git or file dependency): the
		// installer reaches the registries' hosts alone, so a URL that is
		// not a registry's usual tarball (a mirror's, a proxy's layout) is
		// still one of theirs.
		if u, err := url.Parse(p.Resolved); p.Resolved != "" && (err != nil || u.Scheme != "http" && u.Scheme != "https") {
			r.Source = p.Resolved
		}
		resolved = append(resolved, r)
		paths = append(paths, p.Path)
	}
	requiredBy(resolved, npmEdges(paths, r.Packages))
	sortResolved(resolved)
	return resolved, nil
}

// npmRegistryName is the package a registry's tarball URL names
// (".../@scope/name/-/name-1.0.0.tgz", "lodash/-/lodash-4.17.21.tgz"; some
// proxies write a scoped one's file ".../-/@scope/name-1.0.0.tgz"), and
// whether resolved is one.
func npmRegistryName(resolved string) (string, bool) {
	u, err := url.Parse(resolved)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return "", false
	}
	before, file, ok := strings.Cut(u.Path, "/-/")
	scope, rest, scopedFile := strings.Cut(file, "/")
	if scopedFile && strings.HasPrefix(scope, "@") {
		file = rest
	}
	if !ok || !strings.HasSuffix(file, ".tgz") || strings.Contains(file, "/") {
		return "", false
	}
	parts := strings.Split(strings.Trim(before, "/"), "/")
	name := parts[len(parts)-1]
	if len(parts) >= 2 && strings.HasPrefix(parts[len(parts)-2], "@") {
		name = parts[len(parts)-2] + "/" + name
	}
	if name == "" || !strings.HasPrefix(file, name[strings.LastIndex(name, "/")+1:]+"-") ||
		scopedFile && !strings.HasPrefix(name, scope+"/") {
		return "", false
	}
	return name, true
}

// npmUnavailableCodes are npm's error codes for a package or version that
// can't be had: not in the registry, no version in range, or ranges no
// version satisfies together.
var npmUnavailableCodes = []string{"E404", "ETARGET", "ERESOLVE"}

// npmNetworkCodes are npm's error codes for a registry that did not answer:
// the system's for a connection that failed, and npm's for an HTTP status of
// the server's.
var npmNetworkCodes = []string{"ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EAI_AGAIN", "ENOTFOUND", "EHOSTUNREACH", "ENETUNREACH", "E500", "E502", "E503", "E504"}

// npmError is npm's failure: an *UnavailableError for the codes above, an
// *IndexError for a registry that did not answer, else a plain error.
// registries are the registry URLs npm was given.
func npmError(r *driverResult, registries []string) error {
	code := ""
	var lines []string
	for _, l := range r.Errors {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(l, "npm error"), "npm ERR!"))
		if c, ok := strings.CutPrefix(l, "code "); ok && code == "" {
			code = strings.TrimSpace(c)
			continue
		}
		if strings.HasPrefix(l, "A complete log of this run") {
			continue // a file in the installer's jail, gone with it
		}
		lines = append(lines, l)
	}
	if code == "E403" {
		// "403 Forbidden - GET <url>": a URL outside the registries is a
		// dependency's, which the installer's egress refuses (the request's
		// fault); a registry's own 403 (a token, an allow-list, a firewall)
		// is the host's or the registry's, as its other failures are.
		l := strings.TrimSpace(strings.TrimPrefix(pickLine(lines, "403 Forbidden", "403"), "403 "))
		_, target, _ := strings.Cut(l, " - GET ")
		u, err := url.Parse(strings.TrimSpace(target))
		var hosts []string
		for _, r := range registries { // one by one: a URL it refuses drops no other
			h, _ := RegistryHostsOf([]string{r})
			hosts = append(hosts, h...)
		}
		switch {
		case err != nil || u.Hostname() == "":
		case slices.Contains(hosts, strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))):
			return &IndexError{Message: text.Clip("the javascript installer was refused by the registry (npm's code E403): "+l, maxMessage)}
		default:
			return &UnavailableError{Message: text.Clip(l+": a dependency's tarball is outside the configured registries, and brig installs packages from them only. Depend on a version published to the registry instead. (Hint for the operator: if the registry serves its tarballs from that host, list it in [egress.registries].)", maxMessage)}
		}
	}
	if msg := npmGitSource(lines); msg != "" {
		return &UnavailableError{Message: text.Clip(msg, maxMessage)}
	}
	unavailable := false
	for _, c := range npmUnavailableCodes {
		if code == c {
			unavailable = true
		}
	}
	if !unavailable {
		msg := strings.Join(lines, " ")
		if msg == "" {
			msg = strings.TrimPrefix(quoteTail(strings.Join(r.Tail, "\n")), ": ")
		}
		if slices.Contains(npmNetworkCodes, code) {
			return &IndexError{Message: fmt.Sprintf("the javascript installer could not read the registry (npm's code %s): %s", code, text.Clip(msg, maxMessage))}
		}
		return fmt.Errorf("the javascript installer failed (npm exited with status %d, code %q): %s", r.Exit, code, text.Clip(msg, maxMessage))
	}
	var msg string
	switch code {
	case "E404":
		// "404 Not Found - GET <url>", then npm 11's "404  The requested
		// resource 'x@^1' could not be found or you do not have permission
		// to access it." (npm 10: "404  'x@^1' is not in this registry.")
		msg = pickLine(lines, "could not be found", "")
		if msg == "" {
			msg = pickLine(lines, "is not in this registry", "404 ")
		}
		msg = strings.TrimSpace(strings.TrimPrefix(msg, "404"))
		msg += " Check the package's name."
	case "ETARGET":
		msg = strings.TrimSpace(strings.TrimPrefix(pickLine(lines, "No matching version", "notarget"), "notarget"))
		open := "name@*"
		if _, spec, ok := strings.Cut(msg, "found for "); ok {
			// "No matching version found for app@^9.0.0." names the
			// package, scope included.
			if at := strings.LastIndexByte(spec, '@'); at > 0 {
				open = spec[:at] + "@*"
			}
		}
		msg += " Check the version constraint, or leave it open with " + open + "."
	case "ERESOLVE":
		msg = strings.TrimSpace(pickLine(lines, "unable to resolve dependency tree", "ERESOLVE"))
		for _, l := range lines {
			if strings.HasPrefix(l, "Found:") || strings.HasPrefix(l, "Could not resolve dependency:") || strings.Contains(l, "peer ") {
				msg += " " + l
			}
		}
		msg += ". Loosen the version constraints so that one version of each package satisfies them all."
	}
	return &UnavailableError{Message: text.Clip(strings.TrimSpace(msg), maxMessage)}
}

// npmGitSource is what to say of a dependency npm would fetch from git (npm
// gives git's exit status as its code), or "". The installer reaches the
// registries only, so the set can't be installed here; the request is at
// fault, not the host.
func npmGitSource(lines []string) string {
	if l := pickLine(lines, "command git ", ""); l != "" {
		source := "a git repository"
		for _, verb := range []string{" ls-remote ", " clone "} {
			if _, rest, ok := strings.Cut(l, verb); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					source = f[len(f)-1]
					if i := slices.IndexFunc(f, func(s string) bool { return strings.Contains(s, "://") || strings.HasPrefix(s, "git@") }); i >= 0 {
						source = f[i]
					}
				}
				break
			}
		}
		return "a dependency comes from git (" + source + "), and brig installs packages from the registries only. Depend on a version published to the registry instead."
	}
	return ""
}

// pickLine is the first line containing want, else (when fallback is not
// empty) the first starting with fallback, else the first.
func pickLine(lines []string, want, fallback string) string {
	for _, l := range lines {
		if strings.Contains(l, want) {
			return l
		}
	}
	if fallback == "" {
		return ""
	}
	for _, l := range lines {
		if strings.HasPrefix(l, fallback) {
			return l
		}
	}
	if len(lines) > 0 {
		return lines[0]
	}
	return ""
}
