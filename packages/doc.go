// Package packages owns a run's package requests: parsing them (request.go), the
// policy that admits or blocks them (policy.go), the installer that runs pip or
// npm inside a brig jail (install*.go), and the content-addressed cache of
// installed layers (cache.go, with the layer checks of check.go). A request as
// API.md writes it ("numpy==1.26.4", "lodash@^4.17.0") becomes a Request with a
// normalised name and its constraint, or a RequestError whose message tells the
// caller (often a language model) how to write it; a Set of them is a layer's key.
//
// It also finds where a language's packages come from (registry.go): the
// registry host names that a run's `registries` network admits, read from the
// operator's config or from the package managers' own settings, never written
// in the code.
//
// Parsing is pure: no I/O, no registry look-ups. It checks that a request can name a
// package of the registry and carries a version constraint; whether that package and
// version exist is the installer's to find out.
//
// Typical use:
//
//	reqs, err := packages.ParseRequests(run.Language, run.Packages)
//	var rerr *packages.RequestError
//	if errors.As(err, &rerr) {
//		// 400, field fmt.Sprintf("packages[%d]", rerr.Index), message rerr.Message
//	}
//	if err := policy.Check(run.Language, reqs); errors.Is(err, packages.ErrBlocked) { /* blocked */ }
//	lease, err := cache.Acquire(ctx, packages.Set{Language: run.Language, Runtime: version, Requests: reqs}, progress)
//	if errors.Is(err, packages.ErrUnavailable) { /* unavailable */ }
//	defer lease.Release() // mount lease.Dir read-only in the run
//
// The cache's Example shows a whole install and hit.
package packages
