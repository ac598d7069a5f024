package supervisor_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/client"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/supervisor"
)

// echoLauncher stands in for the jail: it "runs" a program by printing its
// code. brig serve passes a *jail.Launcher.
type echoLauncher struct{}

func (echoLauncher) Run(_ context.Context, spec jail.Spec) (*jail.Result, error) {
	zero := 0
	return &jail.Result{End: jail.EndCompleted, ExitCode: &zero, Stdout: spec.Code + "\n"}, nil
}

// A service on a Unix socket, one run through the client, and a shutdown.
// brig serve makes its socket with supervisor.Listen(socket, group), which
// gives it to root and the group (and so needs root); a plain listener serves
// here so that the example runs as any user.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "brig-ex")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	cfg := supervisor.Config{
		StateDir:  filepath.Join(dir, "state"),
		AllowUIDs: []int{os.Getuid()},
		Logger:    slog.New(slog.DiscardHandler),
	}
	svc, err := supervisor.New(cfg, supervisor.HostInfo{Languages: map[string]string{"python": "3.11"}}, echoLauncher{})
	if err != nil {
		panic(err)
	}
	socket := filepath.Join(dir, "brig.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		panic(err)
	}
	go svc.Serve(ln)

	res, err := client.New(socket).Run(context.Background(), api.Request{Language: "python", Code: "hello"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s %s %q\n", res.State, res.Outcome, res.Stdout)

	// Stop accepting runs, let those running finish within cfg.Grace, stop the rest.
	if err := svc.Shutdown(context.Background()); err != nil {
		panic(err)
	}
	// Output: finished succeeded "hello\n"
}
