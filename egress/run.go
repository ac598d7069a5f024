package egress

// Connection is one attempted connection of a run, allowed or not, as the
// Result's network block lists it.
type Connection struct {
	Host    string
	Port    int
	Allowed bool
	// Rule is the Decision's rule.
	Rule                     string
	BytesSent, BytesReceived int64
}

// Run is one networked run's DNS server and proxies, bound inside its network
// namespace and served from the supervisor's goroutines.
type Run struct{}

// Start binds a run's DNS server (UDP and TCP, 127.0.0.1:53), transparent proxy
// (127.0.0.1:80 and :443) and CONNECT proxy (127.0.0.1:ProxyPort) inside the
// network namespace of the process pid (the run's sandbox init), and serves them
// until Close. onDecision, when set, is called once per decision as it is made
// (for the run's live egress events); it must not block.
func Start(cfg *Config, pol Policy, pid int, onDecision func(Connection)) (*Run, error) {
	panic("unimplemented: helper X")
}

// ProxyPort is the CONNECT proxy's port inside every run's namespace.
const ProxyPort = 3128

// Env is the environment a networked run's program gets: the proxy variables
// in both cases, pointing at the CONNECT proxy.
func Env() map[string]string {
	panic("unimplemented: helper X")
}

// Close stops the run's listeners and every connection still open, and returns
// every attempted connection in the order they were attempted, with their
// final byte counts.
func (r *Run) Close() []Connection {
	panic("unimplemented: helper X")
}
