package pid1

/*
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

// brig_spawn_args is one program to start: what brig_spawn needs, all of it
// allocated by the caller and left untouched until brig_spawn returns.
struct brig_spawn_args {
	const char *path;
	char *const *argv;
	char *const *envp;
	const char *dir;
	int stdin_fd;
	// extra_fd, when not -1, becomes the program's descriptor 3 (a warm
	// interpreter's pipe).
	int extra_fd;
	// host_uid is what uid maps to, and the new namespace's owner.
	unsigned int host_uid;
	// uid_map and gid_map are written to the child's /proc files as they are.
	const char *uid_map;
	const char *gid_map;
	// uid and gid are the program's ids inside its user namespace.
	unsigned int uid, gid;
	// last_cap is the kernel's highest capability number.
	int last_cap;
	// filter is the program's seccomp filter (struct sock_filter[filter_len]).
	const struct sock_filter *filter;
	unsigned short filter_len;
};

// Steps of the child, reported with errno when one fails.
enum {
	STEP_SYNC = 1, STEP_SETSID, STEP_BOUNDING, STEP_SETGROUPS, STEP_SETGID, STEP_SETUID,
	STEP_CAPS, STEP_STDIN, STEP_CHDIR, STEP_SECCOMP, STEP_EXEC,
};

struct brig_spawn_report { int step; int err; };

// brig_spawn_child runs in the new process, a copy of the init's calling thread
// alone: it may only make raw system calls (glibc's setxid wrappers would signal
// threads that do not exist here), and its signals are all blocked until just
// before execve, so that no Go signal handler ever runs in it.
static void brig_spawn_child(const struct brig_spawn_args *a, int sync_fd, int report_fd) {
	struct brig_spawn_report rep = {0, 0};
	char c;
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	for (int sig = 1; sig < _NSIG; sig++) {
		sigaction(sig, &dfl, NULL); // fails harmlessly for SIGKILL, SIGSTOP and glibc's own
	}
	// Wait for the parent to write the id maps: until then the child's ids are
	// unmapped. EOF means the parent failed to.
	if (read(sync_fd, &c, 1) != 1) { rep.step = STEP_SYNC; rep.err = EPIPE; goto fail; }
	// Its own session and process group: kill(0, sig) from the program reaches
	// its own processes only.
	if (syscall(SYS_setsid) < 0) { rep.step = STEP_SETSID; goto fail_errno; }
	// A new user namespace starts with a full bounding set: empty it again,
	// while the child still holds CAP_SETPCAP there.
	for (int cap = 0; cap <= a->last_cap; cap++) {
		if (syscall(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) { rep.step = STEP_BOUNDING; goto fail_errno; }
	}
	if (syscall(SYS_setgroups, 0, NULL) < 0) { rep.step = STEP_SETGROUPS; goto fail_errno; }
	if (syscall(SYS_setresgid, a->gid, a->gid, a->gid) < 0) { rep.step = STEP_SETGID; goto fail_errno; }
	if (syscall(SYS_setresuid, a->uid, a->uid, a->uid) < 0) { rep.step = STEP_SETUID; goto fail_errno; }
	// Inside its new user namespace the child holds every capability until exec
	// (its namespace's root is unmapped, so the uid change clears none); execve
	// would clear them, and so does this, before anything else runs.
	{
		struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
		struct __user_cap_data_struct data[2];
		memset(data, 0, sizeof data);
		if (syscall(SYS_capset, &hdr, data) < 0) { rep.step = STEP_CAPS; goto fail_errno; }
	}
	if (a->stdin_fd != 0 && syscall(SYS_dup2, a->stdin_fd, 0) < 0) { rep.step = STEP_STDIN; goto fail_errno; }
	// dup2 clears close-on-exec on the new descriptor only.
	if (a->extra_fd >= 0 && a->extra_fd != 3 && syscall(SYS_dup2, a->extra_fd, 3) < 0) { rep.step = STEP_STDIN; goto fail_errno; }
	if (a->extra_fd == 3 && syscall(SYS_fcntl, 3, F_SETFD, 0) < 0) { rep.step = STEP_STDIN; goto fail_errno; }
	if (syscall(SYS_chdir, a->dir) < 0) { rep.step = STEP_CHDIR; goto fail_errno; }
	// Last before exec: no_new_privs is inherited from the init's thread, whose
	// own filter (which let this clone make a user namespace) stays beneath.
	{
		struct sock_fprog prog = {a->filter_len, (struct sock_filter *)a->filter};
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0) { rep.step = STEP_SECCOMP; goto fail_errno; }
	}
	{
		sigset_t none;
		sigemptyset(&none);
		syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, _NSIG / 8);
	}
	syscall(SYS_execve, a->path, a->argv, a->envp);
	rep.step = STEP_EXEC;
fail_errno:
	rep.err = errno;
fail:
	// The report pipe is close-on-exec: the parent reads EOF when execve worked.
	if (write(report_fd, &rep, sizeof rep) < 0) {}
	syscall(SYS_exit_group, 127);
}

static int brig_write_file(const char *path, const char *data) {
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) return -1;
	ssize_t n = write(fd, data, strlen(data));
	int err = errno;
	close(fd);
	if (n != (ssize_t)strlen(data)) { errno = n < 0 ? err : EIO; return -1; }
	return 0;
}

// brig_spawn clones the calling thread into a new user namespace (and nothing
// else: the init's namespaces are the run's), writes the child's id maps, lets
// it drop to the program's ids and filter itself, and waits until it has exec'd
// the program. It returns the child's pid, or -1 with *step and *err set (step
// 0 for the parent's own steps).
static int brig_spawn(const struct brig_spawn_args *a, int *step, int *err) {
	int sync_pipe[2], report_pipe[2];
	char path[64];
	sigset_t all, old;
	*step = 0;
	if (pipe2(sync_pipe, O_CLOEXEC) < 0) { *err = errno; return -1; }
	if (pipe2(report_pipe, O_CLOEXEC) < 0) {
		*err = errno;
		close(sync_pipe[0]); close(sync_pipe[1]);
		return -1;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	// The namespace is created with this thread's effective uid as its owner,
	// and the kernel charges what is counted per user inside it (pending
	// signals, inotify instances, processes, further namespaces) to its owner
	// too, up the chain: so the owner is the run's own host id, not root, which
	// every run would otherwise share. Only this thread's euid changes (a raw
	// call); its real and saved uids stay 0, so it regains its capabilities with
	// the euid just after the clone.
	if (syscall(SYS_setresuid, -1, a->host_uid, -1) < 0) {
		*err = errno;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		close(sync_pipe[0]); close(sync_pipe[1]); close(report_pipe[0]); close(report_pipe[1]);
		return -1;
	}
	// A fork-style clone: the child gets a copy of this (small) process's
	// memory, never the supervisor's. CLONE_VFORK can't be used, since the
	// child must wait for its maps, which this thread writes.
	long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
	if (pid == 0) {
		close(sync_pipe[1]);
		close(report_pipe[0]);
		brig_spawn_child(a, sync_pipe[0], report_pipe[1]);
	}
	int clone_err = errno;
	if (syscall(SYS_setresuid, -1, 0, -1) < 0) {
		// Not root again: this thread can't write the maps; the child, waiting
		// for them, reads EOF and exits.
		clone_err = errno;
		if (pid > 0) {
			close(sync_pipe[0]); close(sync_pipe[1]); close(report_pipe[1]);
			close(report_pipe[0]);
			int status;
			while (waitpid((pid_t)pid, &status, __WALL) < 0 && errno == EINTR) {}
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			*err = clone_err;
			return -1;
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(sync_pipe[0]);
	close(report_pipe[1]);
	if (pid < 0) {
		*err = clone_err;
		close(sync_pipe[1]); close(report_pipe[0]);
		return -1;
	}
	snprintf(path, sizeof path, "/proc/%ld/uid_map", pid);
	int ok = brig_write_file(path, a->uid_map) == 0;
	if (ok) {
		snprintf(path, sizeof path, "/proc/%ld/gid_map", pid);
		ok = brig_write_file(path, a->gid_map) == 0;
	}
	if (ok) ok = write(sync_pipe[1], "x", 1) == 1;
	if (!ok) *err = errno;
	close(sync_pipe[1]); // EOF for a child still waiting: it exits
	struct brig_spawn_report rep;
	ssize_t n;
	do { n = read(report_pipe[0], &rep, sizeof rep); } while (n < 0 && errno == EINTR);
	close(report_pipe[0]);
	if (ok && n == 0) return (int)pid;
	if (ok && n == sizeof rep) { *step = rep.step; *err = rep.err; }
	else if (ok) { *step = STEP_EXEC; *err = EIO; }
	int status;
	while (waitpid((pid_t)pid, &status, __WALL) < 0 && errno == EINTR) {}
	return -1;
}
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"
)

// spawnStepNames name brig_spawn's steps for errors (index: the C enum).
var spawnStepNames = [...]string{
	0: "cloning into a user namespace and writing its id maps", 1: "waiting for the id maps",
	2: "setsid", 3: "emptying the bounding set", 4: "setgroups", 5: "setresgid", 6: "setresuid",
	7: "dropping capabilities", 8: "stdin", 9: "chdir", 10: "loading the seccomp filter", 11: "execve",
}

func extraFD(fd int) int {
	if fd <= 0 {
		return -1
	}
	return fd
}

// spawnArgs is a program to start in a user namespace of its own.
type spawnArgs struct {
	Path, Dir string
	Argv, Env []string
	StdinFD   int
	// ExtraFD, when positive, becomes the program's descriptor 3.
	ExtraFD  int
	UID, GID int // inside the namespace
	HostUID  int // what UID maps to on the host
	HostGID  int
	// RootUID and RootGID are what the namespace's 0 maps to: the init's host ids,
	// so that the init appears as root inside, and a chown to root fails as on
	// any host (EPERM) rather than as an unmapped id (EINVAL). The program can
	// never become 0: it has no capability, no_new_privs and nosuid mounts.
	RootUID, RootGID int
	LastCap          int
	FilterBPF        []byte // the program's filter, struct sock_filter[] (seccomp.Program.Marshal)
}

// spawnInUserNS starts a.Path as the program: in a new user namespace whose
// mappings are a.UID to a.HostUID and 0 to a.RootUID (the same for gids), with no supplementary
// groups, no capabilities and a.FilterBPF loaded, from the calling thread (which
// must be locked, and whose no_new_privs, empty bounding set and descriptors the
// program inherits). It returns once the program has been exec'd.
//
// It is written in C because everything between the clone and the exec must be
// raw system calls on a copy of one thread, and Go's syscall.ForkExec, which
// does that for Go, can neither make the user namespace (it waits for its maps
// after the filter would have to be loaded) nor load a filter.
func spawnInUserNS(a spawnArgs) (int, error) {
	if len(a.FilterBPF) == 0 || len(a.FilterBPF)%8 != 0 {
		return 0, fmt.Errorf("the program's filter is %d bytes, not whole instructions", len(a.FilterBPF))
	}
	var cstrs []*C.char
	cstr := func(s string) *C.char {
		p := C.CString(s)
		cstrs = append(cstrs, p)
		return p
	}
	defer func() {
		for _, p := range cstrs {
			C.free(unsafe.Pointer(p))
		}
	}()
	vec := func(ss []string) **C.char {
		// A C array, so that no Go pointer is stored in C memory.
		arr := (**C.char)(C.calloc(C.size_t(len(ss)+1), C.size_t(unsafe.Sizeof(uintptr(0)))))
		cstrs = append(cstrs, (*C.char)(unsafe.Pointer(arr)))
		s := unsafe.Slice(arr, len(ss)+1)
		for i, v := range ss {
			s[i] = cstr(v)
		}
		return arr
	}
	filter := C.CBytes(a.FilterBPF)
	cstrs = append(cstrs, (*C.char)(filter))
	args := C.struct_brig_spawn_args{
		path:       cstr(a.Path),
		argv:       vec(a.Argv),
		envp:       vec(a.Env),
		dir:        cstr(a.Dir),
		stdin_fd:   C.int(a.StdinFD),
		extra_fd:   C.int(extraFD(a.ExtraFD)),
		uid_map:    cstr(fmt.Sprintf("0 %d 1\n%d %d 1\n", a.RootUID, a.UID, a.HostUID)),
		gid_map:    cstr(fmt.Sprintf("0 %d 1\n%d %d 1\n", a.RootGID, a.GID, a.HostGID)),
		uid:        C.uint(a.UID),
		host_uid:   C.uint(a.HostUID),
		gid:        C.uint(a.GID),
		last_cap:   C.int(a.LastCap),
		filter:     (*C.struct_sock_filter)(filter),
		filter_len: C.ushort(len(a.FilterBPF) / 8),
	}
	var step, errno C.int
	pid := C.brig_spawn(&args, &step, &errno)
	if pid < 0 {
		name := "unknown step"
		if int(step) < len(spawnStepNames) {
			name = spawnStepNames[step]
		}
		return 0, fmt.Errorf("starting %s: %s: %w", a.Path, name, syscall.Errno(errno))
	}
	return int(pid), nil
}
