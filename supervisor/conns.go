package supervisor

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
)

// The bounds of the connections the service holds: each costs a descriptor
// and a goroutine, and a local peer, allowed or not, that held connections
// without end (the API audit's 20,000 idle ones) took the descriptors the
// sandboxes need and stopped the service serving anyone. Per uid, so that
// one peer can't take what another needs; in all, well below LimitNOFILE
// (deploy/brig.service: 65536), so that the runs keep theirs. A harness
// needs one connection a run in flight or queued. Variables for the tests.
var (
	maxConnsPerUID = 1024
	maxConns       = 8192
	// maxLingering refused connections at once are read for refusedLinger
	// after their 503 (refuse); past it, one is closed at once.
	maxLingering  = 64
	refusedLinger = time.Second
)

// connLimiter is the service's listener: it reads each connection's peer
// credentials once, when it is accepted (withPeer takes them from the
// peerConn), and answers a connection past its uid's bound or the service's
// with 503 and closes it, rather than let it hold a descriptor.
type connLimiter struct {
	net.Listener
	log *slog.Logger

	lingering atomic.Int64 // refused connections being read (refuse)

	mu      sync.Mutex
	total   int
	byUID   map[int]int
	refused int       // since the last log line
	logged  time.Time // of the last log line of refusals
}

func newConnLimiter(ln net.Listener, log *slog.Logger) *connLimiter {
	return &connLimiter{Listener: ln, log: log, byUID: map[int]int{}}
}

// peerConn is an accepted connection with its peer's credentials; Close
// gives its place back.
type peerConn struct {
	net.Conn
	peer    peer
	release sync.Once
	l       *connLimiter
}

func (c *peerConn) Close() error {
	c.release.Do(func() { c.l.put(c.peer.uid) })
	return c.Conn.Close()
}

// SyscallConn reaches the socket under it (hungUp polls it).
func (c *peerConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, fmt.Errorf("a %T has no descriptor", c.Conn)
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p := readPeer(c, l.log)
		if l.take(p.uid) {
			return &peerConn{Conn: c, peer: p, l: l}, nil
		}
		l.refuse(c, p.uid)
	}
}

// refuse answers c, a connection past a bound, 503 in the API's shape, which
// a client reads as it reads a 503 of a full journal, and closes it. The
// write can't block on a connection that has sent nothing yet (its buffer is
// empty), and is bounded anyway. What the client sent is read and dropped
// until it closes, for refusedLinger at most, on a goroutine: a Unix socket
// closed with unread bytes resets its peer, whose client, busy sending its
// request, then saw a broken pipe instead of the 503 (the contract audit:
// curl 8 times in 10). At most maxLingering at once, so that a flood of
// connections holds no more descriptors than that past the bounds.
func (l *connLimiter) refuse(c net.Conn, uid int) {
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	body, _ := json.Marshal(api.ErrorBody{Error: newError(api.ErrorUnavailable,
		"uid %d holds %d connections to this service, its most (%d a uid, %d in all): close idle ones or reuse them, then retry",
		uid, l.held(uid), maxConnsPerUID, maxConns).body})
	fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s\n", len(body)+1, body)
	if l.lingering.Add(1) > int64(maxLingering) {
		l.lingering.Add(-1)
		c.Close()
		return
	}
	go func() {
		defer l.lingering.Add(-1)
		defer c.Close()
		if hc, ok := c.(interface{ CloseWrite() error }); ok {
			hc.CloseWrite()
		}
		c.SetReadDeadline(time.Now().Add(refusedLinger))
		io.Copy(io.Discard, c)
	}()
}

// take counts a connection of uid, unless it is past a bound; it logs the
// refusals at most once a minute.
func (l *connLimiter) take(uid int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total < maxConns && l.byUID[uid] < maxConnsPerUID {
		l.total++
		l.byUID[uid]++
		return true
	}
	l.refused++
	if time.Since(l.logged) >= time.Minute {
		l.log.Warn("connections refused: a uid, or the service, holds its most", logPeerUID, uid,
			"held_by_uid", l.byUID[uid], "held", l.total, "refused", l.refused, "max_per_uid", maxConnsPerUID, "max", maxConns)
		l.logged, l.refused = time.Now(), 0
	}
	return false
}

func (l *connLimiter) put(uid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byUID[uid]--; l.byUID[uid] == 0 {
		delete(l.byUID, uid)
	}
}

func (l *connLimiter) held(uid int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byUID[uid]
}

// readPeer reads c's peer credentials. The supplementary groups come from
// SO_PEERGROUPS (Linux 4.13), not from /proc/<pid>/status nor the user
// database: the kernel records them at connect(2), with the uid and gid of
// SO_PEERCRED, so they are the groups the peer process really held then. The
// pid may have exited and been reused by the time /proc is read, and the user
// database tells what a login would get, not what this process has (it may
// have dropped or gained groups since). A connection whose credentials can't
// be read is peer{ok: false}, uid -1: allowed nothing.
func readPeer(c net.Conn, log *slog.Logger) peer {
	p := peer{uid: -1, gid: -1}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return p
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return p
	}
	var gerr error
	raw.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err == nil {
			p = peer{ok: true, uid: int(cred.Uid), gid: int(cred.Gid), pid: int(cred.Pid)}
			p.groups, gerr = peerGroups(int(fd))
		}
	})
	if gerr != nil {
		log.Warn("reading the peer's supplementary groups (SO_PEERGROUPS); only its uid and primary gid count", logPeerUID, p.uid, "err", gerr)
	}
	return p
}
