// Package seccomp owns the system call policy of a sandbox run: the reviewed
// table of which calls a sandboxed program may make (policy.go), its compilation
// to a classic BPF seccomp filter, and the loading of that filter.
//
// The policy is an allowlist. A call the table does not name fails with ENOSYS,
// as on a kernel without it; a call the table denies fails with EPERM; a few
// succeed without acting (sync, and changes of RLIMIT_CORE); a call from a
// foreign ABI (i386 through int 0x80, x32) kills the process. Calls whose danger
// depends on their arguments (clone, socket, setsockopt, ioctl, personality,
// sched_setscheduler, setrlimit, prlimit64) are decided by argument, where
// needed through an ordered list of cases. Default documents the choices and
// how they differ from Docker's default profile. Spawner is Default with one
// more clone, into a new user namespace, for the init thread that starts the
// program.
//
// Compiling needs cgo and libseccomp, so it happens once in the supervisor;
// libseccomp lays the call numbers out as a binary tree (optimize level 2) so a
// call is found in a handful of jumps. The sandbox's init receives the program
// as bytes and loads it with the raw seccomp(2) call, without cgo.
//
// Typical use:
//
//	// Supervisor: compile once, send the bytes to the init over its pipe.
//	prog, err := seccomp.Compile(seccomp.Default())
//	if err != nil {
//		return fmt.Errorf("compiling seccomp policy: %w", err)
//	}
//	_, err = initPipe.Write(prog.Marshal())
//
//	// Init, after the jail is set up and just before exec:
//	prog, err := seccomp.Unmarshal(b)
//	if err != nil {
//		return err
//	}
//	runtime.LockOSThread()
//	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
//		return fmt.Errorf("setting no_new_privs: %w", err)
//	}
//	if err := seccomp.Load(prog); err != nil {
//		return err // fail closed: the run does not start
//	}
package seccomp
