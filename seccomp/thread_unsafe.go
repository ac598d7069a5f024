package seccomp

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LoadThread installs prog on the calling thread only (no TSYNC): no other thread
// has to be stopped and synchronised, so it costs a fraction of Load. A process
// forked from this thread inherits the filter. The caller must hold
// runtime.LockOSThread, or the goroutine could move to an unfiltered thread, and
// must have set no_new_privs on this thread.
func LoadThread(prog Program) error {
	if len(prog) == 0 || len(prog) > maxInstructions {
		return fmt.Errorf("loading seccomp filter of %d instructions: %w", len(prog), ErrInvalidProgram)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// The kernel copies the program during the call; KeepAlive keeps fprog and
	// prog reachable until it returns.
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(&fprog)
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("loading seccomp filter on this thread: %w", errno)
	}
	return nil
}
