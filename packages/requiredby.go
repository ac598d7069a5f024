package packages

import (
	"slices"
	"strings"
)

// Which request pulled a dependency in. A refusal of a dependency (the policy's
// CheckResolved) names the requests that need it, so that the harness knows
// which of its requests to change: the installs report, for each package,
// what it depends on (pip's report: Requires-Dist; npm's lockfile: the
// dependency names of each entry), and requiredBy follows those edges from
// each requested package.

// requiredBy sets RequiredBy of each package no request asked for to the
// requests (their normalised names, sorted) whose dependencies reach it, not
// through another requested package (which is named for its own). edges[i]
// are the indexes of the packages that package i depends on; an edge to a
// package the install did not resolve is absent.
func requiredBy(pkgs []Resolved, edges [][]int) {
	for i := range pkgs {
		pkgs[i].RequiredBy = nil
	}
	for root, p := range pkgs {
		if p.Request == "" {
			continue
		}
		seen := map[int]bool{root: true}
		queue := []int{root}
		for len(queue) > 0 {
			at := queue[0]
			queue = queue[1:]
			for _, next := range edges[at] {
				if d := &pkgs[next]; !seen[next] && d.Request == "" {
					seen[next] = true
					queue = append(queue, next)
					d.RequiredBy = append(d.RequiredBy, p.Name)
				}
			}
		}
	}
	for i := range pkgs {
		slices.Sort(pkgs[i].RequiredBy)
	}
}

var (
	// pyRequirementNameRE is the project name that begins a PEP 508
	// requirement ("dep-b[x]>=1; python_version > '3'").
	pyRequirementNameRE = lazyRegexp(`^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)`)
	// pyRequirementExtrasRE is a requirement's name and the extras it asks
	// for ("dep-b[x, y]>=1").
	pyRequirementExtrasRE = lazyRegexp(`^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*\[([^\]]*)\]`)
	// pyExtraMarkerRE is an extra that a requirement's marker names.
	pyExtraMarkerRE = lazyRegexp(`\bextra\s*==\s*["']([^"']+)["']`)
)

// pythonEdges are pip's packages' dependencies as indexes into pkgs (which
// hold normalised names): each one's Requires-Dist, but for those whose
// marker asks for an extra that the package was not installed with (as far as
// the report and the requirements tell). A
// requirement's other markers are not evaluated: one that pip skipped names a
// package that is not installed, or that another package needed.
func pythonEdges(pkgs []Resolved, found []driverPackage) [][]int {
	at := make(map[string]int, len(pkgs))
	for i, p := range pkgs {
		at[p.Name] = i
	}
	// The extras each package was installed with: a request's (pip reports
	// those alone), and those any requirement names ("dep[x]>=1").
	extras := make([]map[string]bool, len(pkgs))
	for i := range extras {
		extras[i] = map[string]bool{}
	}
	for _, d := range found {
		if i, ok := at[normalisePython(d.Name)]; ok {
			for _, e := range d.Extras {
				extras[i][normalisePython(e)] = true
			}
		}
		for _, req := range d.Requires {
			if m := pyRequirementExtrasRE().FindStringSubmatch(req); m != nil {
				if i, ok := at[normalisePython(m[1])]; ok {
					for _, e := range strings.Split(m[2], ",") {
						extras[i][normalisePython(strings.TrimSpace(e))] = true
					}
				}
			}
		}
	}
	edges := make([][]int, len(pkgs))
	for _, d := range found {
		from, ok := at[normalisePython(d.Name)]
		if !ok {
			continue
		}
		for _, req := range d.Requires {
			m := pyRequirementNameRE().FindStringSubmatch(req)
			if m == nil {
				continue
			}
			if _, marker, ok := strings.Cut(req, ";"); ok {
				if named := pyExtraMarkerRE().FindAllStringSubmatch(marker, -1); len(named) > 0 &&
					!slices.ContainsFunc(named, func(n []string) bool { return extras[from][normalisePython(n[1])] }) {
					continue
				}
			}
			if to, ok := at[normalisePython(m[1])]; ok && to != from && !slices.Contains(edges[from], to) {
				edges[from] = append(edges[from], to)
			}
		}
	}
	return edges
}

// npmEdges are npm's packages' dependencies as indexes into pkgs, whose
// lockfile paths are paths[i]: a name is found as Node finds it, in the
// node_modules of the package, then of each package it is nested in, then at
// the top.
func npmEdges(paths []string, found []driverPackage) [][]int {
	at := make(map[string]int, len(paths))
	for i, p := range paths {
		at[p] = i
	}
	edges := make([][]int, len(paths))
	for _, d := range found {
		from, ok := at[d.Path]
		if !ok {
			continue
		}
		for _, name := range d.Requires {
			for dir := d.Path; ; {
				if to, ok := at[dir+"/node_modules/"+name]; ok {
					if to != from && !slices.Contains(edges[from], to) {
						edges[from] = append(edges[from], to)
					}
					break
				}
				// Up to the package this one is nested in: "node_modules/a/
				// node_modules/@s/b" is in "node_modules/a".
				i := strings.LastIndex(dir, "/node_modules/")
				if i < 0 {
					if to, ok := at["node_modules/"+name]; ok && to != from && !slices.Contains(edges[from], to) {
						edges[from] = append(edges[from], to)
					}
					break
				}
				dir = dir[:i]
			}
		}
	}
	return edges
}

// requestList is names as a sentence's list: "a", "a and b", "a, b and c".
func requestList(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
