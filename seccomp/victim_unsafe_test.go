//go:build linux && amd64

package seccomp

import (
	"fmt"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The raw calls below pass pointers to the kernel: each conversion to uintptr
// sits in the call expression, so the pointee stays alive through the call.

// lowerCoreLimit tries to lower RLIMIT_CORE to 0 in the three ways a program
// can, and reports each errno and the limit read back (with prlimit64 and no
// new limit, as glibc's getrlimit does) after each.
func lowerCoreLimit() string {
	zero := unix.Rlimit{}
	var out []string
	read := func() string {
		var got unix.Rlimit
		if _, _, errno := unix.RawSyscall6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_CORE, 0, uintptr(unsafe.Pointer(&got)), 0, 0); errno != 0 {
			return "read " + errnoOutcome(errno)
		}
		return fmt.Sprintf("limit %d %d", got.Cur, got.Max)
	}
	_, _, errno := unix.RawSyscall(unix.SYS_SETRLIMIT, unix.RLIMIT_CORE, uintptr(unsafe.Pointer(&zero)), 0)
	out = append(out, "setrlimit "+errnoOutcome(errno)+", "+read())
	_, _, errno = unix.RawSyscall6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_CORE, uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
	out = append(out, "prlimit64 set "+errnoOutcome(errno)+", "+read())
	var old unix.Rlimit
	_, _, errno = unix.RawSyscall6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_CORE, uintptr(unsafe.Pointer(&zero)), uintptr(unsafe.Pointer(&old)), 0, 0)
	out = append(out, "prlimit64 set and get "+errnoOutcome(errno)+", "+read())
	return strings.Join(out, "; ")
}
