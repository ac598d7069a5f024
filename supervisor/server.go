package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/internal/text"
	"github.com/brig-sandbox/brig/jail"
)

// ndjson is the media type of event streams.
const ndjson = "application/x-ndjson"

// bodyReadTimeout bounds the reading of a request, body included (at most 4 MiB).
var bodyReadTimeout = time.Minute

// streamWriteTimeout bounds each write of a stream, and the writing of any
// other answer (recorder): a client that stops reading loses its stream (the
// run goes on, and can be reattached) or its connection instead of holding a
// goroutine forever. A variable for the tests.
var streamWriteTimeout = 30 * time.Second

// peerKey is the context key of a connection's peer credentials.
type peerKey struct{}

// connKey is the context key of a request's connection (clientContext).
type connKey struct{}

// hangUpPoll is how often clientContext asks whether a client that has
// half-closed its connection has since closed it.
const hangUpPoll = 250 * time.Millisecond

// peer is who is on the other end of a connection, by SO_PEERCRED and
// SO_PEERGROUPS.
type peer struct {
	ok       bool // the credentials could be read
	uid, gid int
	pid      int
	// groups are the peer's supplementary groups when it connected; nil when
	// the kernel could not tell them (the peer is then judged by its primary gid
	// alone, which can only give it less).
	groups []int
}

// withPeer puts a connection's peer credentials, read when it was accepted
// (connLimiter, readPeer: Serve's listener), in its context: every request on
// it is checked against them.
func (s *Service) withPeer(ctx context.Context, c net.Conn) context.Context {
	p := peer{uid: -1, gid: -1} // allowed nothing
	if pc, ok := c.(*peerConn); ok {
		p = pc.peer
	}
	return context.WithValue(context.WithValue(ctx, peerKey{}, p), connKey{}, c)
}

// clientContext is a context that ends once r's client has gone, or at
// cancel. Go's server ends a request's own context when its read of the
// connection meets the end, which a client's half-close (shutdown(SHUT_WR)
// once its request is sent, as socat does) does as well as its going away;
// a half-closed client still reads the answer and must get it, not an empty
// 200, nor its run of a generated id stopped. On a Unix socket poll tells the
// two apart: POLLHUP only once the peer has closed both ways. So once r's
// context ends, the connection is polled until it hangs up.
func clientContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	// Only once r's context ends: a request answered before costs no
	// goroutine.
	stop := context.AfterFunc(r.Context(), func() {
		t := time.NewTicker(hangUpPoll)
		defer t.Stop()
		for !hungUp(r) {
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
		cancel()
	})
	return ctx, func() { stop(); cancel() }
}

// hungUp reports whether r's client has closed its connection, not only
// shut down its writing; a connection it can't ask counts as closed.
func hungUp(r *http.Request) bool {
	sc, ok := r.Context().Value(connKey{}).(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	hup := true
	if err := raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		_, err := unix.Poll(fds, 0)
		hup = err != nil || fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
	}); err != nil {
		return true
	}
	return hup
}

// query reads r's query strictly, taking only the parameters named: a pair
// that Go's parser would drop (one with a ';', a bad escape), a parameter the
// path does not take and one given twice are refused, not ignored, so that a
// request never does less than it says (an audit's ?uid=65534;x=1 acted on
// the caller's own run, and POST /v1/runs?id=x ran under a generated id).
func query(r *http.Request, takes ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, invalid("", "the query %q can't be read (%v); write it as name=value pairs joined by '&', escaped as in a URL", r.URL.RawQuery, err)
	}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		switch {
		case name == "id" && r.Method == http.MethodPost:
			return nil, invalid(name, "is not a query parameter: put the run's id in the body, {\"id\": %q, ...}", q.Get(name))
		case !slices.Contains(takes, name):
			return nil, invalid(name, "is not a query parameter of %s %s; %s", r.Method, r.URL.Path, takesWhat(takes))
		case len(q[name]) > 1:
			return nil, invalid(name, "is given %d times in the query; give it once", len(q[name]))
		}
	}
	return q, nil
}

// takesWhat says which query parameters a path takes.
func takesWhat(takes []string) string {
	if len(takes) == 0 {
		return "it takes none"
	}
	return "it takes only " + strings.Join(takes, ", ")
}

func peerOf(ctx context.Context) peer {
	p, _ := ctx.Value(peerKey{}).(peer)
	return p
}

// allowed reports whether p may use the API: its uid is allowed, or it is a
// member (by primary or supplementary group, as the socket file's group
// counts it) of an allowed group.
func (s *Service) allowed(p peer) bool {
	return p.ok && (slices.Contains(s.cfg.AllowUIDs, p.uid) || p.inAny(s.cfg.AllowGIDs))
}

// admin reports whether p sees every uid's runs: root, or a member (by primary
// or supplementary group) of a configured admin group.
func (s *Service) admin(p peer) bool {
	return p.ok && (p.uid == 0 || p.inAny(s.cfg.AdminGIDs))
}

// inAny reports whether p's primary gid or one of its supplementary groups
// is one of gids.
func (p peer) inAny(gids []int) bool {
	if slices.Contains(gids, p.gid) {
		return true
	}
	for _, g := range p.groups {
		if slices.Contains(gids, g) {
			return true
		}
	}
	return false
}

// canonicalPath reports whether p is a path as the routes write it: absolute,
// without empty, "." or ".." segments and without a trailing slash. ServeMux
// answers any other path with a redirect to its cleaned form, and a redirect
// for /v1/runs/../../etc/passwd invites a client to follow it somewhere else.
func canonicalPath(p string) bool {
	return p == "/" || (strings.HasPrefix(p, "/") && path.Clean(p) == p)
}

// routes is the API. Every path also has a method-less pattern, so that a wrong
// method gets 405 in the API's error shape, and "/" answers the rest with 404.
// A path that is not canonical never reaches the mux (it would redirect): it is
// no route, so it gets the same 404. r.URL.Path is the decoded path, so %2e%2e
// and %2f are judged as the dots and slashes they stand for.
func (s *Service) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		mux.Handle(pattern, s.guard(pattern, h))
		if strings.Contains(pattern, " ") { // a route with its method
			s.metrics.route(pattern)
		}
	}
	handle("POST /v1/runs", s.postRun)
	handle("GET /v1/runs/{id}", s.getRun)
	handle("GET /v1/runs/{id}/events", s.getEvents)
	handle("DELETE /v1/runs/{id}", s.deleteRun)
	// The API's other paths take no query either: one sent is refused, as
	// on the run paths, not ignored. (/metrics and /openapi.yaml are not the
	// API's: a scraper's parameters are its own.)
	noQuery := func(h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
		return func(w http.ResponseWriter, r *http.Request) error {
			if _, err := query(r); err != nil {
				return err
			}
			return h(w, r)
		}
	}
	handle("GET /v1/limits", noQuery(s.getLimits))
	handle("GET /v1/health", noQuery(s.getHealth))
	handle("GET /metrics", func(w http.ResponseWriter, r *http.Request) error {
		s.metrics.handler().ServeHTTP(w, r)
		return nil
	})
	handle("GET /openapi.yaml", func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "application/yaml")
		_, err := w.Write(api.OpenAPI)
		return err
	})
	for p, allow := range map[string]string{
		"/v1/runs": "POST", "/v1/runs/{id}": "GET, DELETE", "/v1/runs/{id}/events": "GET",
		"/v1/limits": "GET", "/v1/health": "GET", "/metrics": "GET", "/openapi.yaml": "GET",
	} {
		refuse := func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Allow", allow)
			return newError(api.ErrorMethodNotAllowed, "%s takes %s, not %s", r.URL.Path, allow, r.Method)
		}
		handle(p, refuse)
		// net/http's mux answers HEAD on a GET route, which api/openapi.yaml
		// does not describe, and which on the event stream would hold its
		// connection without a byte until the run ended: HEAD is refused as
		// every other method the Allow does not name.
		// (Counted under the path, as the other refusals.)
		if strings.Contains(allow, "GET") {
			mux.Handle("HEAD "+p, s.guard(p, refuse))
		}
	}
	notFound := func(w http.ResponseWriter, r *http.Request) error {
		return newError(api.ErrorNotFound, "no such endpoint %s %s; the API is described at GET /openapi.yaml", r.Method, r.URL.Path)
	}
	handle("/", notFound)
	noRoute := s.guard("/", notFound)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !canonicalPath(r.URL.Path) {
			noRoute.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// guard checks the peer, runs h, writes its error in the API's shape, and logs
// one line per request.
func (s *Service) guard(route string, h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		begin := time.Now()
		rec := &recorder{ResponseWriter: w}
		p := peerOf(r.Context())
		var err error
		if !s.allowed(p) {
			// Nor does it keep the connection for more.
			w.Header().Set("Connection", "close")
			err = newError(api.ErrorForbidden, "this service serves only its configured users and groups; uid %d (gid %d, groups %v) is not one of them: ask the operator to add it to allow_uids or allow_gids", p.uid, p.gid, p.groups)
		} else {
			err = h(rec, r)
		}
		if err != nil {
			var ae *apiError
			if errors.As(err, &ae) && route == "POST /v1/runs" {
				s.metrics.refused.WithLabelValues(ae.body.Code).Inc()
			}
			if !rec.wrote {
				writeError(rec, err)
			}
		}
		s.metrics.request(route, rec.statusCode())
		attrs := []any{logMethod, text.ClipMiddle(r.Method, maxFieldBytes), logPath, text.ClipMiddle(r.URL.Path, maxFieldBytes), logStatus, rec.statusCode(),
			logDuration, time.Since(begin).Milliseconds(), logPeerUID, p.uid}
		if rec.runID != "" {
			attrs = append(attrs, logID, rec.runID)
		}
		var ae *apiError
		if errors.As(err, &ae) && ae.runID != "" && rec.runID == "" {
			attrs = append(attrs, logID, ae.runID)
		}
		if errors.As(err, &ae) {
			attrs = append(attrs, logErrCode, ae.body.Code, "message", redactUserinfo(ae.body.Message))
		} else if err != nil {
			attrs = append(attrs, "err", err)
		}
		level := slog.LevelInfo
		if rec.statusCode() >= http.StatusInternalServerError && rec.statusCode() != http.StatusServiceUnavailable {
			level = slog.LevelError // a defect, or damage (API.md keeps 500 for those)
		}
		s.log.Log(r.Context(), level, "request", attrs...)
	})
}

// userinfoRE finds the user and password of a URL ("://user:secret@"), which a
// refusal quotes as the request gave it (a package given as a git URL, a
// domain given as a URL).
var userinfoRE = regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://)[^/?#@\s"']*@`)

// redactUserinfo is msg with the user and password of every URL in it left
// out, for the log: the request's own answer keeps them, the operator's log
// does not (as the registries' URLs are logged redacted).
func redactUserinfo(msg string) string {
	return userinfoRE.ReplaceAllString(msg, "${1}REDACTED@")
}

// recorder notes the status a handler wrote, for the request's log line, and
// bounds the writing of the answer: from its first byte, streamWriteTimeout
// (a stream then sets a deadline of its own for each event). A client that
// does not read its answers (a pipeline of requests it never reads) otherwise
// held its connection, a goroutine and a descriptor, for good.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	// runID is the run a POST /v1/runs named or made (logRun), for its
	// request line: a 200, 409 or 429 could not be told apart from another's
	// (the operator probe of 2026-12-06).
	runID string
}

// logRun names the run id in w's request line.
func logRun(w http.ResponseWriter, id string) {
	if rec, ok := w.(*recorder); ok && id != "" {
		rec.runID = id
	}
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
		r.bound()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
		r.bound()
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) bound() {
	http.NewResponseController(r.ResponseWriter).SetWriteDeadline(time.Now().Add(streamWriteTimeout))
}

// Unwrap lets http.ResponseController reach the connection (Flush, deadlines).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) statusCode() int {
	if !r.wrote {
		return http.StatusOK
	}
	return r.status
}

// maxDiscardBytes and discardTime bound what discardBody reads.
const (
	maxDiscardBytes = 64 << 20
	discardTime     = 10 * time.Second
)

// discardBody reads and drops the rest of a request body after its answer has
// been sent. Many clients (Python's http.client, Node's http) send a whole
// body before they read the response: had the connection been closed with
// their body unread, they would see a broken pipe or a reset instead of the
// answer, which a harness takes for a network failure and retries. A client
// that waits for the answer (Expect: 100-continue, or one that reads while it
// writes) has it at once. A body larger than maxDiscardBytes, or slower than
// discardTime, is cut off.
func discardBody(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	if rc.Flush() != nil || r.Header.Get("Expect") != "" {
		return // Go's server sent no 100 Continue: the client sends no body
	}
	if rc.EnableFullDuplex() != nil || rc.SetReadDeadline(time.Now().Add(discardTime)) != nil {
		return
	}
	io.CopyN(io.Discard, r.Body, maxDiscardBytes)
}

func (s *Service) postRun(w http.ResponseWriter, r *http.Request) error {
	// refuse answers before the body is read, then drops the body, so that a
	// client that sends it all first reads the answer, not a broken pipe.
	refuse := func(err error) error {
		writeError(w, err)
		discardBody(w, r)
		return err // answered already: guard only counts and logs it
	}
	if _, err := query(r); err != nil {
		return refuse(err)
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return refuse(invalid("", "the body is sent with Content-Encoding %q, which this service does not decode; send the JSON as it is", ce))
	}
	tooLarge := func() error {
		return newError(api.ErrorTooLarge, "the request body is over %d bytes; send less: the code is at most %d characters, and env at most %d entries", api.MaxBodyBytes, api.MaxCodeChars, api.MaxEnvEntries)
	}
	// A body its length declares too large is refused before it is sent, not
	// once 4 MiB of it have come (or the client has waited out the read).
	if r.ContentLength > api.MaxBodyBytes {
		return refuse(tooLarge())
	}
	body, err := s.readBody(w, r)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return refuse(err)
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return invalid("", "the request, its body included, did not arrive within %v; send the whole body at once", bodyReadTimeout)
		}
		// The connection's error without its addresses (a read of
		// this service's socket path).
		var oe *net.OpError
		if errors.As(err, &oe) {
			err = oe.Err
		}
		return invalid("", "the request body could not be read: %v; send it again", err)
	}
	req, aerr := decodeRequest(body)
	if aerr != nil {
		return aerr
	}
	logRun(w, req.ID)
	run, rec, err := s.submit(req, peerOf(r.Context()).uid)
	if err != nil {
		return err
	}
	if run != nil {
		logRun(w, run.id)
	}
	if wantsStream(r) {
		return s.stream(w, r, run, rec)
	}
	if run != nil {
		ctx, cancel := clientContext(r)
		defer cancel()
		select {
		case <-run.done:
		case <-ctx.Done():
			// The client went away. A run it named goes on and can be
			// fetched later; one whose id the service made is stopped: the
			// result would have told the client its id, so no one could
			// ever fetch or stop it, and its program (perhaps networked)
			// would run unseen.
			if req.ID == "" {
				s.log.Info("stopping a run whose client went away before it learnt the run's id", logID, run.id)
				run.stop(errClientGone)
			}
			return nil
		}
		// The run is over: its answer waits for room rather than be refused,
		// which would lose a result whose id the service made. (Runs, not
		// connections, bound how many answers wait so.)
		res := run.snapshot()
		release, err := s.replies.wait(ctx, peerOf(r.Context()).uid, replySize(res))
		if err != nil {
			return nil // the client went away
		}
		defer release()
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	return answerRecord(w, rec)
}

// wantsStream reports whether the client asked for NDJSON events: its Accept
// names application/x-ndjson with a weight (q, RFC 9110 12.4.2) above zero and
// no lower than the JSON result's. Each type weighs what the most specific
// range that matches it says (application/json before application/* before
// */*), so "application/json;q=0, */*" refuses the result, which taking the
// highest of the three had answered with (the contract probe of 2026-12-06).
// "application/json, application/x-ndjson;q=0.5" gets the result,
// "application/x-ndjson;q=0" nothing streamed, and "*/*" alone the result:
// the stream is given only to a client that names it.
func wantsStream(r *http.Request) bool {
	// weight is a type's q and how specific the range that gave it is: 3 for
	// the type itself, 2 for its type/*, 1 for */*.
	type weight struct {
		q    float64
		spec int
	}
	var stream, result weight
	take := func(w *weight, q float64, spec int) {
		switch {
		case spec > w.spec:
			*w = weight{q, spec}
		case spec == w.spec:
			w.q = max(w.q, q)
		}
	}
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, params, _ := strings.Cut(part, ";")
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f >= 0 && f <= 1 {
					q = f
				}
			}
		}
		switch mt = strings.ToLower(strings.TrimSpace(mt)); mt {
		case ndjson:
			take(&stream, q, 3)
		case "application/json":
			take(&result, q, 3)
		case "application/*":
			take(&stream, q, 2)
			take(&result, q, 2)
		case "*/*":
			take(&stream, q, 1)
			take(&result, q, 1)
		}
	}
	return stream.spec == 3 && stream.q > 0 && stream.q >= result.q
}

// respond answers with res, within the service's replyMemory.
func (s *Service) respond(w http.ResponseWriter, r *http.Request, res *api.Result) error {
	release, err := s.replies.take(peerOf(r.Context()).uid, replySize(res))
	if err != nil {
		return err
	}
	defer release()
	writeJSON(w, http.StatusOK, res)
	return nil
}

// answerRecord answers with the result of a run's record, within the room
// readRecord took for it.
func answerRecord(w http.ResponseWriter, rec *record) error {
	defer rec.release()
	writeJSON(w, http.StatusOK, resultOf(rec))
	return nil
}

// replyMemory bounds the memory of the large answers being written at once: a
// result, or a finished run's events, is held and encoded whole (about twice
// its JSON, which is up to six times its output: a control character is
// written \u0001). Each uid may hold replyShare of it. Without it, the red
// team's 100 connections that asked for a result of 6 MB of JSON and did not
// read took the service 1.5 GB, and a uid may have 1024. An answer that would
// pass either bound is refused with 503 at once (waiting would hold its record
// meanwhile); one of less than replySmall is not counted. Variables for the
// tests.
var (
	replyMemory int64 = 256 << 20
	replyShare  int64 = 64 << 20
	replySmall  int64 = 1 << 20
)

// replyBudget is the room of the large answers being written (replyMemory),
// by the uid they are written to.
type replyBudget struct {
	mu    sync.Mutex
	used  int64
	byUID map[int]int64
	// freed is closed, and replaced, when room is given back (wait).
	freed chan struct{}
}

// take holds n bytes of the room for an answer to uid; release gives them
// back. It fails, holding nothing, when n would pass the service's room or
// the uid's share. (An answer larger than a share takes the whole share.)
func (b *replyBudget) take(uid int, n int64) (release func(), err error) {
	release, _ = b.tryTake(uid, n)
	if release == nil {
		e := newError(api.ErrorUnavailable, "the service is writing many large answers at once (%d MiB in all, %d MiB for each uid; this one about %d MiB); retry after the Retry-After seconds", replyMemory>>20, replyShare>>20, max(1, n>>20))
		e.retryAfter = 1
		return nil, e
	}
	return release, nil
}

// wait is take, waiting for the room until ctx ends.
func (b *replyBudget) wait(ctx context.Context, uid int, n int64) (release func(), err error) {
	for {
		release, freed := b.tryTake(uid, n)
		if release != nil {
			return release, nil
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// tryTake is take's work: the release, or nil and a channel closed when room
// is next given back.
func (b *replyBudget) tryTake(uid int, n int64) (release func(), freed <-chan struct{}) {
	if n < replySmall {
		return func() {}, nil
	}
	n = min(n, replyShare)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.freed == nil {
		b.freed, b.byUID = make(chan struct{}), map[int]int64{}
	}
	if b.used+n > replyMemory || b.byUID[uid]+n > replyShare {
		return nil, b.freed
	}
	b.used += n
	b.byUID[uid] += n
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.used -= n
		if b.byUID[uid] -= n; b.byUID[uid] == 0 {
			delete(b.byUID, uid)
		}
		close(b.freed)
		b.freed = make(chan struct{})
	}, nil
}

// replySize is about the most memory an answer with res takes to write: its
// output and connections as JSON writes them (replyOfJSON).
func replySize(res *api.Result) int64 {
	n := jsonStringSize(res.Stdout) + jsonStringSize(res.Stderr) + jsonStringSize(res.Message)
	for _, c := range res.Network.Connections {
		n += jsonStringSize(c.Host) + 128
	}
	return replyOfJSON(n)
}

// replyOfJSON is the memory an answer of n bytes of JSON takes to write:
// twice n (the encoder's buffer grows by doubling), and a margin for the
// rest.
func replyOfJSON(n int64) int64 { return 2*n + 16<<10 }

// jsonStringSize is the length of s as encoding/json writes it (without HTML
// escapes): quotes, two bytes for \n, \r, \t, \b, \f, " and \\, six for other
// control characters, U+2028, U+2029 and each invalid byte (\ufffd).
func jsonStringSize(s string) int64 {
	n := int64(2)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n += 2
			case c < 0x20:
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			n += 6
		default:
			n += int64(size)
		}
		i += size
	}
	return n
}

// resultOf is the Result of a journal record.
func resultOf(rec *record) *api.Result {
	if rec.Result != nil {
		return rec.Result
	}
	return pendingResult("", api.Request{Language: rec.Language, Network: &api.Network{Mode: rec.Network}})
}

// bodyMemory bounds the memory of the request bodies being read at once (a
// body is at most api.MaxBodyBytes): 150 bodies of 4 MiB held unsent by one
// peer took the service 878 MB in the API audit, and nothing bounded how many.
// A body waits for its room for at most bodyWait, then is refused with 503.
// Variables for the tests.
var (
	bodyMemory int64 = 256 << 20
	bodyWait         = 10 * time.Second
)

// readBody reads r's body, at most api.MaxBodyBytes, within the service's
// bodyMemory: its declared length, or the bound when it declares none.
func (s *Service) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	need := int64(api.MaxBodyBytes)
	if r.ContentLength >= 0 {
		need = r.ContentLength
	}
	ctx, cancel := context.WithTimeout(r.Context(), bodyWait)
	err := s.bodies.Acquire(ctx, need)
	cancel()
	if err != nil {
		e := newError(api.ErrorUnavailable, "the service is reading many requests' bodies at once (%d MiB in all); retry after the Retry-After seconds", bodyMemory>>20)
		e.retryAfter = 1
		return nil, e
	}
	defer s.bodies.Release(need)
	rd := http.MaxBytesReader(w, r.Body, api.MaxBodyBytes)
	if r.ContentLength < 0 {
		return io.ReadAll(rd)
	}
	// Its length known, read into a buffer of that size: io.ReadAll's growth
	// held up to twice as much.
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(rd, body); err != nil {
		return nil, err
	}
	return body, nil
}

// stream writes a run's events as NDJSON, from the first, until its result.
// A finished run's are written from its record, within replyMemory; a running
// run's come as it makes them, each event at most a read of its output.
func (s *Service) stream(w http.ResponseWriter, r *http.Request, run *run, rec *record) error {
	if run == nil {
		defer rec.release()
	}
	w.Header().Set("Content-Type", ndjson)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // api.Marshal says why
	emit := func(ev api.Event) error {
		rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if err := enc.Encode(ev); err != nil {
			return err
		}
		return rc.Flush()
	}
	rc.Flush()
	if run == nil {
		for _, ev := range replay(rec) {
			if err := emit(ev); err != nil {
				return nil // the client is gone; nothing to report to it
			}
		}
		return nil
	}
	ctx, cancel := clientContext(r)
	defer cancel()
	run.follow(ctx, emit) // an error is the client's going: the run goes on
	return nil
}

// lookupRequest finds the run that r's path names, as its peer may see it.
func (s *Service) lookupRequest(r *http.Request) (*run, *record, error) {
	q, err := query(r, ownerParam)
	if err != nil {
		return nil, nil, err
	}
	var owner *int
	if q.Has(ownerParam) {
		v := q.Get(ownerParam)
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == math.MaxUint32 {
			return nil, nil, invalid(ownerParam, "%q is not a uid; give the decimal uid of the peer that created the run", v)
		}
		uid := int(n)
		owner = &uid
	}
	return s.lookup(peerOf(r.Context()), r.PathValue("id"), owner)
}

func (s *Service) getRun(w http.ResponseWriter, r *http.Request) error {
	run, rec, err := s.lookupRequest(r)
	if err != nil {
		return err
	}
	if run != nil {
		return s.respond(w, r, run.snapshot())
	}
	return answerRecord(w, rec)
}

func (s *Service) getEvents(w http.ResponseWriter, r *http.Request) error {
	run, rec, err := s.lookupRequest(r)
	if err != nil {
		return err
	}
	return s.stream(w, r, run, rec)
}

// deleteRun stops a run and answers with its result; a run that has already
// finished keeps its result.
func (s *Service) deleteRun(w http.ResponseWriter, r *http.Request) error {
	run, rec, err := s.lookupRequest(r)
	if err != nil {
		return err
	}
	if run == nil {
		return answerRecord(w, rec)
	}
	run.stop(errDeleted)
	ctx, cancel := clientContext(r)
	defer cancel()
	select {
	case <-run.done:
	case <-ctx.Done():
		return nil
	}
	return s.respond(w, r, run.snapshot())
}

func (s *Service) getLimits(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, s.limits())
	return nil
}

func (s *Service) limits() api.Limits {
	def := func(v int) *int { return &v }
	return api.Limits{
		TimeoutSeconds:     api.Bound{Min: api.MinTimeoutSeconds, Max: api.MaxTimeoutSeconds, Default: def(api.DefaultTimeoutSeconds)},
		MemoryMiB:          api.Bound{Min: api.MinMemoryMiB, Max: api.MaxMemoryMiB, Default: def(api.DefaultMemoryMiB)},
		CodeChars:          api.Bound{Min: api.MinCodeChars, Max: api.MaxCodeChars},
		Packages:           api.Bound{Min: 0, Max: api.MaxPackages, Default: def(0)},
		PackageChars:       api.Bound{Min: api.MinPackageChars, Max: api.MaxPackageChars},
		EnvEntries:         api.Bound{Min: 0, Max: api.MaxEnvEntries, Default: def(0)},
		Domains:            api.Bound{Min: api.MinDomains, Max: api.MaxDomains},
		IDChars:            api.Bound{Min: api.MinIDChars, Max: api.MaxIDChars},
		StdoutChars:        api.MaxStdoutChars,
		StderrChars:        api.MaxStderrChars,
		BodyBytes:          api.MaxBodyBytes,
		WritableFilesShare: float64(jail.ScratchBytes(1<<30)) / (1 << 30),
		Processes:          s.cfg.RunProcesses,
		CPUs:               s.cfg.RunCPUs,
		Languages:          api.Strings(api.Languages),
		NetworkModes:       s.cfg.NetworkModes,
		DefaultNetworkMode: api.NetworkNone,
		IDPattern:          api.IDPattern,
		EnvNamePattern:     api.EnvNamePattern,
		ReservedEnv:        jail.ReservedEnvNames(),
		Egress:             s.egressLimits(),
		Install:            s.installLimits(),
	}
}

// installLimits are the bounds of a run's package install, nil when the host
// installs no packages.
func (s *Service) installLimits() *api.InstallLimits {
	p := s.cfg.Packages
	if len(p.languages()) == 0 {
		return nil
	}
	return &api.InstallLimits{
		TimeoutSeconds: p.InstallTimeout.Seconds(),
		MemoryMiB:      p.InstallMemoryMiB,
	}
}

// egressLimits are the bounds of a networked run's connections, nil when the
// host offers mode none alone.
func (s *Service) egressLimits() *api.EgressLimits {
	if !slices.ContainsFunc(s.cfg.NetworkModes, func(m string) bool { return api.NetworkMode(m).Online() }) {
		return nil
	}
	e := s.cfg.Egress.WithDefaults()
	return &api.EgressLimits{MaxConns: e.MaxConns, ConnsPerSecond: e.ConnsPerSecond, MaxBytes: e.MaxBytes,
		HandshakeTimeoutSeconds: e.HandshakeTimeout.Seconds()}
}

func (s *Service) getHealth(w http.ResponseWriter, r *http.Request) error {
	running, queued := s.adm.counts()
	s.mu.Lock()
	status := "ok"
	if s.draining {
		status = "draining"
	}
	s.mu.Unlock()
	if s.journal.lostErr() != nil {
		status = "failing" // the journal is lost: new runs are refused
	}
	writeJSON(w, http.StatusOK, api.Health{
		Status:           status,
		Languages:        s.host.Languages,
		CgroupMode:       s.host.CgroupMode,
		NetworkModes:     s.cfg.NetworkModes,
		Rootfs:           s.host.Rootfs,
		Running:          running,
		Queued:           queued,
		Registries:       s.cfg.registries(),
		PackageLanguages: s.cfg.Packages.languages(),
	})
	return nil
}
