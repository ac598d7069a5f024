package reaper

/*
#include "reaper.h"
*/
import "C"

import (
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// backstopSignal arms the backstop (reaper.c's wait_signal).
const backstopSignal = unix.Signal(C.REAPER_BACKSTOP_SIGNAL)

// siQueue is SI_QUEUE, the code of a signal sigqueue(3) sends.
const siQueue = -1

// ArmBackstop tells the reaper of pid (in the caller's pid namespace) to end
// its sandbox after d (at least a millisecond, at most a day), unless the
// sandbox is gone before: the bound of a run's time that holds while its
// supervisor is stopped. Only the first of a reaper's arming counts. pid must
// be the caller's child, not yet waited for, so that it names the reaper.
func ArmBackstop(pid int, d time.Duration) error {
	ms := min(max(d.Milliseconds(), 1), C.REAPER_BACKSTOP_MAX_MS)
	var info C.struct_reaper_siginfo
	info.signo, info.code, info.value = C.int32_t(backstopSignal), siQueue, C.uint64_t(ms)
	_, _, errno := unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, uintptr(pid), uintptr(backstopSignal), uintptr(unsafe.Pointer(&info)))
	if errno != 0 {
		return fmt.Errorf("arming the sandbox's time backstop: %w", errno)
	}
	return nil
}
