package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/client"
	"github.com/brig-sandbox/brig/internal/apitest"
)

// dialEnv, when set in the environment, makes the test binary a dialer: it
// connects to the socket its value names and passes the connection back over
// fd 3 (SCM_RIGHTS), then exits. Started with other credentials, it gives the
// test a connection whose peer, for the service, is another uid: the kernel
// records the peer's uid, gid and groups at connect(2).
const dialEnv = "BRIG_TEST_DIAL"

// dialForTest is the dialer's whole life.
func dialForTest(socket string) int {
	c, err := net.Dial("unix", socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test dialer:", err)
		return 1
	}
	f, err := c.(*net.UnixConn).File()
	if err != nil {
		fmt.Fprintln(os.Stderr, "test dialer:", err)
		return 1
	}
	if err := unix.Sendmsg(3, []byte{0}, unix.UnixRights(int(f.Fd())), nil, 0); err != nil {
		fmt.Fprintln(os.Stderr, "test dialer: sending the connection:", err)
		return 1
	}
	return 0
}

// credential is who a test peer is.
type credential struct {
	uid, gid int
	groups   []int
}

// dialAs connects to socket as cred, through a dialer process of those
// credentials (the test binary re-executed through /proc/self/exe, which needs
// no search permission on the build directory).
func dialAs(socket string, cred credential) (net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "dial-ours"), os.NewFile(uintptr(fds[1]), "dial-theirs")
	defer ours.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), dialEnv+"="+socket)
	cmd.ExtraFiles = []*os.File{theirs}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	groups := make([]uint32, len(cred.groups))
	for i, g := range cred.groups {
		groups[i] = uint32(g)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(cred.uid), Gid: uint32(cred.gid), Groups: groups}}
	err = cmd.Run()
	theirs.Close()
	if err != nil {
		return nil, fmt.Errorf("dialing as uid %d: %v: %s", cred.uid, err, stderr.Bytes())
	}
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(int(ours.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("receiving the connection of uid %d: %w", cred.uid, err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("receiving the connection of uid %d: %d messages, %v", cred.uid, len(msgs), err)
	}
	rights, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(rights) != 1 {
		return nil, fmt.Errorf("receiving the connection of uid %d: %v fds, %v", cred.uid, rights, err)
	}
	f := os.NewFile(uintptr(rights[0]), "conn")
	defer f.Close()
	return net.FileConn(f)
}

// clientAs is a client of ts whose every connection is made as cred, with each
// exchange checked against api/openapi.yaml.
func clientAs(t *testing.T, ts *testService, cred credential) *client.Client {
	t.Helper()
	c := client.New(ts.socket)
	c.HTTP.Transport = apitest.Transport(t, &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dialAs(ts.socket, cred) },
	})
	t.Cleanup(c.HTTP.CloseIdleConnections)
	return c
}

// openToEveryone lets any uid connect to ts's socket (the allow-list still
// decides who gets in): the test peers are not in the socket's group.
func openToEveryone(t *testing.T, ts *testService) {
	t.Helper()
	if err := os.Chmod(filepath.Dir(ts.socket), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ts.socket, 0o666); err != nil {
		t.Fatal(err)
	}
}

// rawAs sends one request with c and returns its status and body.
func rawAs(t *testing.T, c *client.Client, method, path string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://brig"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// Test peers: uids and groups that no account on the host is expected to use.
const (
	uidA, uidB, uidAdmin, uidAdminPrimary = 61001, 61002, 61003, 61004
	gidAdmins                             = 61100
)

// TestRunOwnership: a peer sees, streams and stops only the runs its own uid
// created (404 for others', as for an unknown id); one client id under two uids
// is two runs; root and the admin group see every run and name the owner with
// ?uid= when an id is ambiguous. Ownership survives a restart.
func TestRunOwnership(t *testing.T) {
	opts := func(c *Config) {
		c.AllowUIDs = []int{0, uidA, uidB, uidAdmin, uidAdminPrimary}
		c.AdminGIDs = []int{gidAdmins}
	}
	ts := newTestService(t, opts)
	openToEveryone(t, ts)
	ctx := context.Background()
	a := clientAs(t, ts, credential{uid: uidA, gid: uidA})
	b := clientAs(t, ts, credential{uid: uidB, gid: uidB})
	// One admin by a supplementary group, one by its primary gid.
	admins := map[string]*client.Client{
		"root":                   ts.client,
		"admin by supplementary": clientAs(t, ts, credential{uid: uidAdmin, gid: uidAdmin, groups: []int{5, gidAdmins}}),
		"admin by primary gid":   clientAs(t, ts, credential{uid: uidAdminPrimary, gid: gidAdmins}),
	}
	const random = "import os; print(os.urandom(8).hex())"

	// The same id and body from A and from B: two runs, each its own output.
	resA, err := a.Run(ctx, request("python", random, withRunID("shared")))
	if err != nil {
		t.Fatalf("A's run: %v", err)
	}
	resB, err := b.Run(ctx, request("python", random, withRunID("shared")))
	if err != nil {
		t.Fatalf("B's run of the same id: %v", err)
	}
	if resA.Stdout == "" || resA.Stdout == resB.Stdout {
		t.Fatalf("got stdout %q for A and %q for B, want two runs with their own output", resA.Stdout, resB.Stdout)
	}
	// A long run of A's that B must not see, stream or stop.
	long := request("python", "import time; time.sleep(120)", withRunID("a-long"))
	timeout := 300
	long.TimeoutSeconds = &timeout
	ls := openLiveStream(t, a, long)
	ls.waitEvent(t, api.EventAccepted, time.Minute)

	t.Run("retry within a uid", func(t *testing.T) {
		again, err := a.Run(ctx, request("python", random, withRunID("shared")))
		if err != nil || again.Stdout != resA.Stdout {
			t.Fatalf("got %v, %v for A's retry, want A's first result (stdout %q)", again, err, resA.Stdout)
		}
		_, err = a.Run(ctx, request("python", "print(2)", withRunID("shared")))
		apiErr(t, err, http.StatusConflict, "id")
		// B's different body never conflicted with A's id: B's id is its own.
		_, err = b.Run(ctx, request("python", "print(2)", withRunID("shared")))
		apiErr(t, err, http.StatusConflict, "id")
	})

	t.Run("another uid gets 404 as for an unknown id", func(t *testing.T) {
		for _, tc := range []struct{ name, method, suffix string }{
			{"GET", http.MethodGet, ""},
			{"events", http.MethodGet, "/events"},
			{"DELETE", http.MethodDelete, ""},
			{"GET naming the owner", http.MethodGet, "?uid=" + itoa(uidA)},
			{"DELETE naming the owner", http.MethodDelete, "?uid=" + itoa(uidA)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp, body := rawAs(t, b, tc.method, "/v1/runs/a-long"+tc.suffix)
				e := checkAPIErrorShape(t, resp, body, http.StatusNotFound, api.ErrorNotFound)
				path := "/v1/runs/never-used" + strings.Replace(tc.suffix, itoa(uidA), itoa(uidB), 1)
				uresp, ubody := rawAs(t, b, tc.method, path)
				u := checkAPIErrorShape(t, uresp, ubody, http.StatusNotFound, api.ErrorNotFound)
				if want := strings.ReplaceAll(u["message"].(string), "never-used", "a-long"); e["message"] != want {
					t.Errorf("got message %q, want the unknown id's %q", e["message"], want)
				}
			})
		}
		res, err := a.Get(ctx, "a-long")
		if err != nil || res.State == api.StateFinished {
			t.Fatalf("got %+v, %v for A after B's DELETE, want A's run still going", res, err)
		}
	})

	t.Run("each uid sees its own run of a shared id", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			c    *client.Client
			want string
		}{{"A", a, resA.Stdout}, {"B", b, resB.Stdout}} {
			res, err := tc.c.Get(ctx, "shared")
			if err != nil || res.Stdout != tc.want {
				t.Errorf("%s: got %+v, %v, want its own stdout %q", tc.name, res, err, tc.want)
			}
			got, err := tc.c.Events(ctx, "shared", nil)
			if err != nil || got.Stdout != tc.want {
				t.Errorf("%s events: got %+v, %v, want its own stdout %q", tc.name, got, err, tc.want)
			}
		}
		// Naming one's own uid is allowed.
		resp, body := rawAs(t, b, http.MethodGet, "/v1/runs/shared?uid="+itoa(uidB))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), strings.TrimSpace(resB.Stdout)) {
			t.Errorf("got %d %s for B naming itself, want 200 and its run", resp.StatusCode, body)
		}
	})

	t.Run("a bad uid parameter", func(t *testing.T) {
		for _, v := range []string{"x", "-1", "4294967295", ""} {
			resp, body := rawAs(t, a, http.MethodGet, "/v1/runs/shared?uid="+v)
			if e := checkAPIErrorShape(t, resp, body, http.StatusBadRequest, api.ErrorInvalidRequest); e["field"] != "uid" {
				t.Errorf("uid=%q: got field %v, want \"uid\"", v, e["field"])
			}
		}
	})

	t.Run("admins see every run", func(t *testing.T) {
		for name, c := range admins {
			t.Run(name, func(t *testing.T) {
				// a-long has one owner: an admin needs no ?uid=.
				res, err := c.Get(ctx, "a-long")
				if err != nil || res.ID != "a-long" || res.State == api.StateFinished {
					t.Fatalf("got %+v, %v, want A's run, going", res, err)
				}
				// shared has two: the admin is told to choose.
				resp, body := rawAs(t, c, http.MethodGet, "/v1/runs/shared")
				e := checkAPIErrorShape(t, resp, body, http.StatusConflict, api.ErrorConflict)
				if m := e["message"].(string); !strings.Contains(m, itoa(uidA)) || !strings.Contains(m, itoa(uidB)) || !strings.Contains(m, "?uid=") {
					t.Errorf("got message %q, want it to name both uids and ?uid=", m)
				}
				if e["field"] != "id" {
					t.Errorf("got field %v, want \"id\" (README: every 409's)", e["field"])
				}
				for _, o := range []struct {
					uid  int
					want string
				}{{uidA, resA.Stdout}, {uidB, resB.Stdout}} {
					resp, body := rawAs(t, c, http.MethodGet, "/v1/runs/shared?uid="+itoa(o.uid))
					if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), strings.TrimSpace(o.want)) {
						t.Errorf("uid %d: got %d %s, want 200 and stdout %q", o.uid, resp.StatusCode, body, o.want)
					}
					resp, body = rawAs(t, c, http.MethodGet, "/v1/runs/shared/events?uid="+itoa(o.uid))
					if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), strings.TrimSpace(o.want)) {
						t.Errorf("uid %d events: got %d %s, want 200 and stdout %q", o.uid, resp.StatusCode, body, o.want)
					}
				}
			})
		}
	})

	t.Run("an admin's own run of an id comes first", func(t *testing.T) {
		own := ts.mustRun(t, request("python", "print('root')", withRunID("shared")))
		res, err := ts.client.Get(ctx, "shared")
		if err != nil || res.Stdout != own.Stdout {
			t.Fatalf("got %+v, %v, want root's own run", res, err)
		}
	})

	t.Run("an admin stops another uid's run", func(t *testing.T) {
		res, err := admins["admin by supplementary"].Stop(ctx, "a-long")
		if err != nil || res.Reason != api.ReasonStopped {
			t.Fatalf("got %+v, %v, want A's run stopped", res, err)
		}
		if final, err := ls.wait(t, time.Minute); err != nil || final.Reason != api.ReasonStopped {
			t.Fatalf("got A's stream ending with %+v, %v, want reason stopped", final, err)
		}
	})

	t.Run("after a restart", func(t *testing.T) {
		ts.stop(t)
		ts.start(t, restartConfig(ts, opts))
		openToEveryone(t, ts)
		resp, body := rawAs(t, b, http.MethodGet, "/v1/runs/a-long")
		checkAPIErrorShape(t, resp, body, http.StatusNotFound, api.ErrorNotFound)
		res, err := a.Get(ctx, "a-long")
		if err != nil || res.Reason != api.ReasonStopped {
			t.Fatalf("got %+v, %v for A, want its stopped run", res, err)
		}
		res, err = b.Get(ctx, "shared")
		if err != nil || res.Stdout != resB.Stdout {
			t.Fatalf("got %+v, %v for B, want its own run", res, err)
		}
	})

	t.Run("each run is logged with its owner", func(t *testing.T) {
		ts.stop(t)
		owners := map[float64]int{}
		for _, l := range ts.logs.Lines("run finished") {
			if l["id"] == "shared" {
				owners[l["peer_uid"].(float64)]++
			}
		}
		if owners[uidA] != 1 || owners[uidB] != 1 || owners[0] != 1 {
			t.Fatalf("got runs of \"shared\" by uid %v, want one each for %d, %d and 0", owners, uidA, uidB)
		}
	})
}

// The dialer really connects as the uid it is given: the service logs it.
func TestDialAsGivesThePeerUID(t *testing.T) {
	ts := newTestService(t, func(c *Config) { c.AllowUIDs = []int{0} })
	openToEveryone(t, ts)
	c := clientAs(t, ts, credential{uid: uidB, gid: uidB})
	_, err := c.Limits(context.Background())
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusForbidden || !strings.Contains(ce.API.Message, "uid "+strconv.Itoa(uidB)) {
		t.Fatalf("got %v, want 403 naming uid %d (not on the allow-list)", err, uidB)
	}
}

// TestAllowedBySupplementaryGroup: allow_gids admits a peer by its primary
// gid or one of its supplementary groups, as the socket file's group and
// admin_gids count them (the API audit found only the primary gid counted,
// and a 403 that told the peer to ask for a group it was in).
func TestAllowedBySupplementaryGroup(t *testing.T) {
	const gidAllowed = 61200
	ts := newTestService(t, func(c *Config) { c.AllowUIDs = []int{0}; c.AllowGIDs = []int{gidAllowed} })
	openToEveryone(t, ts)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cred credential
		ok   bool
	}{
		{"primary", credential{uid: uidA, gid: gidAllowed}, true},
		{"supplementary", credential{uid: uidA, gid: uidA, groups: []int{5, gidAllowed}}, true},
		{"neither", credential{uid: uidB, gid: uidB, groups: []int{5}}, false},
	} {
		_, err := clientAs(t, ts, tc.cred).Health(ctx)
		if tc.ok && err != nil {
			t.Errorf("%s: got %v, want allowed", tc.name, err)
		}
		if !tc.ok {
			apiErr(t, err, http.StatusForbidden, "")
		}
	}
}

// TestQueueIsSharedBetweenUIDs: a uid that keeps every slot and its share of
// the queue leaves room for another uid's run, which gets the next free slot
// before the flood's queued run, and a refusal says which bound it met.
func TestQueueIsSharedBetweenUIDs(t *testing.T) {
	ts := newTestService(t, func(c *Config) {
		c.AllowUIDs = []int{0, uidA, uidB}
		c.MaxConcurrent, c.QueueSize, c.QueueTotal = 2, 1, 2
	})
	openToEveryone(t, ts)
	ctx := context.Background()
	a := clientAs(t, ts, credential{uid: uidA, gid: uidA})
	b := clientAs(t, ts, credential{uid: uidB, gid: uidB})
	counts := func(wantRunning, wantQueued int) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			running, queued := ts.adm.counts()
			if running == wantRunning && queued == wantQueued {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("got %d running and %d queued, want %d and %d", running, queued, wantRunning, wantQueued)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// A's two long runs hold both slots.
	for _, id := range []string{"a-long-1", "a-long-2"} {
		long := request("python", "import time; time.sleep(120)", withRunID(id))
		timeout := 300
		long.TimeoutSeconds = &timeout
		openLiveStream(t, a, long).waitEvent(t, api.EventAccepted, time.Minute)
	}
	counts(2, 0)
	type answer struct {
		res *api.Result
		err error
	}
	stamp := "import time; print(time.time_ns())"
	queued := func(c *client.Client, id string) chan answer {
		ch := make(chan answer, 1)
		go func() {
			res, err := c.Run(ctx, request("python", stamp, withRunID(id)))
			ch <- answer{res, err}
		}()
		return ch
	}
	aQueued := queued(a, "a-queued")
	counts(2, 1)
	_, err := a.Run(ctx, request("python", stamp, withRunID("a-refused")))
	if ce := apiErr(t, err, http.StatusTooManyRequests, ""); ce.API.Code != api.ErrorQueueFull || !strings.Contains(ce.API.Message, "of your uid") {
		t.Fatalf("got %q: %s, want queue_full naming the uid's share", ce.API.Code, ce.API.Message)
	}
	bQueued := queued(b, "b-queued") // A's share is full, the queue is not
	counts(2, 2)
	_, err = ts.client.Run(ctx, request("python", stamp, withRunID("root-refused")))
	if ce := apiErr(t, err, http.StatusTooManyRequests, ""); ce.API.Code != api.ErrorQueueFull || !strings.Contains(ce.API.Message, "queue of 2 runs is full") {
		t.Fatalf("got %q: %s, want queue_full for the whole queue", ce.API.Code, ce.API.Message)
	}
	// A slot frees while A still runs one: B's run, queued after A's, is next.
	if _, err := a.Stop(ctx, "a-long-1"); err != nil {
		t.Fatal(err)
	}
	answers := map[string]answer{}
	for name, ch := range map[string]chan answer{"A": aQueued, "B": bQueued} {
		select {
		case answers[name] = <-ch:
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s's queued run got no result within 2 minutes", name)
		}
		if ans := answers[name]; ans.err != nil || ans.res.Outcome != api.OutcomeSucceeded {
			t.Fatalf("%s's queued run: got %+v, %v; want it succeeded", name, ans.res, ans.err)
		}
	}
	stampOf := func(name string) int64 {
		n, err := strconv.ParseInt(strings.TrimSpace(answers[name].res.Stdout), 10, 64)
		if err != nil {
			t.Fatalf("%s's stdout %q: %v", name, answers[name].res.Stdout, err)
		}
		return n
	}
	if stampOf("B") > stampOf("A") {
		t.Errorf("A's queued run ran before B's (at %d ns against %d), want B's first: A had a slot, B none", stampOf("A"), stampOf("B"))
	}
	if _, err := a.Stop(ctx, "a-long-2"); err != nil {
		t.Fatal(err)
	}
}
