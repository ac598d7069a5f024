package egress

import (
	"net"
	"strings"

	"github.com/miekg/dns"
)

// dnsTTL is the TTL of the loopback answers: short, so that a program that
// caches does not keep an answer past a run's life.
const dnsTTL = 5

// localNames answer 127.0.0.1 whatever the policy: the run's own host name
// (jail sets it to "sandbox") and localhost.
var localNames = map[string]bool{"localhost": true, "sandbox": true}

// serveDNS answers one query from the run. A name the policy allows gets
// 127.0.0.1 for A (the transparent proxy, which resolves the real name itself
// when a connection comes), an empty NOERROR answer for AAAA (IPv6 has no way
// out, and no answer makes clients fall back to A at once) and for every other
// type. A name the policy refuses gets NXDOMAIN. No query is ever forwarded, so
// a query cannot carry data out of the run.
//
// The policy decides names with their ports, and a query has none: the name is
// decided as for port 443, the port nearly every allowed connection uses. A
// connection to another port is decided again with its port by the proxy.
//
// Only denied names are decisions (a log line, an onDecision call and an entry
// in Close's list, once per name): an allowed answer is not a connection, and
// the connection that follows is decided and listed by the proxy.
func (r *Run) serveDNS(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	m.RecursionAvailable = true
	defer w.WriteMsg(m) //nolint:errcheck // a lost answer is retried by the client
	if len(q.Question) != 1 || q.Opcode != dns.OpcodeQuery {
		m.Rcode = dns.RcodeFormatError
		return
	}
	qs := q.Question[0]
	name := normalHost(qs.Name)
	if qs.Qclass != dns.ClassINET {
		m.Rcode = dns.RcodeRefused
		return
	}
	if !localNames[name] && !strings.HasSuffix(name, ".localhost") {
		if d := r.pol.DecideName(name, 443); !d.Allowed {
			m.Rcode = dns.RcodeNameError
			r.deniedName(name, d)
			return
		}
	}
	if qs.Qtype == dns.TypeA {
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: qs.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: dnsTTL},
			A:   net.IPv4(127, 0, 0, 1),
		})
	}
}
