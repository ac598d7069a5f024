// Package supervisor is brig's service: the run API of API.md over a Unix socket.
// It checks each peer's credentials, validates requests, admits runs (bounded
// concurrency and a bounded queue), drives each run through the jail, streams its
// events, keeps results in a journal that survives restarts, and exports metrics.
//
// Typical use (ExampleNew runs it, with a fake Launcher):
//
//	svc, err := supervisor.New(cfg, host, launcher) // launcher: a *jail.Launcher
//	if err != nil { ... }
//	ln, err := supervisor.Listen(socket, socketGroup) // mode 0660, root and the group
//	if err != nil { ... }
//	go svc.Serve(ln)
//	...
//	svc.Shutdown(ctx) // stop accepting, let runs finish within cfg.Grace, stop the rest
//
// The Launcher is an interface so that everything above the jail (validation,
// admission, the outcome mapping, the journal) is tested without root.
package supervisor
