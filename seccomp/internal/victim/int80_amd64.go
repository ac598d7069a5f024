package victim

// Int80 makes system call nr through int 0x80, the i386 ABI, with no arguments,
// and returns the kernel's result. The kernel reports such a call to seccomp with
// arch AUDIT_ARCH_I386, and i386 numbers differ from x86_64's (getpid is 20).
func Int80(nr uintptr) uintptr
