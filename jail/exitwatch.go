package jail

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// exitWatch learns of processes' exits from the kernel's taskstats records,
// which it sends to listeners before it tears down the exiting process's
// address space (taskstats_exit comes before exit_mm in do_exit). Anything
// else learns of the exit after that teardown, a pidfd, the parent's wait and
// EOF on the process's pipes alike: for a zygote's child, which maps the
// zygote's address space, 0.75 to 1 ms later at the median, a third of a warm
// run's latency, and for node 2.3 ms (`python3
// bench/measure/exit_notice.py [node]`).
//
// A record carries the wait status and the pid in the host's pid namespace.
// It comes from the kernel only (the sender's port id is 0, which no process
// can send from) and is sent for every exit on the host: the watch hands on
// those it was asked for, and keeps the last recentExits of the rest for a
// cold run that asks after the fact (expectChild). One lost (the socket's buffer full) costs only
// time, since the zygote or the init still reports every exit.
type exitWatch struct {
	sock *os.File // a generic netlink socket, non-blocking, in the poller
	buf  []byte   // the reader's, reused: records come for every exit on the host

	mu      sync.Mutex
	waiters map[int]chan uint32 // by pid
	// recent are the last exits heard, oldest first from next, for a waiter
	// that asks after the fact (expectChild).
	recent [recentExits]exitRecord
	next   int
}

// recentExits bounds exitWatch.recent: the exits heard on the whole host
// between a cold program's exit and the service's learning its pid (the
// init's "started" message and a read of /proc), a few milliseconds.
const recentExits = 256

// exitRecord is one process's end, as its taskstats record gives it.
type exitRecord struct {
	pid, ppid int // in the host's pid namespace
	ws        uint32
}

// The taskstats interface (linux/taskstats.h, linux/acct.h); the record
// itself is x/sys's unix.Taskstats.
const (
	taskstatsCmdGet              = 1
	taskstatsCmdAttrRegisterMask = 3
	taskstatsTypeStats           = 3
	taskstatsTypeAggrPID         = 4
	// acctGroup (AGROUP) flags the record of a thread group's last exit.
	acctGroup = 0x20
)

// newExitWatch registers a taskstats listener for every CPU. It fails where
// the kernel has no taskstats (CONFIG_TASKSTATS) or the caller lacks
// CAP_NET_ADMIN; runs then learn of exits from the zygote or the init alone.
func newExitWatch() (*exitWatch, error) {
	fam, err := netlink.GenlFamilyGet("TASKSTATS")
	if err != nil {
		return nil, fmt.Errorf("finding the kernel's taskstats family: %w", err)
	}
	cpus, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("opening a generic netlink socket: %w", err)
	}
	w := &exitWatch{sock: os.NewFile(uintptr(fd), "taskstats"), buf: make([]byte, 64<<10), waiters: map[int]chan uint32{}}
	fail := func(what string, err error) (*exitWatch, error) {
		w.sock.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fail("binding the taskstats socket", err)
	}
	// Every exit on the host comes here; a burst of them must not overflow
	// it before the reader gets to them.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20); err != nil {
		return fail("sizing the taskstats socket", err)
	}
	req := nl.NewNetlinkRequest(int(fam.ID), unix.NLM_F_ACK)
	req.AddData(&nl.Genlmsg{Command: taskstatsCmdGet, Version: 1})
	req.AddData(nl.NewRtAttr(taskstatsCmdAttrRegisterMask, nl.ZeroTerminated(strings.TrimSpace(string(cpus)))))
	if err := unix.Sendto(fd, req.Serialize(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fail("registering for taskstats", err)
	}
	if err := w.awaitAck(req.Seq); err != nil {
		return fail("registering for taskstats", err)
	}
	go w.read()
	return w, nil
}

// receive reads the next datagram from the kernel into w.buf, waiting in the
// poller, and parses it; datagrams from anyone else (the sender's port id is
// not 0) are skipped.
func (w *exitWatch) receive() ([]syscall.NetlinkMessage, error) {
	rc, err := w.sock.SyscallConn()
	if err != nil {
		return nil, err
	}
	for {
		var n int
		var from unix.Sockaddr
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), w.buf, 0)
			return rerr != unix.EAGAIN
		})
		if err == nil {
			err = rerr
		}
		if err != nil {
			return nil, err
		}
		if a, ok := from.(*unix.SockaddrNetlink); !ok || a.Pid != 0 {
			continue
		}
		return syscall.ParseNetlinkMessage(w.buf[:n])
	}
}

// awaitAck reads until the kernel's answer to request seq, and returns the
// error it carries. Records of exits may come before it.
func (w *exitWatch) awaitAck(seq uint32) error {
	w.sock.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer w.sock.SetReadDeadline(time.Time{})
	for {
		msgs, err := w.receive()
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Type != unix.NLMSG_ERROR || m.Header.Seq != seq {
				continue
			}
			if len(m.Data) < 4 {
				return errors.New("a short answer")
			}
			if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
				return syscall.Errno(-errno)
			}
			return nil
		}
	}
}

// expect returns the channel that gets pid's wait status once it exits (see
// groupExit for which exits). forget must follow.
func (w *exitWatch) expect(pid int) <-chan uint32 {
	ch := make(chan uint32, 1)
	w.mu.Lock()
	w.waiters[pid] = ch
	w.mu.Unlock()
	return ch
}

// expectChild is expect for a pid learnt once the process may have exited
// already: a cold program, whose pid the service reads from its init's
// children after the init says it started. An exit heard before is matched
// by the pid and the parent's, the init's: for that pair to name another
// process, the init's pid and then the program's would have had to be used
// again since, within recentExits exits.
func (w *exitWatch) expectChild(pid, parent int) <-chan uint32 {
	ch := make(chan uint32, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiters[pid] = ch
	for _, r := range w.recent {
		if r.pid == pid && r.ppid == parent {
			ch <- r.ws
			break
		}
	}
	return ch
}

// forget drops pid's channel.
func (w *exitWatch) forget(pid int) {
	w.mu.Lock()
	delete(w.waiters, pid)
	w.mu.Unlock()
}

// close ends the watch; its reader stops.
func (w *exitWatch) close() { w.sock.Close() }

// read delivers each record of a process's end to its waiter, until the
// socket is closed.
func (w *exitWatch) read() {
	for {
		msgs, err := w.receive()
		if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EINTR) || errors.Is(err, syscall.EINVAL) {
			continue // records were lost, or one was malformed: their runs hear from the zygote
		}
		if err != nil {
			return // closed
		}
		for _, m := range msgs {
			r, ok := groupExit(m)
			if !ok {
				continue
			}
			w.mu.Lock()
			w.recent[w.next] = r
			w.next = (w.next + 1) % recentExits
			ch := w.waiters[r.pid]
			w.mu.Unlock()
			if ch != nil {
				select {
				case ch <- r.ws:
				default:
				}
			}
		}
	}
}

// groupExit reads a taskstats message: the pid of a process whose last
// thread exited, its parent's, and its wait status. A record is sent for each thread that
// exits, under its own id, with its thread group's id in ac_tgid; the last of
// a group's is flagged AGROUP, and every thread of a group that exits
// together records the group's status (do_group_exit), so that one is the
// process's end, whichever thread it was (TestExitWatch: a leader that exits
// while a thread runs, a thread that exits the process, a thread's SIGSEGV).
func groupExit(m syscall.NetlinkMessage) (r exitRecord, ok bool) {
	if m.Header.Type < unix.NLMSG_MIN_TYPE || len(m.Data) < nl.SizeofGenlmsg {
		return r, false
	}
	attrs, err := nl.ParseRouteAttr(m.Data[nl.SizeofGenlmsg:])
	if err != nil {
		return r, false
	}
	for _, a := range attrs {
		if a.Attr.Type != taskstatsTypeAggrPID {
			continue
		}
		inner, err := nl.ParseRouteAttr(a.Value)
		if err != nil {
			continue
		}
		for _, b := range inner {
			if b.Attr.Type != taskstatsTypeStats {
				continue
			}
			// The kernel's struct may be older (shorter: its tgid then reads
			// 0, and nothing matches) or newer (longer) than this one.
			var ts unix.Taskstats
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&ts)), unsafe.Sizeof(ts)), b.Value)
			if ts.Ac_flag&acctGroup != 0 && ts.Ac_tgid != 0 {
				return exitRecord{pid: int(ts.Ac_tgid), ppid: int(ts.Ac_ppid), ws: ts.Ac_exitcode}, true
			}
		}
	}
	return r, false
}
