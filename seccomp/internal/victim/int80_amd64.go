package victim

// Int80 makes system call nr through int 0x80, the i386 ABI, with no arguments,
// and returns the kernel's result. The kernel reports such a call to seccomp with
// arch AUDIT_ARCH_I386, and i386 numbers differ from x86_64's (getpid is 20).
// On a kernel that runs no i386 calls (IA32 emulation off) the instruction
// faults instead, with SIGSEGV.
func Int80(nr uintptr) uintptr

// Hlt executes HLT, which faults in user mode (a general protection fault,
// SIGSEGV from the kernel) as int 0x80 does where i386 calls are off: it lets a
// test check that a victim reports such a fault rather than crash.
func Hlt()
