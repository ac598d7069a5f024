// Package sysmon widens the timer slack of the Go runtime's system monitor,
// the one thread of a Go process that polls.
//
// The monitor (runtime.sysmon) sleeps 20 us at a time, at the kernel's default
// slack of 50 us, for a millisecond after each time it takes a processor
// back from a goroutine blocked in a system call, and only then backs off.
// The service blocks in system calls on every run (cgroup files, mkdir and
// rmdir, the journal's fdatasync), so under load the monitor hardly backs
// off: in brig bench -c 2 it woke 3,900 to 4,700 times a second, each wake a
// timer programmed and fired, in a virtual machine an exit to the host. With
// a slack of a millisecond the kernel may fire its timer up to a millisecond
// late, or with another timer that fires first; the monitor then finds
// fewer system calls long enough to take a processor from, and woke 910 to
// 980 times a second (bench/measure/sysmon_slack.sh, cmd/brig's sysmonSlack
// for what that saved).
//
// Typical use, once, early in a long-lived process:
//
//	tid, err := sysmon.SetSlack(time.Millisecond)
package sysmon

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotFound is SetSlack's error when no thread of the process was seen
// sleeping in the runtime's usleep: the monitor is asleep until the process
// is busy again, or this runtime's monitor sleeps otherwise.
var ErrNotFound = errors.New("the Go runtime's system monitor thread was not found")

// scans bounds how many times find reads every thread's system call: the
// monitor spends nearly all of its time in usleep while a processor is busy,
// and this goroutine's own scanning keeps one busy.
const scans = 200

// SetSlack sets the timer slack of the runtime's system monitor thread to
// slack and returns the thread's id. The kernel's /proc/TID/timerslack_ns
// sets another thread's slack; that needs CAP_SYS_NICE. Threads the monitor
// starts later (to run goroutines when it takes a processor back) inherit the
// slack, so their timed waits may end up to slack late too; a process that
// starts programs from such threads should set its own slack on the thread
// that starts them (prctl PR_SET_TIMERSLACK), as jail's spawner does.
func SetSlack(slack time.Duration) (int, error) {
	tid, err := find()
	if err != nil {
		return 0, err
	}
	path := fmt.Sprintf("/proc/%d/timerslack_ns", tid)
	if err := os.WriteFile(path, []byte(strconv.FormatInt(slack.Nanoseconds(), 10)), 0); err != nil {
		return tid, fmt.Errorf("setting the system monitor's timer slack: %w", err)
	}
	return tid, nil
}

// find returns the thread that is seen sleeping in runtime.usleep, which the
// monitor calls between its rounds; other threads call it only while they
// steal work, for 3 us. The monitor must be seen at least 5 times, and 4
// times as often as any other thread.
func find() (int, error) {
	self := unix.Gettid()
	seen := map[int]int{}
	for range scans {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return 0, fmt.Errorf("listing the process's threads: %w", err)
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || tid == self {
				continue
			}
			if inUsleep(tid) {
				seen[tid]++
			}
		}
		if best, n, next := most(seen); n >= 20 && n >= 4*next {
			return best, nil
		}
	}
	if best, n, next := most(seen); n >= 5 && n >= 4*next {
		return best, nil
	}
	return 0, ErrNotFound
}

// inUsleep reports whether thread tid is in a system call made from
// runtime.usleep. /proc/self/task/TID/syscall gives the call's number, its
// arguments, the stack pointer and, last, the program counter; a thread not
// in a system call reads "running" or a single number.
func inUsleep(tid int) bool {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
	if err != nil {
		return false // it ended meanwhile
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return false
	}
	pc, err := strconv.ParseUint(strings.TrimPrefix(f[len(f)-1], "0x"), 16, 64)
	if err != nil {
		return false
	}
	fn := runtime.FuncForPC(uintptr(pc))
	return fn != nil && strings.TrimSuffix(fn.Name(), ".abi0") == "runtime.usleep"
}

// most returns the thread seen most often, how often, and how often the
// runner-up was seen.
func most(seen map[int]int) (tid, n, next int) {
	for t, c := range seen {
		switch {
		case c > n:
			tid, n, next = t, c, n
		case c > next:
			next = c
		}
	}
	return tid, n, next
}
