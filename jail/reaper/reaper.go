// Package reaper is the pid 1 of a zygote's sandbox where the kernel lets the
// supervisor build the sandbox's root itself (jail's rootbuild.go), so that a
// sandbox whose program is a zygote's child no longer pays a Go init's start,
// threads and exit. It is a few system calls in C (reaper.c), made without a
// C library, built two ways: by make into bin/brig-reaper, a static executable
// of about 10 kB (jail.DefaultReaperPath); and into every binary that links
// this package, brig and the test binaries, whose constructor runs it before
// their Go runtime starts when they are started as it.
//
// Its only jobs are those of pid 1: it holds the sandbox's namespaces, which
// the supervisor's thread builds the root in and the zygote's child joins, and
// it reaps the orphans the program leaves it. The supervisor starts it as
// `<binary> reaper` in fresh namespaces, moves it into the run's cgroups and
// then writes its Config on descriptor 3. It then makes its cgroup namespace,
// goes back to nice 0, drops to the init's unprivileged identity with every
// capability set empty, re-arms its parent-death signal, sets no_new_privs,
// loads the Config's filter (seccomp.Reaper: what it does from then on,
// nothing else), says "ready" on descriptor 4 as the Go init does
// (pid1.Message), closes every other descriptor and waits for SIGCHLD. The
// status pipe stays open until it dies, which is how the supervisor learns
// that it did. An error is an "error" message (its errno's number: there is
// no strerror without a C library) and exit status 1; EOF before the Config,
// exit status 0 (the sandbox was discarded). Only a process that is pid 1 and
// has exactly the argument Arg is taken over.
package reaper

/*
#cgo CFLAGS: -O2 -Wall
#include "reaper.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"

	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/seccomp/bpf"
)

// Arg is the reaper's one argument (argv[1]).
const Arg = C.REAPER_ARG

// Its descriptors are the Go init's.
const (
	SpecFD   = C.REAPER_SPEC_FD
	StatusFD = C.REAPER_STATUS_FD
)

var _ = [1]struct{}{}[SpecFD-pid1.SpecFD+StatusFD-pid1.StatusFD] // the same numbers

// Config is what the reaper reads before it hardens itself.
type Config struct {
	// UID and GID are the init's host ids (runIDs.InitUID and InitGID).
	UID, GID int
	// LastCap is the highest capability the kernel knows (pid1.LastCap).
	LastCap int
	// Filter is the reaper's own seccomp filter.
	Filter bpf.Program
}

// Marshal encodes c as the reaper reads it: struct reaper_config, then the
// filter's instructions, little-endian as on every architecture brig runs on.
func (c Config) Marshal() ([]byte, error) {
	if n := len(c.Filter); n == 0 || n > C.REAPER_MAX_FILTER {
		return nil, fmt.Errorf("a reaper filter of %d instructions (1 to %d)", n, C.REAPER_MAX_FILTER)
	}
	if c.UID <= 0 || c.GID <= 0 || c.LastCap < 0 {
		return nil, fmt.Errorf("reaper ids %d:%d, last capability %d: the init's ids are never root's", c.UID, c.GID, c.LastCap)
	}
	b := make([]byte, 0, 20+8*len(c.Filter))
	for _, v := range []int{C.REAPER_VERSION, c.UID, c.GID, c.LastCap, len(c.Filter)} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return append(b, c.Filter.Marshal()...), nil
}
