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
// checks that the thread found is the one that polls: while two goroutines
// block in short system calls, which keeps the monitor taking processors
// back, it is seen in runtime.usleep and wakes far less often with the
// slack than without.
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
	if tid == unix.Getpid() {
		t.Errorf("found the main thread (%d), which never runs the monitor", tid)
	}
	// Its wakes in 300 ms, with the slack and then without.
	wakes := func() int {
		before := switches(t, tid)
		time.Sleep(300 * time.Millisecond)
		return switches(t, tid) - before
	}
	with := wakes()
	if err := os.WriteFile("/proc/"+strconv.Itoa(tid)+"/timerslack_ns", []byte("50000"), 0); err != nil {
		t.Fatal(err)
	}
	without := wakes()
	t.Logf("thread %d woke %d times in 300 ms with a 1 ms slack, %d with 50 us", tid, with, without)
	if without < 2*with {
		t.Errorf("thread %d woke %d times with the slack and %d without: want it to wake at least twice as often without (is it the monitor?)", tid, with, without)
	}
}

// switches is thread tid's count of voluntary context switches: a sleeping
// monitor's wakes.
func switches(t *testing.T, tid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no voluntary_ctxt_switches in thread %d's status", tid)
	return 0
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
