// Package supervisor is brig's service: the run API of API.md over a Unix socket.
// It checks each peer's credentials, validates requests, admits runs (bounded
// concurrency and a bounded queue), drives each run through the jail, streams its
// events, keeps results in a journal that survives restarts, and exports metrics.
//
// Typical use:
//
//	svc, err := supervisor.New(cfg, launcher)
//	if err != nil { ... }
//	ln, err := supervisor.Listen(cfg.Socket, cfg.SocketGroup)
//	go svc.Serve(ln)
//	...
//	svc.Shutdown(ctx) // stop accepting, let runs finish within cfg.Grace, stop the rest
package supervisor
