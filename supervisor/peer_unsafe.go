package supervisor

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// peerGroups returns the supplementary groups the peer of the Unix socket fd
// held when it connected (SO_PEERGROUPS, Linux 4.13). x/sys has no wrapper
// for it, and its GetsockoptString stops at the first zero byte, which a gid
// array is full of; so this calls getsockopt(2) itself. The buffer is a
// []uint32 (gid_t) that stays referenced until the call returns; the kernel
// writes at most optlen bytes to it and sets optlen to the size it needs, with
// ERANGE, when the buffer is too small.
func peerGroups(fd int) ([]int, error) {
	buf := make([]uint32, 64)
	for {
		n := uint32(len(buf) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		if errno == unix.ERANGE && int(n/4) > len(buf) {
			buf = make([]uint32, n/4)
			continue
		}
		if errno != 0 {
			return nil, errno
		}
		groups := make([]int, 0, n/4)
		for _, g := range buf[:n/4] {
			groups = append(groups, int(g))
		}
		return groups, nil
	}
}
