package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/client"
	"github.com/brig-sandbox/brig/internal/testutil"
	"github.com/urfave/cli/v2"
)

// The example config is the defaults, written down: a default changed in one
// place and not the other fails here.
func TestExampleConfigIsTheDefaults(t *testing.T) {
	got, err := loadServeConfig("../../deploy/brig.toml")
	if err != nil {
		t.Fatal(err)
	}
	if want := defaultServeConfig(); !reflect.DeepEqual(got, want) {
		t.Fatalf("deploy/brig.toml gives\n%+v\nwant the defaults\n%+v", got, want)
	}
}

func TestServeConfigRefusesUnknownKeys(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"unknown key", "sockett = \"/x\"\n", "sockett"},
		{"unknown sandbox key", "[sandbox]\npoool = 3\n", "sandbox.poool"},
		{"bad duration", "grace = \"soon\"\n", "grace"},
		{"wrong type", "queue_size = \"many\"\n", "queue_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "brig.toml")
			os.WriteFile(p, []byte(tc.body), 0o644)
			_, err := loadServeConfig(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// startServe runs `brig serve` (this test binary) on a socket of its own and
// returns the socket and the process; the test stops it with SIGTERM.
func startServe(t *testing.T, args ...string) (string, *exec.Cmd, *bytes.Buffer) {
	t.Helper()
	dir, err := os.MkdirTemp("", "brig-cli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "brig.sock")
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--socket", socket, "--state-dir", filepath.Join(dir, "state"),
		"--cgroup-parent", cliServeParent, "--pool", "1", "--log-format", "text"}, args...)...)
	cmd.Env = append(os.Environ(), "BRIG_CLI=1")
	logs := &bytes.Buffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	c := client.New(socket)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := c.Health(context.Background()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("brig serve did not answer within 10 s; it logged:\n%s", logs)
		}
	}
	return socket, cmd, logs
}

const cliServeParent = "brig-test-cli-serve"

func TestRunThroughService(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.CheckLeaks(t, cliServeParent)
	socket, serve, logs := startServe(t)
	dir := t.TempDir()
	script := scriptWriter(t, dir)
	cases := append(commonRunCases(script),
		runCase{"refused", []string{"-l", "python", "--timeout", "301", script("r.py", "pass")}, "", "", "timeout_seconds", 2},
		runCase{"network not offered", []string{"-l", "python", "--network", "any", script("n.py", "pass")}, "", "", "network.mode", 2},
		runCase{"id after FILE", []string{"-l", "python", script("m.py", "print(1)"), "--id", "after-file"}, "", "1\n", "", 0})
	checkRunCases(t, []string{"--socket", socket}, cases)
	t.Run("json", func(t *testing.T) {
		out, _, status := brig(t, "", "run", "--socket", socket, "--json", "-l", "python", "--id", "json-1", script("j.py", "print('j')"))
		var res api.Result
		if err := json.Unmarshal([]byte(out), &res); err != nil || status != 0 {
			t.Fatalf("got status %d and %q (%v), want 0 and a Result", status, out, err)
		}
		if res.ID != "json-1" || res.Stdout != "j\n" || res.Outcome != api.OutcomeSucceeded {
			t.Fatalf("got %+v, want id json-1, stdout j, succeeded", res)
		}
		// The same id with another program is a conflict, told in words.
		_, errOut, status := brig(t, "", "run", "--socket", socket, "-l", "python", "--id", "json-1", script("j2.py", "print('other')"))
		if status != 2 || !strings.Contains(errOut, "409 conflict") {
			t.Fatalf("got status %d stderr %q, want 2 and a 409 conflict", status, errOut)
		}
	})
	t.Run("no service", func(t *testing.T) {
		_, errOut, status := brig(t, "", "run", "--socket", filepath.Join(dir, "none.sock"), "-l", "python", script("n.py", "pass"))
		if status != 2 || !strings.Contains(errOut, "brig serve") {
			t.Fatalf("got status %d stderr %q, want 2 and a hint to start brig serve", status, errOut)
		}
	})

	t.Run("second service on the same cgroup parent", func(t *testing.T) {
		// A second service that starts anyway would serve forever: bound it.
		_, errOut, status := brigWithin(t, 20*time.Second, "serve", "--socket", filepath.Join(dir, "other.sock"), "--state-dir", filepath.Join(dir, "other"), "--cgroup-parent", cliServeParent)
		if status != 2 || !strings.Contains(errOut, "owns the cgroup parent") {
			t.Fatalf("got status %d stderr %q, want 2 and a refusal: it would sweep the first one's runs", status, errOut)
		}
	})

	// SIGTERM: a clean stop that leaves no cgroup parent behind.
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); err != nil {
		t.Fatalf("brig serve exited with %v after SIGTERM; it logged:\n%s", err, logs)
	}
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("got the socket still there after the stop (%v), want it removed", err)
	}
	for _, h := range []string{"memory", "pids", "cpu", "freezer"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h, cliServeParent)); err == nil {
			t.Errorf("got the cgroup parent left in %s after a clean stop, want it removed", h)
		}
	}
	os.Remove(cgroupLockPath(cliServeParent)) // the test's own; nothing holds it now
	if !strings.Contains(logs.String(), "run finished") {
		t.Errorf("got no canonical run line in the log:\n%s", logs)
	}
}

// Flags given override the file; flags not given leave it alone.
func TestServeFlagsOverrideTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "brig.toml")
	os.WriteFile(p, []byte("queue_size = 7\ngrace = \"5s\"\n[sandbox]\npool = 2\n"), 0o644)
	var got serveConfig
	cmd := serveCommand()
	cmd.Action = func(c *cli.Context) error {
		var err error
		got, err = serveConfigFrom(c)
		return err
	}
	app := &cli.App{Commands: []*cli.Command{cmd}}
	if err := app.Run([]string{"brig", "serve", "--config", p, "--grace", "9s", "--allow-uid", "5", "--allow-uid", "6", "--admin-gid", "9", "--cpus", "0.5", "--rootfs", "python=/r"}); err != nil {
		t.Fatal(err)
	}
	want := defaultServeConfig()
	want.QueueSize, want.Sandbox.Pool = 7, 2                                                  // from the file
	want.Grace, want.AllowUIDs, want.Sandbox.CPUs = duration(9*time.Second), []int{5, 6}, 0.5 // from flags
	want.AdminGIDs = []int{9}
	want.Sandbox.Rootfs = map[string]string{"python": "/r"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}
}

// Every key of the config file is written down in deploy/brig.toml, with the
// comment that says what it does: a key added to serveConfig alone fails here
// (TestExampleConfigIsTheDefaults can't tell, since an absent key keeps its
// default).
func TestExampleConfigNamesEveryKey(t *testing.T) {
	var sc serveConfig
	md, err := toml.DecodeFile("../../deploy/brig.toml", &sc)
	if err != nil {
		t.Fatal(err)
	}
	written := map[string]bool{}
	for _, k := range md.Keys() {
		written[k.String()] = true
	}
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			key := prefix + f.Tag.Get("toml")
			t.Run(key, func(t *testing.T) {
				if !written[key] {
					t.Errorf("got no %s in deploy/brig.toml, want it there with its default and a comment", key)
				}
			})
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(duration(0)) {
				walk(key+".", f.Type)
			}
		}
	}
	walk("", reflect.TypeOf(sc))
}
