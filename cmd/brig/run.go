package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/client"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/rootfs"
	"github.com/brig-sandbox/brig/supervisor"
)

// stopWait bounds how long `brig run`, once signalled, waits for the service
// to stop its run. acceptWait bounds how long it waits for the service to
// accept its run: a service answers a stream at once, or within its 10 s wait
// for a body's room, whether the run starts or is queued; one that takes the
// connection and never answers (stopped with SIGSTOP, wedged) held brig run
// with no end. Variables for the tests (BRIG_TEST_WAIT).
var (
	stopWait   = 10 * time.Second
	acceptWait = 60 * time.Second
)

// Exit statuses of `brig run` when the program's own can't be given.
const (
	exitTimeout  = 124 // as timeout(1)
	exitInternal = 125 // the sandbox could not be built; the program did not run
	exitStopped  = 130 // as after SIGINT
	exitMemory   = 137 // as a SIGKILLed process
	exitBlocked  = 126 // the package policy refused a package; the program did not run
	exitNoPkg    = 127 // a requested package or version could not be had; the program did not run
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "run one program (FILE, or - for stdin) and exit with its exit status",
		Description: "Exits with the program's status, 128+N for its death by signal N, and where it has none: 124 timeout, " +
			"137 memory, 130 stopped, 126 a package blocked, 127 a package unavailable, 125 internal, " +
			"2 refused, unreachable, a wrong command line or output that could not be written. A program may exit with any of these itself: --json tells them apart.",
		ArgsUsage: "FILE|-",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "socket", Value: supervisor.DefaultSocket, Usage: "the service's socket"},
			&cli.BoolFlag{Name: "local", Usage: "run in this process, without the service (root only)"},
			&cli.StringFlag{Name: "language", Aliases: []string{"l"}, Usage: "python or javascript (required)"},
			&cli.IntFlag{Name: "timeout", Value: api.DefaultTimeoutSeconds, Usage: "wall-clock limit in seconds (1-300), from the interpreter's start"},
			&cli.IntFlag{Name: "memory", Value: api.DefaultMemoryMiB, Usage: fmt.Sprintf("memory limit in MiB (%d-%d)", api.MinMemoryMiB, api.MaxMemoryMiB)},
			&cli.StringSliceFlag{Name: "package", Usage: "a package with a version constraint (repeatable)"},
			&cli.StringSliceFlag{Name: "env", Usage: "an environment variable K=V (repeatable)"},
			&cli.StringFlag{Name: "network", Value: api.NetworkNone, Usage: "none, registries, domains or any"},
			&cli.StringSliceFlag{Name: "domain", Usage: "an allowed domain; alone it means --network domains (repeatable)"},
			&cli.StringFlag{Name: "id", Usage: "the run's id (an idempotency key)"},
			&cli.BoolFlag{Name: "json", Usage: "print the whole Result as JSON instead of streaming the output"},
			&cli.BoolFlag{Name: "raw", Usage: "write the program's control characters to a terminal as they are; by default a terminal shows them escaped (ESC as \\x1b, a backslash as \\\\), so that a program can't drive it. Pipes and files always get the output as the service gives it (invalid UTF-8 as U+FFFD)"},
		}, sandboxFlags()...),
		Action: runAction,
	}
}

func runAction(c *cli.Context) error {
	// Checked here rather than by urfave's Required, which with a FILE given
	// reports the FILE as an unknown command.
	if !c.IsSet("language") {
		return refuse(c, "language", fmt.Errorf("run needs --language python or --language javascript"))
	}
	if c.NArg() != 1 {
		return fmt.Errorf("run takes one FILE, or - to read the program from stdin")
	}
	if err := localFlagsApply(c, []string{"socket"}, nil, "runs through the service",
		"a run through the service gets the service's sandboxes (set them on brig serve)"); err != nil {
		return err
	}
	code, err := readProgram(c.Args().First())
	var bad badProgram
	if errors.As(err, &bad) && bad.code == api.ErrorTooLarge {
		return refuseWith(c, api.ErrorTooLarge, "", err)
	}
	if errors.As(err, &bad) {
		return refuse(c, "code", err)
	}
	if err != nil {
		return err
	}
	lang, err := rootfs.ParseLanguage(c.String("language"))
	if err != nil {
		return refuse(c, "language", err)
	}
	env, err := envFlags(c.StringSlice("env"))
	if err != nil {
		field := "env"
		var ee *jail.EnvError
		if errors.As(err, &ee) && ee.Name != "" {
			field += "." + ee.Name
		}
		return refuse(c, field, err)
	}
	if c.Bool("local") {
		return runLocal(c, lang, code, env)
	}
	timeout, memory := c.Int("timeout"), c.Int("memory")
	// --domain alone means mode domains, as the Python client's domains=.
	mode := c.String("network")
	if !c.IsSet("network") && len(c.StringSlice("domain")) > 0 {
		mode = api.NetworkDomains
	}
	req := api.Request{
		// An id of its own when none is given, so that a Ctrl-C, however
		// early, can stop the run by it (a stream's run outlives a client
		// that goes away once it was accepted), and a dropped connection
		// can say which run to look up.
		ID:             cmp.Or(c.String("id"), supervisor.NewID()),
		Language:       string(lang),
		Code:           code,
		TimeoutSeconds: &timeout,
		MemoryMiB:      &memory,
		Packages:       c.StringSlice("package"),
		Env:            env,
		Network:        &api.Network{Mode: mode, Domains: c.StringSlice("domain")},
	}
	return runRemote(c, req)
}

// envFlags reads --env NAME=VALUE flags as the request's env, checked as
// the service checks it (jail.ValidateEnv), and for what a map would lose: a
// name given twice, a value that is not UTF-8.
func envFlags(flags []string) (map[string]string, error) {
	env := map[string]string{}
	for _, kv := range flags {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env %q: write it as NAME=VALUE", kv)
		}
		if _, twice := env[k]; twice {
			return nil, &jail.EnvError{Name: k, Message: fmt.Sprintf("--env gives %s twice: give each name once", k)}
		}
		// As a program's file: sent as JSON, its bytes would become U+FFFD
		// and the run would get another value than given.
		if !utf8.ValidString(v) {
			return nil, &jail.EnvError{Name: k, Message: fmt.Sprintf("--env %s: the value is not UTF-8; the API carries text, so give it as UTF-8 (or encoded, as base64 or hex)", k)}
		}
		env[k] = v
	}
	if err := jail.ValidateEnv(env); err != nil {
		return nil, fmt.Errorf("--env: %w", err)
	}
	return env, nil
}

// refuse is a request brig run refuses before sending it, for the first bad
// field: with --json, an invalid_request body naming the field is also
// printed, as the service's refusal of the same request would be, for a
// caller that reads stdout alone. (Its usage errors, a file that can't be
// read, a service that can't be reached print nothing there.)
func refuse(c *cli.Context, field string, err error) error {
	return refuseWith(c, api.ErrorInvalidRequest, field, err)
}

// refuseWith is refuse with another code than invalid_request.
func refuseWith(c *cli.Context, code, field string, err error) error {
	if c.Bool("json") {
		b, _ := json.Marshal(api.ErrorBody{Error: api.Error{Code: code, Field: field, Message: err.Error()}})
		os.Stdout.Write(append(b, '\n'))
	}
	return err
}

// runRemote runs req through the service: output streams live (or the Result is
// printed with --json), and SIGINT, SIGTERM or SIGHUP stops the run (DELETE)
// rather than leave it going.
func runRemote(c *cli.Context, req api.Request) error {
	cl := client.New(c.String("socket"))
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	// SIGHUP too: a closed terminal must not leave the run going.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// A reader of the output that went away (`| head -1`) stops the run as
	// a signal does: SIGPIPE ignored, which would otherwise kill this
	// process and leave the run going, the first failed write says so.
	signal.Ignore(syscall.SIGPIPE)
	var closeGone sync.Once
	gone := make(chan struct{})
	outputGone := func() { closeGone.Do(func() { close(gone) }) }

	// Its stops name its own uid: for root and the admin group an id alone
	// means another uid's run where they have none of it, and a stop before
	// the service took this one would end that one (the identity probe of
	// 2026-12-06). Only where its uid is the host's: in a user namespace the
	// service knows it by another, and a stop by this one found nothing (the
	// review).
	var own []client.RunOption
	if hostIDs() {
		own = append(own, client.OwnedBy(os.Geteuid()))
	}
	var accepted, acceptLate atomic.Bool
	var stoppedRes atomic.Pointer[api.Result] // what the stop below answered
	stopped := make(chan struct{})            // closed once the goroutine below is done
	late := make(chan struct{})               // closed when acceptWait passed with no accepted event
	go func() {
		defer close(stopped)
		select {
		case <-sigs:
		case <-gone:
		case <-late:
		case <-ctx.Done():
			return
		}
		// A second signal does not wait for a service that does not answer
		// (stopped, wedged): it exits at once, naming the run.
		go func() {
			<-sigs
			noticef("brig: not waiting for the service any longer; run %s may still be going: `curl -X DELETE --unix-socket %s http://brig/v1/runs/%s` stops it\n", req.ID, c.String("socket"), req.ID)
			os.Exit(exitStopped)
		}()
		if accepted.Load() {
			// One deadline for the stop and the stream's end after it.
			stop, cancelStop := context.WithTimeout(context.Background(), stopWait)
			defer cancelStop()
			cl.Stop(stop, req.ID, own...) // the stream then ends with the result
			select {
			case <-ctx.Done(): // it did
			case <-stop.Done():
				noticef("brig: the service did not end run %s's stream within %s of its stop; it may still be going: `curl --unix-socket %s http://brig/v1/runs/%s` reads it\n", req.ID, stopWait, c.String("socket"), req.ID)
				os.Exit(exitStopped)
			}
			return
		}
		// Not accepted yet: the request is dropped, and a run the service
		// accepted all the same (the request was on its way) is stopped by
		// its id once it is there, for as long as stopWait.
		cancel()
		for deadline := time.Now().Add(stopWait); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			stop, cancelStop := context.WithDeadline(context.Background(), deadline)
			res, err := cl.Stop(stop, req.ID, own...)
			cancelStop()
			if err == nil {
				stoppedRes.Store(res)
			}
			if !isNotFound(err) {
				return
			}
		}
	}()
	// A service that does not accept the run in time is left as a signal
	// leaves it: the request dropped, and the run stopped by its id should
	// the service take it after all.
	acceptTimer := time.AfterFunc(acceptWait, func() {
		if !accepted.Load() {
			acceptLate.Store(true)
			close(late)
		}
	})
	defer acceptTimer.Stop()
	jsonOut := c.Bool("json")
	writeOut, writeErr := outputTo(os.Stdout, c.Bool("raw"), outputGone), outputTo(os.Stderr, c.Bool("raw"), outputGone)
	// The stream is read on, whatever the reader of the output does: the
	// service drops a stream it can't write for 30 s, and a reader that
	// paused that long (less, a terminal's Ctrl-S) lost the rest of the
	// output and got exit 2 for a run that had succeeded (the clients probe
	// of 2026-12-06). What waits is at most the run's output caps.
	stdout, outWritten := queued(writeOut)
	stderr, errWritten := queued(writeErr)
	res, err := cl.Stream(ctx, req, func(ev api.Event) error {
		switch ev.Event {
		case api.EventAccepted:
			accepted.Store(true)
		case api.EventStdout:
			if !jsonOut {
				stdout(ev.Data)
			}
		case api.EventStderr:
			if !jsonOut {
				stderr(ev.Data)
			}
		}
		return nil
	})
	// The run is over (or its stream is): a signal now ends brig run as it
	// would any program, however long a slow reader takes the rest.
	signal.Stop(sigs)
	outWritten()
	errWritten()
	if err != nil {
		var ce *client.Error
		switch {
		case errors.As(err, &ce):
			if jsonOut {
				// The refusal's body as the API sends it, for a caller that
				// reads stdout alone.
				b, _ := json.Marshal(api.ErrorBody{Error: ce.API})
				os.Stdout.Write(append(b, '\n'))
			}
			return fmt.Errorf("the service refused the run: %s", describeAPIError(ce))
		case acceptLate.Load():
			<-stopped // its DELETEs sent
			took := "if it takes the run later, it is not stopped"
			if stoppedRes.Load() != nil {
				took = "it took the run meanwhile, and it was stopped"
			}
			return fmt.Errorf("the service at %s took the connection but did not accept run %s within %s: it may be overloaded or stuck (GET /v1/health, and its log, say); %s; `curl --unix-socket %s http://brig/v1/runs/%s` reads it", c.String("socket"), req.ID, acceptWait, took, c.String("socket"), req.ID)
		case ctx.Err() != nil:
			<-stopped // its DELETE sent before the process exits
			if res := stoppedRes.Load(); res != nil {
				// The run was accepted after all, its output not streamed:
				// its result, whole.
				if !jsonOut {
					writeOut(res.Stdout)
					writeErr(res.Stderr)
				}
				return finishRun(c, res)
			}
			noticef("brig: stopped before the service said it accepted run %s, which its stop did not find; if the service takes it later, `curl --unix-socket %s http://brig/v1/runs/%s` reads it\n", req.ID, c.String("socket"), req.ID)
			return exitError(exitStopped)
		case accepted.Load():
			// The service went away during the run (a crash, a restart).
			return fmt.Errorf("the connection to the service dropped during run %s (%v): once the service is back, `curl --unix-socket %s http://brig/v1/runs/%s` reads its result, or run this again with --id %s, which gives that run's result rather than running it twice", req.ID, err, c.String("socket"), req.ID, req.ID)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "dial" {
			// The request went out: the service may have accepted it.
			return fmt.Errorf("the connection to the service dropped before it accepted run %s (%v): the run may have been accepted; `curl --unix-socket %s http://brig/v1/runs/%s` reads it, and this again with --id %s gives that run's result rather than running it twice", req.ID, err, c.String("socket"), req.ID, req.ID)
		}
		hint := "is `brig serve` running there? Start it (systemctl start brig, or make serve from a checkout), or give its --socket"
		if errors.Is(err, syscall.EACCES) {
			hint = "this user may not open the socket: ask the operator to add it to the service's socket_group and to allow_uids or allow_gids, or run as root"
		}
		return fmt.Errorf("talking to the service at %s: %w (%s)", c.String("socket"), err, hint)
	}
	return finishRun(c, res)
}

// hostIDs says whether this process's uids are the host's: its user
// namespace maps every id to itself, as the initial namespace does.
func hostIDs() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	return err == nil && strings.Join(strings.Fields(string(b)), " ") == "0 0 4294967295"
}

func describeAPIError(e *client.Error) string {
	msg := fieldMessage(e.API)
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.API.Code, msg)
}

// fieldMessage is an API error's message after the field it names, and the
// flag of `brig run` that sets that field: "timeout_seconds is 301; ...
// [--timeout]".
func fieldMessage(e api.Error) string {
	if e.Field == "" {
		return e.Message
	}
	msg := e.Field + " " + e.Message
	if flag := flagOf(e.Field); flag != "" {
		msg = fmt.Sprintf("%s [%s]", msg, flag)
	}
	return msg
}

// flagOf is the `brig run` flag that sets the request's field (timeout_seconds,
// packages[2], env.K, network.domains[0]), "" for none.
func flagOf(field string) string {
	name, _, _ := strings.Cut(field, "[")
	if !strings.HasPrefix(name, "network.domains") {
		name, _, _ = strings.Cut(name, ".")
	}
	return runFlags[name]
}

// runFlags are the request's fields that a flag of `brig run` sets.
var runFlags = map[string]string{
	"code": "FILE", "language": "--language", "timeout_seconds": "--timeout", "memory_mib": "--memory",
	"packages": "--package", "env": "--env", "network": "--network", "network.domains": "--domain", "id": "--id",
}

// finishRun prints what is left of a result and exits with its status.
func finishRun(c *cli.Context, res *api.Result) error {
	if c.Bool("json") {
		b, err := api.Marshal(res) // '<', '>' and '&' as they are
		if err != nil {
			return err
		}
		var indented bytes.Buffer
		if err := json.Indent(&indented, b, "", "  "); err != nil {
			return err
		}
		b = indented.Bytes()
		// JSON escapes the C0 controls but not DEL nor C1 (U+0080-U+009F); on
		// a terminal those are escaped too, which leaves the JSON's meaning as is.
		if !c.Bool("raw") && isTerminal(os.Stdout) {
			b = []byte(escapeJSONControls(string(b)))
		}
		if _, err := os.Stdout.Write(append(b, '\n')); err != nil {
			return err
		}
	} else {
		if isTerminal(os.Stderr) {
			var b strings.Builder
			if refusals(&b, res.Network.Connections); b.Len() > 0 {
				noticef("%s", b.String())
			}
		}
		if (res.Reason != api.ReasonNone && res.Reason != api.ReasonError) || (res.Signal != "" && res.Message != "") {
			// A failure's own words; for an error, only a signal's (a
			// program's own exit status says enough, a SIGKILL does not).
			noticef("brig: %s\n", res.Message)
		}
		for _, cut := range []struct {
			name string
			cut  bool
			max  int
		}{{"stdout", res.StdoutTruncated, api.MaxStdoutChars}, {"stderr", res.StderrTruncated, api.MaxStderrChars}} {
			if cut.cut {
				noticef("brig: the program's %s was cut at %d characters, the cap; the rest was dropped\n", cut.name, cut.max)
			}
		}
	}
	if outputFailed.Load() {
		return fmt.Errorf("the program's output could not all be written (above), so its status (%d) is not given", exitStatus(res))
	}
	if code := exitStatus(res); code != 0 {
		return exitError(code)
	}
	return nil
}

// refusals writes to w the connections the run's egress refused, or that did
// not get through, with the rule or the failure, so that the operator at a
// terminal sees why a program's request failed. The first ten; a count of the
// rest.
func refusals(w io.Writer, conns []api.Connection) {
	n := 0
	for _, c := range conns {
		if c.Allowed && c.Failure == "" {
			continue
		}
		if n++; n > 10 {
			continue
		}
		why, what := c.Rule, "refused"
		if c.Allowed {
			why, what = c.Failure, "failed"
		}
		fmt.Fprintf(w, "brig: egress %s %s:%d (%s)\n", what, c.Host, c.Port, escapeControls(why))
	}
	if n > 10 {
		fmt.Fprintf(w, "brig: and %d more connections refused or failed (--json lists them)\n", n-10)
	}
}

// runLocal runs the program in this process, without the service.
func runLocal(c *cli.Context, lang rootfs.Language, code string, env map[string]string) error {
	if len(c.StringSlice("package")) > 0 || c.String("network") != api.NetworkNone || c.IsSet("domain") {
		return fmt.Errorf("--local runs have no packages and no network yet; drop --package, --network and --domain")
	}
	if c.IsSet("warm") && c.Int("pool") == 0 {
		return fmt.Errorf("--warm needs --pool: a warm sandbox is a pooled one")
	}
	// Refused as the service refuses it, naming the field and its flag. The
	// id names the Result alone: without the service's journal, a run with
	// the id of an earlier one runs again.
	timeout, memory := c.Int("timeout"), c.Int("memory")
	req := api.Request{ID: cmp.Or(c.String("id"), supervisor.NewID()), Language: lang.String(), Code: code,
		TimeoutSeconds: &timeout, MemoryMiB: &memory, Env: env, Network: &api.Network{Mode: api.NetworkNone}}
	if e := supervisor.CheckRequest(req); e != nil {
		if c.Bool("json") {
			b, _ := json.Marshal(api.ErrorBody{Error: *e})
			os.Stdout.Write(append(b, '\n'))
		}
		return errors.New(fieldMessage(*e))
	}
	sb, _, err := localSandbox(c)
	if err != nil {
		return err
	}
	defer sb.Close()

	// As runRemote: SIGHUP and a reader that went away stop the run too.
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	signal.Ignore(syscall.SIGPIPE)
	spec := jail.Spec{
		Language:    lang,
		Code:        code,
		Timeout:     time.Duration(timeout) * time.Second,
		MemoryBytes: int64(memory) << 20,
		Env:         env,
	}
	written := func() {}
	if !c.Bool("json") {
		var outWritten, errWritten func()
		spec.OnStdout, outWritten = queued(outputTo(os.Stdout, c.Bool("raw"), cancel))
		spec.OnStderr, errWritten = queued(outputTo(os.Stderr, c.Bool("raw"), cancel))
		written = func() { outWritten(); errWritten() }
	}
	jr, err := sb.Run(ctx, spec)
	// The run is over: a signal now ends brig run as it would any program,
	// however long a slow reader takes the rest of the output.
	stop()
	written()
	if err != nil {
		return err
	}
	return finishRun(c, supervisor.ResultOf(req.ID, req, jr))
}

// queued is write on a goroutine of its own, in order: enqueue hands each
// piece over at once, and written waits until all were written. The jail's
// drains call the output callbacks of a run, and wait for them only a grace
// after its end: written there, output to a reader slower than that was lost
// (the review: 65,536 of 300,000 bytes kept, exit 0). What is queued is at
// most what the run keeps (its caps).
func queued(write func(string)) (enqueue func(string), written func()) {
	var mu sync.Mutex
	more := sync.NewCond(&mu)
	var pieces []string
	ended := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			mu.Lock()
			for len(pieces) == 0 && !ended {
				more.Wait()
			}
			if len(pieces) == 0 {
				mu.Unlock()
				return
			}
			p := pieces[0]
			pieces = pieces[1:]
			mu.Unlock()
			write(p)
		}
	}()
	enqueue = func(p string) {
		mu.Lock()
		pieces = append(pieces, p)
		mu.Unlock()
		more.Signal()
	}
	written = func() {
		mu.Lock()
		ended = true
		mu.Unlock()
		more.Signal()
		<-done
	}
	return enqueue, written
}

// outputTo returns what writes the program's output to f: escaped by
// escapeControls when f is a terminal, unless raw; as it is otherwise. Each
// stream is judged on its own, so `brig run f.py 2>log` still escapes stdout.
// A write that fails calls gone, which stops the run: a reader that went away
// (EPIPE) silently, any other failure (a full disk) said on stderr, where
// the output would otherwise be lost unseen and the program's status given.
func outputTo(f *os.File, raw bool, gone func()) func(string) {
	escape := !raw && isTerminal(f)
	// Where brig's own lines go after the program's (stderr, and stdout when
	// it is the same terminal or file, as under 2>&1), a line the program
	// left open.
	shared := f == os.Stderr || sameFile(f, os.Stderr)
	var failed sync.Once
	return func(s string) {
		if escape {
			s = escapeControls(s)
		}
		if _, err := io.WriteString(f, s); err != nil {
			failed.Do(func() {
				if !errors.Is(err, syscall.EPIPE) {
					outputFailed.Store(true)
					noticef("brig: writing the program's output failed (%v); stopping the run\n", err)
				}
				gone()
			})
		}
		if shared && s != "" {
			programLineOpen.Store(s[len(s)-1] != '\n')
		}
	}
}

// programLineOpen is whether the program's last output that brig's own lines
// follow ended without its newline: a notice then starts a line of its own,
// not "...yyyybrig: the program's stderr was cut...".
var programLineOpen atomic.Bool

// outputFailed is whether a write of the program's output failed (other than
// for a reader that went away): brig run then exits 2, whatever the program's
// status, which had been given with the output lost when the program ended
// before the stop (the review of 2026-12-06).
var outputFailed atomic.Bool

// sameFile reports whether a and b are one open file (2>&1, one terminal).
func sameFile(a, b *os.File) bool {
	var sa, sb unix.Stat_t
	return unix.Fstat(int(a.Fd()), &sa) == nil && unix.Fstat(int(b.Fd()), &sb) == nil &&
		sa.Dev == sb.Dev && sa.Ino == sb.Ino && sa.Rdev == sb.Rdev
}

// noticef writes one of brig's own lines to stderr, on a line of its own.
func noticef(format string, args ...any) {
	if programLineOpen.Swap(false) {
		os.Stderr.WriteString("\n")
	}
	fmt.Fprintf(os.Stderr, format, args...)
}

// isNotFound reports whether err is the service's 404.
func isNotFound(err error) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.Status == http.StatusNotFound
}

// isTerminal reports whether f is a terminal: whether it answers TCGETS.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// escapeControls returns s as brig run shows a program's output on a terminal,
// where control characters would be commands to the terminal (an OSC 52 write to
// the operator's clipboard, a title, a cursor move that hides a line) rather
// than text. Newline and tab are kept. Every other C0 control and DEL become
// \xHH, C1 controls (U+0080-U+009F, which terminals may take as 8-bit ESC
// sequences) \u00HH, a byte that is not UTF-8 \xHH, and a backslash \\, as
// in a Go or Python string literal: so the text "\x1b" a program prints is
// told apart from an ESC it sends. Everything else, all printable Unicode
// included, is kept. Each chunk stands alone: the form needs no state across
// chunks, and the service's chunks hold whole characters.
func escapeControls(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, needsEscape) < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case !needsEscape(r):
			b.WriteString(s[i : i+size])
		case r == '\\':
			b.WriteString("\\\\")
		case r >= 0x80: // C1
			fmt.Fprintf(&b, "\\u%04x", r)
		default: // C0 or DEL
			fmt.Fprintf(&b, "\\x%02x", r)
		}
		i += size
	}
	return b.String()
}

func needsEscape(r rune) bool {
	return (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == '\\'
}

// escapeJSONControls writes each DEL and C1 control in JSON text (where they
// can only be inside strings) as its \u00HH escape, which decodes to the same
// string.
func escapeJSONControls(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// exitStatus is the status `brig run` exits with for a result: the program's own
// where it has one.
func exitStatus(res *api.Result) int {
	switch res.Reason {
	case api.ReasonTimeout:
		return exitTimeout
	case api.ReasonMemory:
		return exitMemory
	case api.ReasonStopped:
		return exitStopped
	case api.ReasonPackageBlocked:
		return exitBlocked
	case api.ReasonPackageUnavailable:
		return exitNoPkg
	case api.ReasonNone, api.ReasonError:
		if res.ExitCode != nil {
			return *res.ExitCode
		}
		if sig := jail.SignalNumber(res.Signal); sig != 0 {
			return 128 + int(sig)
		}
		if res.Reason == api.ReasonError {
			return 1 // failed, by a signal this build can't name: never 0
		}
		return 0
	}
	return exitInternal
}

// readProgram reads the program from the file name, or stdin for "-": at most
// what a request may carry, so that /dev/zero or a stream that does not end
// is refused rather than read into memory without end.
func readProgram(name string) (string, error) {
	in := os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return "", fmt.Errorf("reading the program: %w", err)
		}
		defer f.Close()
		in = f
	}
	b, err := io.ReadAll(io.LimitReader(in, api.MaxBodyBytes+1))
	if err != nil {
		return "", fmt.Errorf("reading the program: %w", err)
	}
	if len(b) > api.MaxBodyBytes {
		return "", badProgram{fmt.Errorf("the program is more than %d bytes: brig runs programs of at most %d characters", api.MaxBodyBytes, api.MaxCodeChars), api.ErrorTooLarge}
	}
	if len(b) == 0 {
		return "", badProgram{fmt.Errorf("the program is empty"), api.ErrorInvalidRequest}
	}
	// As the service refuses a body that is not UTF-8: decoded, its bytes
	// would become U+FFFD and another program would run than the file holds.
	if i := api.InvalidUTF8At(b); i >= 0 {
		return "", badProgram{fmt.Errorf("the program is not UTF-8 (byte %d, 0x%02x): save it as UTF-8, as Python and Node read their sources", i, b[i]), api.ErrorInvalidRequest}
	}
	return string(b), nil
}

// badProgram is a program the service would refuse, with the code it would
// refuse it with (a body past its bound is too_large, 413), where
// readProgram's other errors are this machine's (a file that can't be read).
type badProgram struct {
	error
	code string
}
