package sysmon

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestMost(t *testing.T) {
	for _, tc := range []struct {
		name         string
		seen         map[int]int
		tid, n, next int
	}{
		{"none", map[int]int{}, 0, 0, 0},
		{"one", map[int]int{7: 3}, 7, 3, 0},
		{"runner-up after", map[int]int{7: 9, 8: 2}, 7, 9, 2},
		{"three", map[int]int{5: 1, 7: 9, 8: 4}, 7, 9, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tid, n, next := most(tc.seen)
			if tid != tc.tid || n != tc.n || next != tc.next {
				t.Errorf("got %d, %d, %d, want %d, %d, %d", tid, n, next, tc.tid, tc.n, tc.next)
			}
		})
	}
}

// TestSetSlack finds this test binary's system monitor, sets its slack, and
// checks that the thread found is the monitor: the first thread the runtime
// starts after the main one (runtime.main starts it before anything else can
// start a thread). Which thread that is comes from the kernel's order of
// thread ids, not from timing, so a loaded machine can't change the answer;
// what the slack saves is measured by bench/measure/sysmon_slack.sh.
func TestSetSlack(t *testing.T) {
	if unix.Geteuid() != 0 {
		t.Skip("setting another thread's timer slack needs CAP_SYS_NICE: run as root")
	}
	stop := make(chan struct{})
	defer close(stop)
	for range 2 {
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
					unix.Nanosleep(&unix.Timespec{Nsec: 100_000}, nil) // blocks its processor 100 us
				}
			}
		}()
	}
	tid, err := SetSlack(time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile("/proc/"+strconv.Itoa(tid)+"/timerslack_ns", []byte("50000"), 0)
	if got := readInt(t, "/proc/"+strconv.Itoa(tid)+"/timerslack_ns"); got != 1_000_000 {
		t.Errorf("the monitor's slack: got %d ns, want 1000000", got)
	}
	if first := firstThread(t); tid != first {
		t.Errorf("found thread %d; the runtime's first thread after the main one, its monitor, is %d", tid, first)
	}
}

// firstThread is the thread this process started first after its main
// thread. The kernel hands out ids in increasing order from the last one
// given, wrapping at pid_max, so threads started after the main one (whose
// id is the process's) come in the order of their ids' distance past it.
func firstThread(t *testing.T) int {
	t.Helper()
	pid, max := unix.Getpid(), readInt(t, "/proc/sys/kernel/pid_max")
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	first, best := 0, max
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil || tid == pid {
			continue
		}
		if d := (tid - pid + max) % max; d < best {
			first, best = tid, d
		}
	}
	if first == 0 {
		t.Fatal("this process has no thread but its main one")
	}
	return first
}

func readInt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
