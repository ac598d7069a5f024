package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/egress"
	"github.com/brig-sandbox/brig/internal/apitest"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/packages"
)

var allModes = []string{api.NetworkNone, api.NetworkRegistries, api.NetworkDomains, api.NetworkAny}

func TestConfigValidateNetwork(t *testing.T) {
	tests := []struct {
		name     string
		cfg      func(*Config)
		wantHint string // a piece of the error; "" when valid
	}{
		{name: "defaults", cfg: func(*Config) {}},
		// Peers' ids (not a network setting, but checked by the same validate).
		{name: "negative allowed uid", cfg: func(c *Config) { c.AllowUIDs = []int{-1} }, wantHint: "allowed uid -1: give an id"},
		{name: "negative allowed gid", cfg: func(c *Config) { c.AllowGIDs = []int{-5} }, wantHint: "allowed gid -5: give an id"},
		// uid_t is 32 bits: a larger id never matched a peer (the operator probe).
		{name: "allowed uid past 32 bits", cfg: func(c *Config) { c.AllowUIDs = []int{1 << 32} }, wantHint: "allowed uid 4294967296: give an id from 0 to 4294967294"},
		{name: "all four modes", cfg: func(c *Config) { c.NetworkModes = allModes }},
		{name: "none only", cfg: func(c *Config) { c.NetworkModes = []string{api.NetworkNone} }},
		{name: "unknown mode", cfg: func(c *Config) { c.NetworkModes = []string{"none", "some"} }, wantHint: `network mode "some": use none, registries, domains or any`},
		{name: "mode twice", cfg: func(c *Config) { c.NetworkModes = []string{"none", "any", "any"} }, wantHint: `"any" is listed twice`},
		{name: "no none", cfg: func(c *Config) { c.NetworkModes = []string{"any"} }, wantHint: `list "none" too`},
		{name: "full egress config", cfg: func(c *Config) {
			c.NetworkModes = allModes
			c.Egress = egress.Config{
				Pins:              map[string]string{"registry.test:443": "127.0.0.1:8443", "files.test:80": "[::1]:8080"},
				AllowPrivateHosts: []string{"internal.example"},
				Resolver:          "127.0.0.1:5353",
				MaxConns:          10, ConnsPerSecond: 2.5, MaxBytes: 1 << 20, HandshakeTimeout: time.Second,
			}
		}},
		{name: "pin of an address", cfg: func(c *Config) { c.Egress.Pins = map[string]string{"10.0.0.1:443": "127.0.0.1:1"} }, wantHint: `egress: pins["10.0.0.1:443"]: "10.0.0.1" is an IP address`},
		{name: "pin without a port", cfg: func(c *Config) { c.Egress.Pins = map[string]string{"registry.test": "127.0.0.1:1"} }, wantHint: `egress: pins["registry.test"]: the key is not host:port`},
		{name: "pin of port 0", cfg: func(c *Config) { c.Egress.Pins = map[string]string{"registry.test:0": "127.0.0.1:1"} }, wantHint: `pins["registry.test:0"]`},
		// Pins compare names as egress normalises them, case folded.
		{name: "pin in upper case", cfg: func(c *Config) { c.Egress.Pins = map[string]string{"Registry.test:443": "127.0.0.1:1"} }},
		{name: "pin to a name", cfg: func(c *Config) { c.Egress.Pins = map[string]string{"registry.test:443": "mirror.test:443"} }, wantHint: `"mirror.test:443" is not ip:port`},
		{name: "pin to port 0", cfg: func(c *Config) { c.Egress.Pins = map[string]string{"registry.test:443": "127.0.0.1:0"} }, wantHint: `"127.0.0.1:0" is not ip:port`},
		{name: "private host wildcard", cfg: func(c *Config) { c.Egress.AllowPrivateHosts = []string{"*.internal.example"} }, wantHint: `egress: allow_private_hosts[0]: "*.internal.example" is a wildcard`},
		{name: "resolver without a port", cfg: func(c *Config) { c.Egress.Resolver = "127.0.0.1" }, wantHint: `egress: resolver "127.0.0.1": give an IP address and a port`},
		{name: "resolver by name", cfg: func(c *Config) { c.Egress.Resolver = "dns.test:53" }, wantHint: `egress: resolver "dns.test:53"`},
		{name: "negative max_conns", cfg: func(c *Config) { c.Egress.MaxConns = -1 }, wantHint: "egress: max_conns -1"},
		{name: "negative rate", cfg: func(c *Config) { c.Egress.ConnsPerSecond = -1 }, wantHint: "egress: conns_per_second -1"},
		{name: "rate NaN", cfg: func(c *Config) { c.Egress.ConnsPerSecond = math.NaN() }, wantHint: "egress: conns_per_second NaN"},
		{name: "negative max_bytes", cfg: func(c *Config) { c.Egress.MaxBytes = -5 }, wantHint: "egress: max_bytes -5"},
		{name: "negative handshake_timeout", cfg: func(c *Config) { c.Egress.HandshakeTimeout = -time.Second }, wantHint: "egress: handshake_timeout -1s"},
		{name: "registry hosts", cfg: func(c *Config) {
			c.RegistryHosts = map[string][]string{"python": {"files.test", "registry.test"}, "javascript": {}}
		}},
		{name: "registry host of an unknown language", cfg: func(c *Config) { c.RegistryHosts = map[string][]string{"ruby": {"gems.test"}} }, wantHint: `registries of "ruby": not a language brig runs`},
		{name: "registry host not normalised", cfg: func(c *Config) { c.RegistryHosts = map[string][]string{"python": {"Registry.test."}} }, wantHint: `registry host "Registry.test." of python: write it as "registry.test"`},
		{name: "registry host an address", cfg: func(c *Config) { c.RegistryHosts = map[string][]string{"javascript": {"192.0.2.1"}} }, wantHint: `is an IP address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{StateDir: t.TempDir()}
			tt.cfg(&cfg)
			err := cfg.Validate()
			if tt.wantHint == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantHint) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantHint)
			}
		})
	}
}

// The egress config gets the service's logger when it has none of its own.
func TestConfigEgressLogger(t *testing.T) {
	cfg := Config{}.withDefaults()
	if cfg.Egress.Logger == nil || cfg.Egress.Logger != cfg.Logger {
		t.Fatalf("got egress logger %p, want the service's %p", cfg.Egress.Logger, cfg.Logger)
	}
}

// The egress config judges the addresses of every language's registry hosts,
// each once, as a registry's, unless it was given its own list.
func TestConfigEgressRegistryHosts(t *testing.T) {
	hosts := map[string][]string{"python": {"files.test", "registry.test"}, "javascript": {"registry.test", "npm.test"}}
	cfg := Config{RegistryHosts: hosts}.withDefaults()
	if want := []string{"registry.test", "npm.test", "files.test"}; !slices.Equal(cfg.Egress.RegistryHosts, want) {
		t.Errorf("got %v, want %v", cfg.Egress.RegistryHosts, want)
	}
	own := Config{RegistryHosts: hosts, Egress: egress.Config{RegistryHosts: []string{}}}.withDefaults()
	if len(own.Egress.RegistryHosts) != 0 {
		t.Errorf("with a list of its own (empty): got %v, want it kept", own.Egress.RegistryHosts)
	}
}

func TestEgressPolicy(t *testing.T) {
	cfg := Config{RegistryHosts: map[string][]string{"python": {"files.test", "registry.test"}, "javascript": {"npm.test"}},
		RegistryPorts: map[string][]int{"python": {80, 443, 3141}}}
	req := func(lang, mode string, domains ...string) api.Request {
		return api.Request{Language: lang, Network: &api.Network{Mode: mode, Domains: domains}}.WithDefaults()
	}
	tests := []struct {
		name string
		req  api.Request
		want egress.Policy
	}{
		{name: "domains normalised, each once", req: req("python", api.NetworkDomains, "Example.COM.", "api.example.com", "example.com"),
			want: egress.Policy{Mode: api.NetworkDomains, Domains: []string{"example.com", "api.example.com"}}},
		{name: "python registries", req: req("python", api.NetworkRegistries),
			want: egress.Policy{Mode: api.NetworkRegistries, Domains: []string{"files.test", "registry.test"}, Ports: []int{80, 443, 3141}}},
		{name: "javascript registries: the web's ports", req: req("javascript", api.NetworkRegistries),
			want: egress.Policy{Mode: api.NetworkRegistries, Domains: []string{"npm.test"}, Ports: []int{80, 443}}},
		{name: "any names nothing", req: req("python", api.NetworkAny), want: egress.Policy{Mode: api.NetworkAny}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cfg.egressPolicy(tt.req)
			if got.Mode != tt.want.Mode || !slices.Equal(got.Domains, tt.want.Domains) || !slices.Equal(got.Ports, tt.want.Ports) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	t.Run("registries of a language without any admit nothing", func(t *testing.T) {
		got := Config{}.egressPolicy(req("python", api.NetworkRegistries))
		if got.Mode != api.NetworkRegistries || len(got.Domains) != 0 {
			t.Fatalf("got %+v, want mode registries and no names", got)
		}
	})
	t.Run("the policy is a copy", func(t *testing.T) {
		got := cfg.egressPolicy(req("python", api.NetworkRegistries))
		got.Domains[0] = "changed.test"
		if cfg.RegistryHosts["python"][0] != "files.test" {
			t.Fatalf("got the config's hosts changed to %v through a policy, want them kept", cfg.RegistryHosts["python"])
		}
	})
}

func TestRuleClass(t *testing.T) {
	tests := []struct{ rule, want string }{
		{"domain example.com", "domain"},
		{"registry registry.test", "registry"},
		{"mode any", "mode_any"},
		{"mode none", "mode_none"},
		{"not in the run's domains", "not_a_domain"},
		{"not a registry host", "not_a_registry"},
		{"ip literal: the proxy dials host names only, never an address the run chose", "ip_literal"},
		{"address public", "address_public"},
		{"address class private (10.0.0.0/8)", "address_class"},
		{"address class metadata (169.254.169.254/32)", "address_class"},
		{"address of this host", "host_address"},
		{"private address allowed by the operator for internal.example", "private_allowed"},
		{"invalid host name", "invalid"},
		{"invalid port", "invalid"},
		{"unknown mode", "invalid"},
		{"connection limit (64 at once)", "limit"},
		{"too many connections", "limit"},
		{"too many connections per second", "limit"},
		{"not a registry port", "not_a_registry"},
		{"the SNI does not match the CONNECT host", "host_mismatch"},
		{"the Host does not match the CONNECT host", "host_mismatch"},
		{"the request target names another host than the Host header", "host_mismatch"},
		// Counted as other before (the network audit).
		{"the Host header names another port than the connection's (use the proxy, 127.0.0.1:3128, for another port)", "host_mismatch"},
		{"the proxy itself", "proxy_itself"},
		{"no SNI in the ClientHello: there is no name to decide on", "no_name"},
		{"no Host header: there is no name to decide on", "no_name"},
		{"no readable request head: the Host header: the port \"abc\" is not a number from 1 to 65535", "malformed"},
		{"no readable ClientHello", "malformed"},
		{"not a proxy request", "malformed"},
		{"the CONNECT target is not host:port", "malformed"},
		{egress.RuleDirect, "direct"},
		{"something new about evil.example", "other"},
		{"", "other"},
	}
	classes := map[string]bool{"limit": true, "other": true}
	for _, rc := range ruleClasses {
		classes[rc.class] = true
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			got := ruleClass(tt.rule)
			if got != tt.want {
				t.Fatalf("ruleClass(%q): got %q, want %q", tt.rule, got, tt.want)
			}
			if !classes[got] {
				t.Fatalf("ruleClass(%q): got %q, not one of the fixed classes", tt.rule, got)
			}
		})
	}
}

// recordEgress counts each connection under bounded labels and lists it, rule
// included, in the Result's words.
func TestRecordEgress(t *testing.T) {
	s := &Service{metrics: newMetrics(newAdmission(1, 2048, 0, 0), "test")}
	conns := []egress.Connection{
		{Host: "api.example.com", Port: 443, Allowed: true, Rule: "domain example.com", BytesSent: 500, BytesReceived: 4000},
		{Host: "evil.example", Port: 80, Allowed: false, Rule: "not in the run's domains"},
		{Host: "www.example.com", Port: 443, Allowed: true, Rule: "domain example.com", BytesSent: 20, BytesReceived: 30, Failure: "the run's byte limit was reached"},
	}
	// And what the run's lists left out: 3 refusals and 1 allowed
	// connection past their bounds, with its bytes.
	omitted := egress.Omitted{
		Decisions: map[bool]map[string]int{
			false: {"not in the run's domains": 3},
			true:  {"domain example.com": 1},
		},
		BytesSent: 1000, BytesReceived: 2000,
	}
	got, left := s.recordEgress(api.NetworkDomains, conns, omitted)
	if left != 4 {
		t.Errorf("got %d left out, want the lists' 4", left)
	}
	want := []api.Connection{
		{Host: "api.example.com", Port: 443, Allowed: true, Rule: "domain example.com", BytesSent: 500, BytesReceived: 4000},
		{Host: "evil.example", Port: 80, Allowed: false, Rule: "not in the run's domains"},
		{Host: "www.example.com", Port: 443, Allowed: true, Rule: "domain example.com", BytesSent: 20, BytesReceived: 30, Failure: "the run's byte limit was reached"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{"allowed by domain", counter(t, s.metrics, "brig_egress_decisions_total", "mode=domains,allowed=true,rule_class=domain"), 3},
		{"refused", counter(t, s.metrics, "brig_egress_decisions_total", "mode=domains,allowed=false,rule_class=not_a_domain"), 4},
		{"bytes sent", counter(t, s.metrics, "brig_egress_bytes_total", "direction=sent"), 1520},
		{"bytes received", counter(t, s.metrics, "brig_egress_bytes_total", "direction=received"), 6030},
		// The two above and metrics.zero's four of the other modes.
		{"decision series", float64(len(series(t, s.metrics, "brig_egress_decisions_total"))), 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
	// No host name reaches a label.
	for labels := range series(t, s.metrics, "brig_egress_decisions_total") {
		if strings.Contains(labels, "example") {
			t.Fatalf("got a host name in the labels %s", labels)
		}
	}
	if got, _ := s.recordEgress(api.NetworkAny, nil, egress.Omitted{}); got == nil || len(got) != 0 {
		t.Fatalf("got %#v for no connections, want an empty list (never null)", got)
	}
}

// A result's connections fit api.MaxConnectionsBytes, and so the result
// api.MaxResultBytes, whatever the names the run tried: what does not fit is
// counted, the connections that got through listed before any refusal.
func TestRecordEgressWithinItsBound(t *testing.T) {
	s := &Service{metrics: newMetrics(newAdmission(1, 2048, 0, 0), "test")}
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 50)
	var conns []egress.Connection
	for i := range egress.MaxRefusals {
		conns = append(conns, egress.Connection{Host: fmt.Sprintf("%05d%s", i, long[5:]), Port: 443, Rule: "not in the run's domains", Failure: strings.Repeat("\x01", 60)})
		if i%2 == 0 {
			conns = append(conns, egress.Connection{Host: fmt.Sprintf("%05d.upstream.test", i), Port: 443, Allowed: true, Rule: "domain upstream.test", BytesSent: 1, Failure: strings.Repeat("\x01", 100)})
		}
	}
	got, left := s.recordEgress(api.NetworkDomains, conns, egress.Omitted{Decisions: map[bool]map[string]int{false: {"not in the run's domains": 7}}})
	b, err := api.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > api.MaxConnectionsBytes {
		t.Errorf("got %d bytes of connections, want at most %d", len(b), api.MaxConnectionsBytes)
	}
	if len(b) < api.MaxConnectionsBytes*9/10 {
		t.Errorf("got %d bytes of connections, want the bound (%d) about filled", len(b), api.MaxConnectionsBytes)
	}
	if len(got)+left != len(conns)+7 {
		t.Errorf("got %d listed and %d left out, want the %d connections and the lists' 7", len(got), left, len(conns))
	}
	allowed := 0
	for i, c := range got {
		if c.Allowed {
			allowed++
		}
		if i > 0 && c.Host[:5] < got[i-1].Host[:5] {
			t.Fatalf("connection %d (%s) listed after %s, want the run's order", i, c.Host, got[i-1].Host)
		}
	}
	if allowed != egress.MaxRefusals/2 {
		t.Errorf("got %d allowed connections listed, want all %d", allowed, egress.MaxRefusals/2)
	}
	// A run of few connections lists them all, as they are.
	few := conns[:3]
	if got, left := s.recordEgress(api.NetworkDomains, few, egress.Omitted{}); len(got) != 3 || left != 0 {
		t.Errorf("got %d listed and %d left out of 3, want all listed", len(got), left)
	}
}

// series are the values of the metric name's series, by their labels written
// "k=v,k=v" in the order of the metric's label names.
func series(t *testing.T, m *metrics, name string) map[string]float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var labels []string
			for _, lp := range mt.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			v := mt.GetCounter().GetValue()
			if mt.Gauge != nil {
				v = mt.GetGauge().GetValue()
			}
			out[strings.Join(labels, ",")] = v
		}
	}
	return out
}

// counter is the value of one series of a counter; labels are written as
// series writes them, sorted by name.
func counter(t *testing.T, m *metrics, name, labels string) float64 {
	t.Helper()
	parts := strings.Split(labels, ",")
	slices.Sort(parts)
	return series(t, m, name)[strings.Join(parts, ",")]
}

func TestOnEgress(t *testing.T) {
	r := newRun("r1", "k", api.Request{Language: "python"}.WithDefaults(), 0, time.Now())
	r.onEgress(egress.Connection{Host: "api.example.com", Port: 443, Allowed: true, Rule: "domain example.com"})
	r.onEgress(egress.Connection{Host: "evil.example", Port: 80, Allowed: false, Rule: "not in the run's domains"})
	r.mu.Lock()
	evs := slices.Clone(r.events[1:])
	r.mu.Unlock()
	yes, no := true, false
	want := []api.Event{
		{Event: api.EventEgress, Host: "api.example.com", Port: 443, Allowed: &yes},
		{Event: api.EventEgress, Host: "evil.example", Port: 80, Allowed: &no},
	}
	if len(evs) != len(want) {
		t.Fatalf("got %d events after accepted, want %d", len(evs), len(want))
	}
	for i := range want {
		g, w := evs[i], want[i]
		if g.Event != w.Event || g.Host != w.Host || g.Port != w.Port || g.Allowed == nil || *g.Allowed != *w.Allowed {
			t.Errorf("event %d: got %+v, want %+v", i, g, w)
		}
	}
	// "allowed": false is written, not left out: a harness tells a refusal.
	b, _ := json.Marshal(evs[1])
	if !strings.Contains(string(b), `"allowed":false`) {
		t.Errorf("got %s, want \"allowed\":false in it", b)
	}

	t.Run("refusals bounded, not what got through", func(t *testing.T) {
		r := newRun("r2", "k", api.Request{Language: "python"}.WithDefaults(), 0, time.Now())
		for range maxRefusalEvents + 10 {
			r.onEgress(egress.Connection{Host: "evil.example", Port: 53})
		}
		// A connection that got through after the flood is an event still.
		r.onEgress(egress.Connection{Host: "api.example.com", Port: 443, Allowed: true})
		r.mu.Lock()
		evs := r.events[1:]
		r.mu.Unlock()
		if len(evs) != maxRefusalEvents+1 {
			t.Fatalf("got %d egress events, want %d refusals and the allowed one", len(evs), maxRefusalEvents)
		}
		if last := evs[len(evs)-1]; last.Host != "api.example.com" || last.Allowed == nil || !*last.Allowed {
			t.Fatalf("got last event %+v, want the allowed connection", last)
		}
	})

	t.Run("replayed from the journal", func(t *testing.T) {
		res := pendingResult("r4", api.Request{Language: "python"}.WithDefaults())
		res.Network.Connections = []api.Connection{
			{Host: "api.example.com", Port: 443, Allowed: true},
			{Host: "evil.example", Port: 0, Allowed: false},
		}
		var got []string
		for _, ev := range replay(&record{Result: res, Started: true}) {
			b, _ := json.Marshal(ev)
			got = append(got, string(b))
		}
		if len(got) != 5 || got[2] != `{"event":"egress","host":"api.example.com","port":443,"allowed":true}` ||
			got[3] != `{"event":"egress","host":"evil.example","port":0,"allowed":false}` {
			t.Fatalf("got %q, want accepted, started, the two egress events with host and port, result", got)
		}
	})

	t.Run("none after the result", func(t *testing.T) {
		r := newRun("r3", "k", api.Request{Language: "python"}.WithDefaults(), 0, time.Now())
		r.finish(pendingResult("r3", r.req))
		r.onEgress(egress.Connection{Host: "late.example", Port: 443, Allowed: true})
		var got []string
		r.follow(context.Background(), func(ev api.Event) error { got = append(got, ev.Event); return nil })
		if !slices.Equal(got, []string{api.EventAccepted, api.EventResult}) {
			t.Fatalf("got events %v, want accepted and result only", got)
		}
	})
}

// availableService is a Service that is never served, for the handlers and
// checks that need no jail (no root). Its exchanges go through the routes
// directly, as root's, checked against api/openapi.yaml.
func availableService(t *testing.T, cfg Config) (*Service, *http.Client) {
	t.Helper()
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := New(cfg, HostInfo{Languages: map[string]string{"python": "3", "javascript": "20"}, CgroupMode: "test", Rootfs: "host"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	h := s.routes()
	direct := roundTripper(func(r *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), peerKey{}, peer{ok: true, uid: 0, gid: 0})))
		return rec.Result(), nil
	})
	return s, &http.Client{Transport: apitest.Transport(t, direct)}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func getJSON(t *testing.T, c *http.Client, path string, v any) {
	t.Helper()
	resp, err := c.Get("http://brig" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: got %d %s, want 200", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// A host that offers the networked modes accepts requests for them, and says
// what it offers in /v1/health and /v1/limits.
func TestNetworkModesOnOffer(t *testing.T) {
	hosts := map[string][]string{"python": {"files.test", "registry.test"}}
	s, c := availableService(t, Config{NetworkModes: []string{api.NetworkNone, api.NetworkRegistries, api.NetworkDomains}, RegistryHosts: hosts})
	for _, tc := range []struct {
		name    string
		network api.Network
		field   string // of the 400; "" when available
	}{
		{name: "none", network: api.Network{Mode: api.NetworkNone}},
		{name: "registries", network: api.Network{Mode: api.NetworkRegistries}},
		{name: "domains", network: api.Network{Mode: api.NetworkDomains, Domains: []string{"example.com"}}},
		{name: "any not on offer", network: api.Network{Mode: api.NetworkAny}, field: "network.mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.network
			err := s.available(api.Request{Language: "python", Network: &n}.WithDefaults())
			if tc.field == "" {
				if err != nil {
					t.Fatalf("got %v, want the mode available", err)
				}
				return
			}
			ae, ok := err.(*apiError)
			if !ok || ae.body.Field != tc.field || !strings.Contains(ae.body.Message, "GET /v1/health lists them") {
				t.Fatalf("got %v, want a 400 on %s that points at /v1/health", err, tc.field)
			}
		})
	}

	var h api.Health
	getJSON(t, c, "/v1/health", &h)
	if want := []string{"none", "registries", "domains"}; !slices.Equal(h.NetworkModes, want) {
		t.Errorf("health: got network_modes %v, want %v", h.NetworkModes, want)
	}
	if !slices.Equal(h.Registries["python"], hosts["python"]) || h.Registries["javascript"] == nil || len(h.Registries["javascript"]) != 0 {
		t.Errorf("health: got registries %v, want python's hosts and an empty list for javascript", h.Registries)
	}
	var l api.Limits
	getJSON(t, c, "/v1/limits", &l)
	if want := []string{"none", "registries", "domains"}; !slices.Equal(l.NetworkModes, want) {
		t.Errorf("limits: got network_modes %v, want %v", l.NetworkModes, want)
	}
	want := api.EgressLimits{MaxConns: egress.DefaultMaxConns, ConnsPerSecond: egress.DefaultConnsPerSecond,
		MaxBytes: egress.DefaultMaxBytes, HandshakeTimeoutSeconds: egress.DefaultHandshakeTimeout.Seconds()}
	if l.Egress == nil || *l.Egress != want {
		t.Errorf("limits: got egress %+v, want %+v", l.Egress, want)
	}
	// A host without a networked mode has no egress bounds to tell, and no
	// registry a run may reach, though it read them for its installer.
	_, none := availableService(t, Config{NetworkModes: []string{api.NetworkNone}, RegistryHosts: hosts})
	var l2 api.Limits
	getJSON(t, none, "/v1/limits", &l2)
	if l2.Egress != nil {
		t.Errorf("limits of a host of mode none: got egress %+v, want none", l2.Egress)
	}
	var h2 api.Health
	getJSON(t, none, "/v1/health", &h2)
	if len(h2.Registries["python"]) != 0 || h2.Registries["python"] == nil {
		t.Errorf("health of a host of mode none: got registries %v, want empty lists", h2.Registries)
	}
	s.recordEgress(api.NetworkDomains, []egress.Connection{{Host: "api.example.com", Port: 443, Allowed: true, Rule: "domain example.com", BytesSent: 7}}, egress.Omitted{})
	var metrics strings.Builder
	resp, err := c.Get("http://brig/metrics")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(&metrics, resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`brig_egress_decisions_total{allowed="true",mode="domains",rule_class="domain"} 1`,
		`brig_egress_bytes_total{direction="sent"} 7`,
	} {
		if !strings.Contains(metrics.String(), "\n"+line+"\n") {
			t.Errorf("got no line %s in /metrics", line)
		}
	}
}

// GET /v1/limits gives the install's bounds when the host installs packages,
// and nothing of them when it installs none.
func TestLimitsInstall(t *testing.T) {
	_, none := availableService(t, Config{})
	var l api.Limits
	getJSON(t, none, "/v1/limits", &l)
	if l.Install != nil {
		t.Errorf("limits of a host without packages: got install %+v, want none", l.Install)
	}
	inst, err := packages.NewInstaller(packages.InstallerConfig{
		Run:        func(context.Context, jail.Spec) (*jail.Result, error) { return nil, errors.New("no installs here") },
		Registries: map[string][]string{"python": {"http://pypi.test/simple/"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := packages.OpenCache(packages.CacheConfig{Dir: t.TempDir(), Installer: inst})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	_, with := availableService(t, Config{Packages: PackagesConfig{Cache: cache, InstallTimeout: 20 * time.Second}})
	getJSON(t, with, "/v1/limits", &l)
	if want := (api.InstallLimits{TimeoutSeconds: 20, MemoryMiB: packages.DefaultInstallMemoryMiB}); l.Install == nil || *l.Install != want {
		t.Errorf("limits of a host with packages: got install %+v, want %+v", l.Install, want)
	}
}
