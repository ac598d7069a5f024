// Package bpf is a compiled seccomp filter as the kernel takes it: its wire
// form between the supervisor, which compiles it (package seccomp, with cgo and
// libseccomp), and a sandbox's init, which loads it with the raw seccomp(2)
// call and so links neither.
package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Program is a compiled filter: classic BPF over struct seccomp_data, as
// seccomp(2) takes it.
type Program []unix.SockFilter

const (
	// MaxInstructions is the kernel's BPF_MAXINSNS.
	MaxInstructions = 4096
	// instructionSize is sizeof(struct sock_filter).
	instructionSize = int(unsafe.Sizeof(unix.SockFilter{}))
)

// ErrInvalidProgram is returned by Unmarshal and Load for bytes or a program
// that cannot be a filter.
var ErrInvalidProgram = errors.New("invalid seccomp program")

// Marshal encodes p as the kernel's array of struct sock_filter, in host byte
// order: the bytes only travel to a process on the same machine.
func (p Program) Marshal() []byte {
	b := make([]byte, 0, len(p)*instructionSize)
	for _, ins := range p {
		b = binary.NativeEndian.AppendUint16(b, ins.Code)
		b = append(b, ins.Jt, ins.Jf)
		b = binary.NativeEndian.AppendUint32(b, ins.K)
	}
	return b
}

// Unmarshal decodes what Marshal encoded. It rejects an empty program, a length
// that is not whole instructions and one over the kernel's 4096 instructions;
// the kernel checks the rest when the program is loaded.
func Unmarshal(b []byte) (Program, error) {
	switch {
	case len(b) == 0:
		return nil, fmt.Errorf("decoding seccomp program: empty: %w", ErrInvalidProgram)
	case len(b)%instructionSize != 0:
		return nil, fmt.Errorf("decoding seccomp program: %d bytes is not a whole number of %d-byte instructions: %w",
			len(b), instructionSize, ErrInvalidProgram)
	case len(b)/instructionSize > MaxInstructions:
		return nil, fmt.Errorf("decoding seccomp program: %d instructions, the kernel takes at most %d: %w",
			len(b)/instructionSize, MaxInstructions, ErrInvalidProgram)
	}
	p := make(Program, 0, len(b)/instructionSize)
	for ; len(b) > 0; b = b[instructionSize:] {
		p = append(p, unix.SockFilter{
			Code: binary.NativeEndian.Uint16(b[0:]),
			Jt:   b[2],
			Jf:   b[3],
			K:    binary.NativeEndian.Uint32(b[4:]),
		})
	}
	return p, nil
}

var (
	// ErrNoNewPrivs is returned by Load when the calling thread has not set
	// no_new_privs.
	ErrNoNewPrivs = errors.New("no_new_privs is not set on the calling thread")
	// ErrThreadSync is returned by Load when the kernel could not put the filter
	// on every thread, because some thread already runs a filter that is not an
	// ancestor of the calling thread's.
	ErrThreadSync = errors.New("a thread could not take the filter")
)

// Load installs prog on every thread of the calling process
// (SECCOMP_FILTER_FLAG_TSYNC). The filter is then inherited by every child and
// survives execve; nothing can remove it.
//
// The caller must have set no_new_privs (prctl PR_SET_NO_NEW_PRIVS) on the calling
// thread and should hold runtime.LockOSThread from before that prctl until after
// Load: both no_new_privs and the filter are per thread, and TSYNC copies both
// from the thread that makes the call, so the Go scheduler must not move this
// goroutine to a thread without no_new_privs in between. Load checks the flag
// rather than rely on CAP_SYS_ADMIN, which would let a root init skip it and
// leave setuid binaries live under the filter.
//
// Load may follow LoadThread of the same program on the same thread (the
// filter allows seccomp(2)): that thread then runs the program twice, which only
// costs time, and every other thread gets both copies.
//
// Load uses the raw seccomp(2) system call and needs neither cgo nor libseccomp.
func Load(prog Program) error {
	return load(prog, unix.SECCOMP_FILTER_FLAG_TSYNC)
}

// LoadThread installs prog on the calling thread only (no TSYNC): no other thread
// has to be stopped and synchronised, so it costs a fraction of Load. A process
// forked from this thread inherits the filter; the process's other threads stay
// unfiltered until Load. The caller must hold runtime.LockOSThread, or the
// goroutine could move to an unfiltered thread, and must have set no_new_privs on
// this thread, which LoadThread checks as Load does.
func LoadThread(prog Program) error {
	return load(prog, 0)
}

// load is the one raw seccomp(2) call behind Load and LoadThread.
func load(prog Program, flags uintptr) error {
	if len(prog) == 0 || len(prog) > MaxInstructions {
		return fmt.Errorf("loading seccomp filter of %d instructions: %w", len(prog), ErrInvalidProgram)
	}
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("reading no_new_privs: %w", err)
	}
	if nnp != 1 {
		return fmt.Errorf("loading seccomp filter: %w (Hint: prctl(PR_SET_NO_NEW_PRIVS, 1) on this thread, under runtime.LockOSThread)", ErrNoNewPrivs)
	}
	fprog := unix.SockFprog{
		Len:    uint16(len(prog)),
		Filter: &prog[0],
	}
	// The kernel copies the program during the call; fprog (and through it prog)
	// must stay reachable until then, which the uintptr conversion in the call
	// expression and the KeepAlive below guarantee.
	tid, _, errno := unix.Syscall(unix.SYS_SECCOMP,
		unix.SECCOMP_SET_MODE_FILTER,
		flags,
		uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(&fprog)
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("loading seccomp filter: %w", errno)
	}
	if tid != 0 {
		// With TSYNC a positive return is the id of a thread that kept its
		// filter; the calling thread is then not filtered either.
		return fmt.Errorf("loading seccomp filter: thread %d: %w", tid, ErrThreadSync)
	}
	return nil
}
