// The reaper: pid 1 of a sandbox, which builds its root (see reaper.go). In
// a zygote's sandbox it then only reaps; in a cold one it also starts the
// run's program. One source, built two ways: into the Go binaries
// that link package reaper, where a constructor runs it before their Go runtime
// starts; and, with REAPER_STANDALONE, by make into bin/brig-reaper, a static
// executable without a C library. It calls the kernel directly in both, since
// a C library's start (its CPU feature probes, each CPUID a trap under a
// hypervisor) costs several times what the reaper does.
#include <asm/unistd.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/mount.h>
#include <linux/poll.h>
#include <linux/prctl.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <linux/wait.h>
#include <stddef.h>
#include <stdint.h>

#include "reaper.h"

#define SIGKILL 9
#define SIGALRM 14
#define SIGCHLD 17
#define SI_QUEUE (-1)
#define ITIMER_REAL 0
#define SIG_BLOCK 0
#define SIG_SETMASK 2
#define EPERM 1
#define EINTR 4
#define E2BIG 7
#define EBADF 9
#define ENOMEM 12
#define EINVAL 22
#define EPIPE 32
#define AT_FDCWD -100
#define O_RDONLY 0
#define O_WRONLY 1
#define O_CREAT 0100
#define O_TRUNC 01000
#define O_NOFOLLOW 0400000
#define O_CLOEXEC 02000000
#define O_PATH 010000000
#define O_DIRECTORY 0200000
#define CLOCK_MONOTONIC 1
#define PRIO_PROCESS 0
#define PRIO_PGRP 1
#define CLOSE_RANGE_CLOEXEC 4
#define PROT_READ 1
#define PROT_WRITE 2
#define MAP_PRIVATE 2
#define MAP_ANONYMOUS 0x20
#define O_EXCL 0200
#define S_IFCHR 0020000
#define AF_INET 2
#define SOCK_DGRAM 2
#define SIOCGIFFLAGS 0x8913
#define SIOCSIFFLAGS 0x8914
#define IFF_UP 1
#define PATH_MAX 4096
#define AT_RECURSIVE 0x8000
#define MNT_DETACH 2

#if defined(__x86_64__)
static long sys6(long n, long a, long b, long c, long d, long e, long f) {
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#elif defined(__aarch64__)
static long sys6(long n, long a, long b, long c, long d, long e, long f) {
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc 0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	return x0;
}
#else
#error "the reaper knows the system call convention of x86-64 and arm64 only"
#endif

// Each returns the call's result, or -errno.
#define sys0(n) sys6(n, 0, 0, 0, 0, 0, 0)
#define sys1(n, a) sys6(n, (long)(a), 0, 0, 0, 0, 0)
#define sys2(n, a, b) sys6(n, (long)(a), (long)(b), 0, 0, 0, 0)
#define sys3(n, a, b, c) sys6(n, (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define sys4(n, a, b, c, d) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define sys5(n, a, b, c, d, e) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

static __attribute__((noreturn)) void die(int status) {
	for (;;)
		sys1(__NR_exit_group, status);
}

static size_t length(const char *s) {
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

static int same(const char *a, const char *b) {
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

// append copies s into buf at *at, within size, and returns buf.
static char *append(char *buf, size_t size, size_t *at, const char *s) {
	while (*s && *at + 1 < size)
		buf[(*at)++] = *s++;
	buf[*at] = 0;
	return buf;
}

static void say(int fd, const char *s) { sys3(__NR_write, fd, s, length(s)); }

// utoa writes v in decimal, NUL-terminated, to end's last bytes of a buffer of
// at least 21 and returns where it starts.
static char *utoa(unsigned long v, char *end) {
	*--end = 0;
	do
		*--end = '0' + v % 10;
	while (v /= 10);
	return end;
}

// fail reports an error as the Go init does (pid1.Message) and exits 1. The
// error is errno's number: the reaper has no strerror.
static __attribute__((noreturn)) void fail(const char *step, long err) {
	char num[24];
	char msg[256];
	size_t at = 0;
	append(msg, sizeof msg, &at, "{\"kind\":\"error\",\"step\":\"");
	append(msg, sizeof msg, &at, step);
	append(msg, sizeof msg, &at, "\",\"error\":\"errno ");
	append(msg, sizeof msg, &at, utoa(err < 0 ? -err : err, num + sizeof num));
	append(msg, sizeof msg, &at, "\"}\n");
	say(REAPER_STATUS_FD, msg);
	die(1);
}

// report says kind ("started", "exit") with the CLOCK_MONOTONIC reading, as
// the Go init does, and for "exit" the program's wait status.
static void report(const char *kind, int exited, unsigned long status) {
	struct {
		long sec, nsec;
	} ts = {0, 0};
	sys2(__NR_clock_gettime, CLOCK_MONOTONIC, &ts);
	char num[24];
	char msg[160];
	size_t at = 0;
	append(msg, sizeof msg, &at, "{\"kind\":\"");
	append(msg, sizeof msg, &at, kind);
	if (exited) {
		append(msg, sizeof msg, &at, "\",\"wait_status\":");
		append(msg, sizeof msg, &at, utoa(status, num + sizeof num));
		append(msg, sizeof msg, &at, ",\"mono\":");
	} else {
		append(msg, sizeof msg, &at, "\",\"mono\":");
	}
	append(msg, sizeof msg, &at, utoa((unsigned long)ts.sec * 1000000000UL + ts.nsec, num + sizeof num));
	append(msg, sizeof msg, &at, "}\n");
	say(REAPER_STATUS_FD, msg);
}

// write_all writes n bytes of p to fd: 0, or -errno.
static long write_all(int fd, const char *p, size_t n) {
	while (n > 0) {
		long r = sys3(__NR_write, fd, p, n);
		if (r == -EINTR)
			continue;
		if (r < 0)
			return r;
		p += r, n -= r;
	}
	return 0;
}

// read_full reads exactly n bytes: 1 when it did, 0 at EOF before the
// first, -errno otherwise.
static long read_full(int fd, void *buf, size_t n) {
	size_t got = 0;
	while (got < n) {
		long r = sys3(__NR_read, fd, (char *)buf + got, n - got);
		if (r == -EINTR)
			continue;
		if (r < 0)
			return r;
		if (r == 0)
			return got == 0 ? 0 : -EPIPE;
		got += r;
	}
	return 1;
}

static struct sock_filter filter[REAPER_MAX_FILTER];
static struct sock_filter spawn_filter[REAPER_MAX_FILTER];
static struct sock_filter prog_filter[REAPER_MAX_FILTER];
static struct reaper_rlimit rlimits[REAPER_MAX_RLIMITS];
static char *run_argv[REAPER_MAX_ARGS + 1];
static char *run_envp[REAPER_MAX_ENV + 1];

// read_or_fail reads exactly n bytes of the spec pipe, or reports step.
static void read_or_fail(void *buf, size_t n, const char *step) {
	long r = read_full(REAPER_SPEC_FD, buf, n);
	if (r != 1)
		fail(step, r == 0 ? -EPIPE : r);
}

// The steps of a program's start, as the Go init names them (pid1's
// spawnStepNames), for its errors.
enum {
	STEP_SYNC = 1,
	STEP_SETSID,
	STEP_BOUNDING,
	STEP_SETGROUPS,
	STEP_SETGID,
	STEP_SETUID,
	STEP_CAPS,
	STEP_STDIN,
	STEP_CHDIR,
	STEP_SECCOMP,
	STEP_EXEC,
	// Not a failure: the child has done every step but the exec, and waits
	// for its parent to harden itself (spawn, release).
	STEP_READY,
};
static const char *const step_names[] = {
	"cloning into a user namespace and writing its id maps", "waiting for the id maps", "setsid",
	"emptying the bounding set", "setgroups", "setresgid", "setresuid", "dropping capabilities",
	"stdin", "chdir", "loading the seccomp filter", "execve",
};

// program_child is the program's process between the clone and its exec: in a
// user namespace of its own, it waits for the parent to write its id maps,
// then takes the run's identity with no capability, its stdin, /sandbox and
// its filter (on top of the spawner's, inherited), says it is ready, waits for
// the parent's go (a second byte on sync_fd, once pid 1 is hardened) and execs
// the interpreter, with extra_fd, when not negative, as its descriptor
// REAPER_WARM_FD. A failed step is reported on report_fd as {step, errno}
// (int32s), readiness as {STEP_READY, 0}.
static __attribute__((noreturn)) void program_child(const struct reaper_config *cfg, int sync_fd, int report_fd,
						    int stdin_fd, int extra_fd) {
	int32_t rep[2];
	long r;
	int step;
	char b;
	// Every signal at its default action: an ignored one would stay ignored
	// across exec (the supervisor's, inherited by this process).
	unsigned long dfl[4] = {0, 0, 0, 0}; // struct sigaction: SIG_DFL, no flags, empty mask
	for (long sig = 1; sig <= 64; sig++)
		sys4(__NR_rt_sigaction, sig, dfl, 0, 8); // fails harmlessly for SIGKILL and SIGSTOP
	if ((r = sys3(__NR_read, sync_fd, &b, 1)) != 1) {
		step = STEP_SYNC, r = -EPIPE;
		goto out;
	}
	// Its own session and process group: kill(0, sig) reaches its own alone.
	if ((r = sys0(__NR_setsid)) < 0) {
		step = STEP_SETSID;
		goto out;
	}
	// A new user namespace starts with a full bounding set: emptied again
	// while CAP_SETPCAP is held there.
	for (uint32_t c = 0; c <= cfg->last_cap; c++)
		if ((r = sys2(__NR_prctl, PR_CAPBSET_DROP, c)) < 0) {
			step = STEP_BOUNDING;
			goto out;
		}
	if ((r = sys2(__NR_setgroups, 0, 0)) < 0) {
		step = STEP_SETGROUPS;
		goto out;
	}
	if ((r = sys3(__NR_setresgid, cfg->prog_gid, cfg->prog_gid, cfg->prog_gid)) < 0) {
		step = STEP_SETGID;
		goto out;
	}
	if ((r = sys3(__NR_setresuid, cfg->prog_uid, cfg->prog_uid, cfg->prog_uid)) < 0) {
		step = STEP_SETUID;
		goto out;
	}
	// Inside its namespace it holds every capability until exec (the
	// namespace's root is unmapped, so the uid change cleared none).
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2] = {{0, 0, 0}, {0, 0, 0}};
	if ((r = sys2(__NR_capset, &hdr, data)) < 0) {
		step = STEP_CAPS;
		goto out;
	}
	// Descriptors 0 to 2, and REAPER_WARM_FD when given; everything else
	// closes at exec (the report pipe among them, whose EOF says the exec
	// worked).
	if ((r = sys3(__NR_dup3, stdin_fd, 0, 0)) < 0 ||
	    (extra_fd >= 0 && (r = sys3(__NR_dup3, extra_fd, REAPER_WARM_FD, 0)) < 0) ||
	    (r = sys3(__NR_close_range, 3, extra_fd >= 0 ? REAPER_WARM_FD - 1 : ~0U, CLOSE_RANGE_CLOEXEC)) < 0 ||
	    (extra_fd >= 0 && (r = sys3(__NR_close_range, REAPER_WARM_FD + 1, ~0U, CLOSE_RANGE_CLOEXEC)) < 0)) {
		step = STEP_STDIN;
		goto out;
	}
	if ((r = sys1(__NR_chdir, "/sandbox")) < 0) {
		step = STEP_CHDIR;
		goto out;
	}
	// The program's filter is stacked on the spawner's, inherited from the
	// reaper (jail's programFilters: alone it allows almost everything).
	// Fail closed if no filter is there beneath it.
	if ((r = sys1(__NR_prctl, PR_GET_SECCOMP)) != SECCOMP_MODE_FILTER) {
		step = STEP_SECCOMP, r = r < 0 ? r : -EPERM;
		goto out;
	}
	struct sock_fprog prog = {(unsigned short)cfg->prog_filter_len, prog_filter};
	if ((r = sys3(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)) < 0) {
		step = STEP_SECCOMP;
		goto out;
	}
	// Ready, and nothing more until pid 1 has dropped its privileges: the
	// program's first instruction never runs beside a privileged pid 1. EOF
	// instead of the go means the parent failed, and it reports why.
	rep[0] = STEP_READY, rep[1] = 0;
	if (sys3(__NR_write, report_fd, rep, sizeof rep) != sizeof rep || sys3(__NR_read, sync_fd, &b, 1) != 1)
		die(127);
	unsigned long none = 0;
	sys4(__NR_rt_sigprocmask, SIG_SETMASK, &none, 0, sizeof none);
	r = sys3(__NR_execve, run_argv[0], run_argv, run_envp);
	step = STEP_EXEC;
out:
	rep[0] = step, rep[1] = (int32_t)-r;
	sys3(__NR_write, report_fd, rep, sizeof rep);
	die(127);
}

// write_id_map writes "0 ROOT 1\nID HOST 1\n" to /proc/PID/NAME.
static long write_id_map(long pid, const char *name, uint32_t root, uint32_t id, uint32_t host) {
	char path[64], map[96], num[24];
	size_t at = 0, mat = 0;
	append(path, sizeof path, &at, "/proc/");
	append(path, sizeof path, &at, utoa(pid, num + sizeof num));
	append(path, sizeof path, &at, "/");
	append(path, sizeof path, &at, name);
	append(map, sizeof map, &mat, "0 ");
	append(map, sizeof map, &mat, utoa(root, num + sizeof num));
	append(map, sizeof map, &mat, " 1\n");
	append(map, sizeof map, &mat, utoa(id, num + sizeof num));
	append(map, sizeof map, &mat, " ");
	append(map, sizeof map, &mat, utoa(host, num + sizeof num));
	append(map, sizeof map, &mat, " 1\n");
	long fd = sys4(__NR_openat, AT_FDCWD, path, O_WRONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return fd;
	long r = write_all(fd, map, mat);
	sys1(__NR_close, fd);
	return r;
}

// The parent's ends of a started program's pipes (spawn), until release lets
// it exec: the go's write end, and the report's read end at REAPER_REPORT_FD,
// the one descriptor that pid 1's filter lets it read once hardened.
static int spawn_sync = -1;

// spawn_report reads the child's report: ready (want STEP_READY), or at
// release the EOF of an exec (want 0); anything else is the failure it reports.
static void spawn_report(int want) {
	int32_t got[2];
	long r = read_full(REAPER_REPORT_FD, got, sizeof got);
	if (r == 1 && want != 0 && got[0] == want)
		return;
	if (r == 0 && want == 0)
		return;
	if (r < 0)
		fail("exec", r);
	if (r == 0)
		fail("exec", EPIPE); // the child died before it was ready: the step the Go init names too
	fail(got[0] > 0 && got[0] <= STEP_EXEC ? step_names[got[0]] : "exec", -(long)got[1]);
}

// spawn starts run_argv with run_envp as the run's program, as the Go init
// does (pid1's spawnInUserNS): cloned into a user namespace owned by the run's
// host id, whose maps this process writes, with the file at in_path as its
// descriptor 0. It returns the child's pid once the child has done every step
// but its exec, which waits for release; a failure is reported and ends the
// reaper.
static long spawn(const struct reaper_config *cfg, const char *in_path, int extra_fd) {
	long r, stdin_fd = sys4(__NR_openat, AT_FDCWD, in_path, O_RDONLY | O_CLOEXEC, 0);
	if (stdin_fd < 0)
		fail("exec: stdin", stdin_fd);
	int sync[2], rep[2];
	if ((r = sys2(__NR_pipe2, sync, O_CLOEXEC)) < 0 || (r = sys2(__NR_pipe2, rep, O_CLOEXEC)) < 0)
		fail("exec: pipes", r);
	// The namespace's owner is the run's host id, as pid1's cloneUserNS
	// explains: only the effective uid changes, and comes back after.
	if ((r = sys3(__NR_setresuid, -1, cfg->host_uid, -1)) < 0)
		fail("exec: owner of the user namespace", r);
	long pid = sys6(__NR_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0, 0);
	if (pid == 0) {
		sys1(__NR_close, sync[1]);
		sys1(__NR_close, rep[0]);
		program_child(cfg, sync[0], rep[1], (int)stdin_fd, extra_fd);
	}
	if ((r = sys3(__NR_setresuid, -1, 0, -1)) < 0)
		fail("exec: owner of the user namespace", r); // pid 1's end kills the child
	if (pid < 0)
		fail("exec: cloning into a user namespace", pid);
	sys1(__NR_close, sync[0]);
	sys1(__NR_close, rep[1]);
	sys1(__NR_close, stdin_fd);
	if ((r = sys3(__NR_dup3, rep[0], REAPER_REPORT_FD, O_CLOEXEC)) < 0)
		fail("exec: pipes", r);
	sys1(__NR_close, rep[0]);
	spawn_sync = sync[1];
	if ((r = write_id_map(pid, "uid_map", cfg->uid, cfg->prog_uid, cfg->host_uid)) < 0 ||
	    (r = write_id_map(pid, "gid_map", cfg->gid, cfg->prog_gid, cfg->host_gid)) < 0)
		fail("exec: writing the id maps", r);
	char go = 'x';
	if ((r = sys3(__NR_write, spawn_sync, &go, 1)) != 1)
		fail("exec: waiting for the id maps", r);
	spawn_report(STEP_READY);
	return pid;
}

// release lets the child of spawn exec, once pid 1 is hardened, and returns
// once it has: the report pipe's EOF (it closes on exec). Only write, read of
// REAPER_REPORT_FD and close_range: what the reaper's filter allows.
static void release(void) {
	char go = 'g';
	long r = sys3(__NR_write, spawn_sync, &go, 1);
	if (r != 1)
		fail("exec", r < 0 ? r : EPIPE);
	spawn_report(0);
	if ((r = sys3(__NR_close_range, REAPER_REPORT_FD, REAPER_REPORT_FD, 0)) < 0 ||
	    (r = sys3(__NR_close_range, spawn_sync, spawn_sync, 0)) < 0)
		fail("exec", r);
}

// read_frame reads size bytes of the spec pipe into fresh memory.
static char *read_frame(uint32_t size, const char *step) {
	char *buf = (char *)sys6(__NR_mmap, 0, size ? size : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if ((unsigned long)buf > -4096UL)
		fail(step, (long)buf);
	read_or_fail(buf, size, step);
	return buf;
}

// strings fills out with n NUL-terminated strings from p, which must end
// before end, followed by a null pointer, and returns what follows them.
static char *strings(char *p, char *end, char **out, uint32_t n, const char *step) {
	for (uint32_t i = 0; i < n; i++) {
		out[i] = p;
		while (p < end && *p)
			p++;
		if (p == end)
			fail(step, EINVAL);
		p++;
	}
	out[n] = 0;
	return p;
}

// start_warm starts a warm sandbox's interpreter before its run (as the Go
// init's startWarm): from its command line and environment, which follow
// the root's strings on the spec pipe, with its bootstrap file as its
// descriptor 0 (node preloads /dev/stdin: jail/warm.go) and one end of a
// socket as its descriptor REAPER_WARM_FD, on which it says 'r' once it waits
// for its run. It returns the socket's other end, and the pid.
static int start_warm(const struct reaper_config *cfg, long *pid) {
	if (cfg->warm_argc == 0 || cfg->warm_argc > REAPER_MAX_ARGS || cfg->warm_envc > REAPER_MAX_ENV ||
	    cfg->warm_size > REAPER_MAX_RUN)
		fail("reading the config", EINVAL);
	char *buf = read_frame(cfg->warm_size, "reading the config");
	char *p = strings(buf, buf + cfg->warm_size, run_argv, cfg->warm_argc, "reading the config");
	strings(p, buf + cfg->warm_size, run_envp, cfg->warm_envc, "reading the config");
	int sv[2];
	long r = sys4(__NR_socketpair, 1 /* AF_UNIX */, 1 /* SOCK_STREAM */ | O_CLOEXEC, 0, sv);
	if (r < 0)
		fail("warm interpreter", r);
	*pid = spawn(cfg, REAPER_WARM_BOOT, sv[1]);
	release(); // its bootstrap, not yet a run's program
	sys1(__NR_close, sv[1]);
	char b = 0;
	if ((r = read_full(sv[0], &b, 1)) != 1 || b != 'r')
		fail("warm interpreter", r < 0 ? r : -EPIPE);
	return sv[0];
}

// The root's strings (struct reaper_config's root_*).
static char *root_str[8];
static char *root_binds[2 * REAPER_MAX_BINDS + 1], *root_copies[2 * REAPER_MAX_COPIES + 1];
static char *proc_files[REAPER_MAX_PROC + 1], *proc_dirs[REAPER_MAX_PROC + 1], *proc_ro[REAPER_MAX_PROC + 1];

// join writes a, "/" and b to buf (PATH_MAX) and returns it; a path that
// would not fit fails step.
static char *join(char *buf, const char *a, const char *b, const char *step) {
	size_t at = 0;
	append(buf, PATH_MAX, &at, a);
	append(buf, PATH_MAX, &at, "/");
	append(buf, PATH_MAX, &at, b);
	if (at + 1 >= PATH_MAX)
		fail(step, E2BIG);
	return buf;
}

static void must(long r, const char *step) {
	if (r < 0)
		fail(step, r);
}

static long mount5(const char *src, const char *dst, const char *type, unsigned long flags, const char *data) {
	return sys5(__NR_mount, src, dst, type, flags, data);
}

// new_mount makes a detached mount of a filesystem of type with the given
// string parameters (pairs, then a null) and mount attributes: its fd.
static long new_mount(const char *type, const char *const *params, unsigned long attrs, const char *step) {
	long fs = sys2(__NR_fsopen, type, FSOPEN_CLOEXEC);
	must(fs, step);
	for (; *params; params += 2)
		must(sys5(__NR_fsconfig, fs, FSCONFIG_SET_STRING, params[0], params[1], 0), step);
	must(sys5(__NR_fsconfig, fs, FSCONFIG_CMD_CREATE, 0, 0, 0), step);
	long m = sys3(__NR_fsmount, fs, FSMOUNT_CLOEXEC, attrs);
	must(m, step);
	sys1(__NR_close, fs);
	return m;
}

static void move_to(long m, const char *dst, const char *step) {
	must(sys5(__NR_move_mount, m, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH), step);
	sys1(__NR_close, m);
}

// bind_read_only binds src with its submounts at dst, read-only, nosuid,
// nodev and noexec, as pid1's bindReadOnly.
static void bind_read_only(const char *src, const char *dst, const char *step) {
	must(mount5(src, dst, 0, MS_BIND | MS_REC, 0), step);
	struct mount_attr attr = {MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, 0, 0, 0};
	must(sys5(__NR_mount_setattr, AT_FDCWD, dst, AT_RECURSIVE, &attr, sizeof attr), step);
}

// build_root builds the sandbox's root as pid1's rootSteps do, step for step
// and under the same step names, in the namespaces this process made (its pid
// namespace the supervisor's clone made): it is their pid 1, host root until
// harden, and mounts its own proc.
// The scratch tmpfs's reconfiguration context stays open as
// REAPER_SCRATCH_FD.
static void build_root(const struct reaper_config *cfg) {
	char a[PATH_MAX], b[PATH_MAX], num[24], inodes[24];
	const char *scratch = root_str[0], *lower = root_str[1], *empty = root_str[2], *hostname = root_str[3],
		   *boot = root_str[4], *view_source = root_str[5], *view_target = root_str[6], *view_dir = root_str[7];
	long r;

	// "loopback": lo up (pid1's LinkUp).
	long sock = sys3(__NR_socket, AF_INET, SOCK_DGRAM | O_CLOEXEC, 0);
	must(sock, "loopback");
	struct {
		char name[16];
		short flags;
		char pad[22];
	} ifr = {"lo", 0, {0}};
	must(sys3(__NR_ioctl, sock, SIOCGIFFLAGS, &ifr), "loopback");
	ifr.flags |= IFF_UP;
	must(sys3(__NR_ioctl, sock, SIOCSIFFLAGS, &ifr), "loopback");
	sys1(__NR_close, sock);

	must(mount5("", "/", 0, MS_REC | MS_PRIVATE, 0), "mount propagation");

	// "scratch tmpfs": its size and inodes, and its context kept for the
	// supervisor.
	const char *tmpfs[] = {"size", utoa(cfg->scratch_bytes, num + sizeof num),
			       "nr_inodes", utoa(cfg->scratch_bytes / REAPER_SCRATCH_BYTES_PER_INODE, inodes + sizeof inodes),
			       "mode", "0755", 0};
	move_to(new_mount("tmpfs", tmpfs, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, "scratch tmpfs"), scratch, "scratch tmpfs");
	long ctx = sys3(__NR_fspick, AT_FDCWD, scratch, FSPICK_CLOEXEC);
	must(ctx, "scratch tmpfs");
	if (ctx != REAPER_SCRATCH_FD) { // it may be that number already (close-on-exec)
		must(sys3(__NR_dup3, ctx, REAPER_SCRATCH_FD, O_CLOEXEC), "scratch tmpfs");
		sys1(__NR_close, ctx);
	}
	must(sys1(__NR_chdir, scratch), "scratch tmpfs");
	static const char *const dirs[] = {"upper", "work", "root", "lower", "empty", "view"};
	for (int i = 0; i < 6; i++)
		must(sys3(__NR_mkdirat, AT_FDCWD, dirs[i], 0755), "scratch tmpfs");
	must(sys3(__NR_mkdirat, AT_FDCWD, "shm", 0777), "scratch tmpfs");
	must(sys4(__NR_fchmodat, AT_FDCWD, "shm", 01777, 0), "scratch tmpfs");

	// "overlay root": relative paths, so the mount table names no host one.
	must(mount5(lower, "lower", 0, MS_BIND, 0), "overlay root");
	must(mount5("overlay", "root", "overlay", MS_NOSUID | MS_NODEV,
		    "lowerdir=lower,upperdir=upper,workdir=work,xino=on"),
	     "overlay root");

	// "read-only binds": the view of a host folder's parts, mounted on the
	// scratch, its shown folder bound into the root and the mount detached
	// (pid1.MountView); then each other host folder a view of its own
	// (pid1.ReadOnlyView).
	if (*view_source) {
		size_t at = 0;
		append(b, PATH_MAX, &at, "lower");
		append(b, PATH_MAX, &at, view_target);
		append(b, PATH_MAX, &at, ":");
		append(b, PATH_MAX, &at, view_source);
		if (at + 1 >= PATH_MAX)
			fail("read-only binds", E2BIG);
		const char *view[] = {"source", "overlay", "lowerdir", b, "xino", "auto", "redirect_dir", "follow", 0};
		move_to(new_mount("overlay", view, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
				  "read-only binds"),
			"view", "read-only binds");
		join(b, "view", view_dir, "read-only binds");
		must(mount5(b, join(a, "root", view_target, "read-only binds"), 0, MS_BIND, 0), "read-only binds");
		must(sys2(__NR_umount2, "view", MNT_DETACH), "read-only binds");
	}
	if (cfg->root_nbinds > 0) {
		must(mount5(empty, "empty", 0, MS_BIND, 0), "read-only binds");
		for (uint32_t i = 0; i < cfg->root_nbinds; i++) {
			size_t at = 0;
			append(b, PATH_MAX, &at, root_binds[2 * i]);
			append(b, PATH_MAX, &at, ":empty");
			if (at + 1 >= PATH_MAX)
				fail("read-only binds", E2BIG);
			const char *view[] = {"source", "overlay", "lowerdir", b, "xino", "auto", 0};
			long m = new_mount("overlay", view, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
					   "read-only binds");
			move_to(m, join(a, "root", root_binds[2 * i + 1], "read-only binds"), "read-only binds");
		}
	}

	// "interpreter copies": each interpreter's copy on huge pages bound over
	// its own file, read-only, nosuid and nodev, from an overlay of this
	// sandbox's own over the copies' folder, its layers given as
	// descriptors (pid1's mountCopies).
	if (cfg->root_ncopies > 0) {
		long layers[2];
		for (int i = 0; i < 2; i++) {
			layers[i] = sys4(__NR_openat, REAPER_COPIES_FD, i ? REAPER_COPIES_EMPTY : REAPER_COPIES_FILES,
					 O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
			must(layers[i], "interpreter copies");
		}
		long fs = sys2(__NR_fsopen, "overlay", FSOPEN_CLOEXEC);
		must(fs, "interpreter copies");
		must(sys5(__NR_fsconfig, fs, FSCONFIG_SET_STRING, "source", "overlay", 0), "interpreter copies");
		for (int i = 0; i < 2; i++)
			must(sys5(__NR_fsconfig, fs, FSCONFIG_SET_FD, "lowerdir+", 0, layers[i]), "interpreter copies");
		must(sys5(__NR_fsconfig, fs, FSCONFIG_CMD_CREATE, 0, 0, 0), "interpreter copies");
		long ov = sys3(__NR_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
		must(ov, "interpreter copies");
		for (uint32_t i = 0; i < cfg->root_ncopies; i++) {
			long t = sys3(__NR_open_tree, ov, root_copies[2 * i], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
			must(t, "interpreter copies");
			must(sys5(__NR_move_mount, t, "", AT_FDCWD, join(a, "root", root_copies[2 * i + 1], "interpreter copies"),
				  MOVE_MOUNT_F_EMPTY_PATH),
			     "interpreter copies");
			sys1(__NR_close, t);
		}
		sys1(__NR_close, ov);
		sys1(__NR_close, fs);
		sys1(__NR_close, layers[0]);
		sys1(__NR_close, layers[1]);
		sys1(__NR_close, REAPER_COPIES_FD);
	}

	// "dev": device nodes, links, /dev/shm from the scratch tmpfs, a devpts
	// of its own, then no new device node (pid1's mountDev).
	must(mount5("tmpfs", "root/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755"), "dev");
	long old = sys1(__NR_umask, 0);
	static const struct {
		const char *name;
		unsigned major, minor;
	} nodes[] = {{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};
	for (int i = 0; i < 6; i++) {
		unsigned long dev = ((unsigned long)(nodes[i].major & 0xfff) << 8) | (nodes[i].minor & 0xff) |
				    ((unsigned long)(nodes[i].minor & ~0xffu) << 12);
		must(sys4(__NR_mknodat, AT_FDCWD, join(a, "root/dev", nodes[i].name, "dev"), S_IFCHR | 0666, dev),
		     "dev");
	}
	static const char *const links[][2] = {{"fd", "/proc/self/fd"},       {"stdin", "/proc/self/fd/0"},
						{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
						{"core", "/proc/kcore"},       {"ptmx", "pts/ptmx"}};
	for (int i = 0; i < 6; i++)
		must(sys3(__NR_symlinkat, links[i][1], AT_FDCWD, join(a, "root/dev", links[i][0], "dev")), "dev");
	must(sys3(__NR_mkdirat, AT_FDCWD, "root/dev/shm", 0755), "dev");
	must(mount5("shm", "root/dev/shm", 0, MS_BIND, 0), "dev");
	must(sys3(__NR_mkdirat, AT_FDCWD, "root/dev/pts", 0755), "dev");
	must(mount5("devpts", "root/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		    "newinstance,ptmxmode=0666,mode=0620,max=64"),
	     "dev");
	sys1(__NR_umask, old);
	must(mount5("", "root/dev", 0, MS_REMOUNT | MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755"), "dev");

	// "proc": its own pid namespace's, which pid 1 mounts plainly, masked
	// with the run's /dev/null and empty tmpfs, its tunables read-only.
	must(mount5("proc", "root/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, 0), "proc");
	for (uint32_t i = 0; i < cfg->root_nfiles; i++)
		must(mount5("root/dev/null", join(a, "root/proc", proc_files[i], "proc"), 0, MS_BIND, 0), "proc");
	for (uint32_t i = 0; i < cfg->root_ndirs; i++)
		must(mount5("tmpfs", join(a, "root/proc", proc_dirs[i], "proc"), "tmpfs",
			    MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0"),
		     "proc");
	for (uint32_t i = 0; i < cfg->root_nro; i++) {
		join(a, "root/proc", proc_ro[i], "proc");
		bind_read_only(a, a, "proc");
	}

	// "pivot_root": the old root stacked under the new one, then detached.
	must(sys1(__NR_chdir, "root"), "pivot_root");
	must(sys2(__NR_pivot_root, ".", "."), "pivot_root");
	must(sys2(__NR_umount2, ".", MNT_DETACH), "pivot_root");
	must(sys1(__NR_chdir, "/"), "pivot_root");

	must(sys5(__NR_fchownat, AT_FDCWD, "/sandbox", cfg->root_uid, cfg->root_gid, 0), "sandbox dir");
	if (*boot) {
		long fd = sys4(__NR_openat, AT_FDCWD, REAPER_WARM_BOOT, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			       0400);
		must(fd, "warm bootstrap");
		must(write_all(fd, boot, length(boot)), "warm bootstrap");
		must(sys3(__NR_fchown, fd, cfg->root_uid, cfg->root_gid), "warm bootstrap");
		sys1(__NR_close, fd);
	}
	if ((r = sys2(__NR_sethostname, hostname, length(hostname))) < 0)
		fail("hostname", r);
}

// read_root reads the root's strings.
static void read_root(const struct reaper_config *cfg) {
	if (cfg->root_size == 0 || cfg->root_size > REAPER_MAX_ROOT || cfg->root_nbinds > REAPER_MAX_BINDS ||
	    cfg->root_nfiles > REAPER_MAX_PROC || cfg->root_ndirs > REAPER_MAX_PROC || cfg->root_nro > REAPER_MAX_PROC ||
	    cfg->root_ncopies > REAPER_MAX_COPIES)
		fail("reading the config", EINVAL);
	char *buf = read_frame(cfg->root_size, "reading the config"), *end = buf + cfg->root_size;
	char *p = strings(buf, end, root_str, 8, "reading the config");
	p = strings(p, end, root_binds, 2 * cfg->root_nbinds, "reading the config");
	p = strings(p, end, proc_files, cfg->root_nfiles, "reading the config");
	p = strings(p, end, proc_dirs, cfg->root_ndirs, "reading the config");
	p = strings(p, end, proc_ro, cfg->root_nro, "reading the config");
	p = strings(p, end, root_copies, 2 * cfg->root_ncopies, "reading the config");
	if (p != end)
		fail("reading the config", EINVAL);
}

static void harden(const struct reaper_config *cfg);

// run_program reads the run, writes its script and starts its program: hands
// the waiting interpreter of a warm sandbox (warm_fd) its environment, or
// starts the interpreter. It returns the program's pid.
static long run_program(const struct reaper_config *cfg, int warm_fd, long warm_pid) {
	struct reaper_run run;
	long r = read_full(REAPER_SPEC_FD, &run, sizeof run);
	if (r == 0)
		die(0); // discarded from the pool
	if (r < 0)
		fail("reading the run spec", r);
	if (run.size == 0 || run.size > REAPER_MAX_RUN || run.code_len >= run.size || run.handover_len >= run.size ||
	    run.argc > REAPER_MAX_ARGS || run.envc > REAPER_MAX_ENV || (warm_fd < 0) != (run.argc > 0))
		fail("reading the run spec", E2BIG);
	char *buf = read_frame(run.size, "reading the run spec"), *end = buf + run.size;
	char *script = buf, *p = buf;
	while (p < end && *p)
		p++;
	if (p == end || (size_t)(end - ++p) <= run.code_len || p[run.code_len] != 0)
		fail("reading the run spec", EINVAL);
	char *code = p;
	p += run.code_len + 1;
	p = strings(p, end, run_argv, run.argc, "reading the run spec");
	p = strings(p, end, run_envp, run.envc, "reading the run spec");
	if ((size_t)(end - p) != run.handover_len)
		fail("reading the run spec", EINVAL);
	// Back to nice 0 from prepareNice, for the run: this process and the
	// program it starts, or every thread of the warm interpreter's process
	// group (its own: it made its session).
	if ((r = sys3(__NR_setpriority, PRIO_PROCESS, 0, 0)) < 0 ||
	    (warm_fd >= 0 && (r = sys3(__NR_setpriority, PRIO_PGRP, warm_pid, 0)) < 0))
		fail("priority", r);

	// The script, the run's own on its tmpfs, as a cold run's.
	long fd = sys4(__NR_openat, AT_FDCWD, script, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		fail("program", fd);
	if ((r = write_all(fd, code, run.code_len)) < 0 || (r = sys3(__NR_fchown, fd, cfg->host_uid, cfg->host_gid)) < 0)
		fail("program", r);
	sys1(__NR_close, fd);
	// Nothing after the hand-over or the exec needs a privilege: pid 1
	// drops them first, so that the program never sees it privileged. A
	// cold program's process, whose id maps only a privileged pid 1 can
	// write, waits for release to exec.
	if (warm_fd < 0) {
		long pid = spawn(cfg, "/dev/null", -1);
		harden(cfg);
		release();
		return pid;
	}
	harden(cfg);
	if ((r = write_all(warm_fd, p, run.handover_len)) < 0)
		fail("exec", r); // the interpreter died waiting
	// Its EOF starts the program. close_range, not close: the filter
	// harden loaded allows the one and not the other.
	if ((r = sys3(__NR_close_range, warm_fd, warm_fd, 0)) < 0)
		fail("exec", r);
	return warm_pid;
}

// load_filter sets no_new_privs and loads a filter of len instructions: 0, or
// -errno.
static long load_filter(struct sock_filter *f, uint32_t len) {
	long r = sys2(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1);
	if (r < 0)
		return r;
	struct sock_fprog prog = {(unsigned short)len, f};
	return sys3(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

// harden makes pid 1 as unprivileged and filtered as the program (the Go
// init's hardenSteps): an unprivileged identity with no capability, its
// parent-death signal again, SIGCHLD blocked for its waits, and its filter.
static void harden(const struct reaper_config *cfg) {
	long r;
	if ((r = sys2(__NR_setgroups, 0, 0)) < 0 ||
	    (r = sys3(__NR_setresgid, cfg->gid, cfg->gid, cfg->gid)) < 0 ||
	    (r = sys3(__NR_setresuid, cfg->uid, cfg->uid, cfg->uid)) < 0)
		fail("init identity", r);
	// The uid change emptied the permitted and effective sets; the
	// inheritable set is emptied here, and all three are checked.
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2] = {{0, 0, 0}, {0, 0, 0}};
	if ((r = sys2(__NR_capset, &hdr, data)) < 0 || (r = sys2(__NR_capget, &hdr, data)) < 0)
		fail("init capabilities", r);
	for (int i = 0; i < 2; i++)
		if (data[i].effective || data[i].permitted || data[i].inheritable)
			fail("init capabilities", EINVAL);
	// A change of uid clears the parent-death signal: set it again, then
	// check that the supervisor did not die before (its end of the status
	// pipe is then closed, and ours reports POLLERR).
	if ((r = sys2(__NR_prctl, PR_SET_PDEATHSIG, SIGKILL)) < 0)
		fail("parent-death signal", r);
	struct pollfd pfd = {REAPER_STATUS_FD, POLLOUT, 0};
	struct {
		long sec, nsec;
	} now = {0, 0};
	if ((r = sys5(__NR_ppoll, &pfd, 1, &now, 0, 8)) < 0)
		fail("parent-death signal", r);
	if (pfd.revents & POLLERR)
		die(1);
	// SIGCHLD is blocked, so that it is queued for the wait below (pid 1
	// would otherwise discard it, its action being the default).
	unsigned long chld = 1UL << (SIGCHLD - 1);
	if ((r = sys4(__NR_rt_sigprocmask, SIG_BLOCK, &chld, 0, sizeof chld)) < 0)
		fail("signal mask", r);
	if ((r = load_filter(filter, cfg->filter_len)) < 0)
		fail("init seccomp", r);
}

// keep_only_status closes every descriptor but the status pipe and the
// scratch tmpfs's context: 0, or -errno.
static long keep_only_status(void) {
	_Static_assert(REAPER_SCRATCH_FD == REAPER_STATUS_FD + 1, "the two descriptors kept are adjacent");
	long r = sys3(__NR_close_range, 0, REAPER_STATUS_FD - 1, 0);
	return r < 0 ? r : sys3(__NR_close_range, REAPER_SCRATCH_FD + 1, ~0U, 0);
}

// The backstop of a run's time limit. The supervisor enforces the limit
// itself; but a supervisor that is stopped (SIGSTOP, a debugger) enforces
// nothing while it is, and its runs would outlive their limits. So once it
// hears that the program started it queues REAPER_BACKSTOP_SIGNAL to this
// process with what is left of the limit and a margin, in milliseconds, as
// the signal's value (rt_sigqueueinfo, SI_QUEUE); this process arms a timer
// of that long, once, and when SIGALRM comes it exits, and its pid
// namespace's every process dies with it. Both signals are blocked from the
// start, so that they are queued: a namespace's pid 1 discards a signal at
// its default action, from outside the namespace too (but SIGKILL and
// SIGSTOP). They are taken with rt_sigtimedwait beside SIGCHLD. The
// program can send neither: its uid is not this process's and it holds no
// capability.
#define BACKSTOP_SIGS ((1UL << (REAPER_BACKSTOP_SIGNAL - 1)) | (1UL << (SIGALRM - 1)))

// wait_signal waits for SIGCHLD, acting on the backstop's signals meanwhile
// (the caller has them and SIGCHLD blocked).
static void wait_signal(void) {
	unsigned long set = (1UL << (SIGCHLD - 1)) | BACKSTOP_SIGS;
	static int armed;
	for (;;) {
		struct reaper_siginfo info;
		long sig = sys4(__NR_rt_sigtimedwait, &set, &info, 0, sizeof set);
		if (sig == SIGALRM)
			die(REAPER_BACKSTOP_EXIT);
		if (sig == REAPER_BACKSTOP_SIGNAL && !armed && info.code == SI_QUEUE && info.value > 0 &&
		    info.value <= REAPER_BACKSTOP_MAX_MS) {
			struct {
				long interval_sec, interval_usec, sec, usec;
			} t = {0, 0, (long)(info.value / 1000), (long)(info.value % 1000) * 1000};
			if (sys3(__NR_setitimer, ITIMER_REAL, &t, 0) == 0)
				armed = 1;
		}
		if (sig == SIGCHLD)
			return;
	}
}

#define STR(x) #x
#define XSTR(x) STR(x)
// "ready", with the descriptor of the scratch tmpfs's context, as a Go
// init's (pid1.Message's ScratchFD).
#define READY "{\"kind\":\"ready\",\"scratch_fd\":" XSTR(REAPER_SCRATCH_FD) "}\n"

static __attribute__((noreturn)) void reaper_main(void) {
	// Named for what it is in ps and /proc/1/comm, not after the path it
	// was started by.
	sys2(__NR_prctl, PR_SET_NAME, "brig-reaper");
	// SIGCHLD at its default action, whatever the supervisor's was: ignored,
	// the kernel would reap the program itself, whose status wait4 then
	// never sees, and discard the signal the zygote mode waits for.
	unsigned long dfl[4] = {0, 0, 0, 0}; // struct sigaction: SIG_DFL
	sys4(__NR_rt_sigaction, SIGCHLD, dfl, 0, 8);
	// The backstop's signals are queued from now on (wait_signal); the
	// program's process unblocks every signal before its exec.
	unsigned long backstop = BACKSTOP_SIGS;
	long r = sys4(__NR_rt_sigprocmask, SIG_BLOCK, &backstop, 0, sizeof backstop);
	if (r < 0)
		fail("signal mask", r);
	// The sandbox's namespaces but its pid namespace, which the supervisor's
	// clone made so that this process is its pid 1: made here, first, so
	// that their making (a network namespace's above all, some 0.7 ms of
	// kernel work) is this process's, not the supervisor's, and overlaps with
	// the supervisor's work on the cgroups. Nothing is done in the host's
	// before: the root is built (loopback, mounts, hostname) only after, and
	// the supervisor enters them only once this process says it is ready.
	// The mount namespace copied is the supervisor's template, where it
	// passes one: its own with only the mounts the root's build reads, so
	// that a host of many mounts does not make each sandbox copy, make
	// private and detach them all. Without one (EBADF), its own.
	r = sys2(__NR_setns, REAPER_MNTNS_FD, CLONE_NEWNS);
	if (r == 0)
		sys1(__NR_close, REAPER_MNTNS_FD);
	else if (r != -EBADF)
		fail("namespaces", r);
	r = sys1(__NR_unshare, CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS);
	if (r < 0)
		fail("namespaces", r);
	struct reaper_config cfg;
	r = read_full(REAPER_SPEC_FD, &cfg, sizeof cfg);
	if (r == 0)
		die(0); // discarded before it was prepared
	if (r < 0)
		fail("reading the config", r);
	int program = cfg.mode == REAPER_MODE_PROGRAM;
	if (cfg.version != REAPER_VERSION || cfg.filter_len == 0 || cfg.filter_len > REAPER_MAX_FILTER ||
	    (cfg.mode != REAPER_MODE_REAP && !program) ||
	    (program && (cfg.spawn_filter_len == 0 || cfg.spawn_filter_len > REAPER_MAX_FILTER ||
			 cfg.prog_filter_len == 0 || cfg.prog_filter_len > REAPER_MAX_FILTER ||
			 cfg.nrlimits > REAPER_MAX_RLIMITS)))
		fail("reading the config", EINVAL);
	read_or_fail(filter, cfg.filter_len * sizeof filter[0], "reading the filter");
	if (program) {
		read_or_fail(spawn_filter, cfg.spawn_filter_len * sizeof spawn_filter[0], "reading the filter");
		read_or_fail(prog_filter, cfg.prog_filter_len * sizeof prog_filter[0], "reading the filter");
		read_or_fail(rlimits, cfg.nrlimits * sizeof rlimits[0], "reading the config");
	}
	read_root(&cfg);

	// As the Go init's prepareSteps and hardenSteps (package pid1): the
	// cgroup namespace once the supervisor has moved it into the run's
	// cgroups (it sends the config after), then, in a zygote's sandbox at
	// once, in a warm one just before the hand-over and in a cold one just
	// before the program's exec, an unprivileged identity with no capability,
	// no_new_privs and a filter (harden).
	if ((r = sys1(__NR_unshare, CLONE_NEWCGROUP)) < 0)
		fail("cgroup namespace", r);
	build_root(&cfg);
	for (uint32_t c = 0; c <= cfg.last_cap; c++)
		if ((r = sys2(__NR_prctl, PR_CAPBSET_DROP, c)) < 0)
			fail("capability bounding set", r);
	if ((r = sys2(__NR_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)) < 0)
		fail("capability bounding set", r);
	// In a zygote's sandbox, back to nice 0 from the spawner's prepareNice
	// while it still may, as the Go init's threads go (gatherThreads): it
	// reaps the run's orphans. One that starts the program stays at
	// prepareNice, and so does a warm interpreter it starts, until the run
	// (run_program).
	if (!program && (r = sys3(__NR_setpriority, PRIO_PROCESS, 0, 0)) < 0)
		fail("priority", r);
	long prog_pid = 0;
	if (program) {
		for (uint32_t i = 0; i < cfg.nrlimits; i++) {
			uint64_t lim[2] = {rlimits[i].cur, rlimits[i].max};
			if ((r = sys4(__NR_prlimit64, 0, rlimits[i].resource, lim, 0)) < 0)
				fail("rlimits", r);
		}
		// As the Go init's last prepare steps: the spawner's filter, the
		// program's but for the clone into its user namespace, on top of
		// no_new_privs; the interpreter inherits both.
		if ((r = load_filter(spawn_filter, cfg.spawn_filter_len)) < 0)
			fail("seccomp", r);
		int warm_fd = -1;
		long warm_pid = 0;
		if (cfg.warm_argc > 0)
			warm_fd = start_warm(&cfg, &warm_pid);
		say(REAPER_STATUS_FD, READY);
		prog_pid = run_program(&cfg, warm_fd, warm_pid); // hardened
		report("started", 0, 0);
		// Nothing of the supervisor's is left open but the status pipe: not
		// the run's output, whose EOF says the program's end, nor the spec.
		if ((r = keep_only_status()) < 0)
			fail("init output", r);
	}
	if (!program)
		harden(&cfg);
	if (program) {
		// Until the program ends: then its status, and pid 1's exit takes
		// whatever it left in the namespace.
		for (;;) {
			int status = 0;
			r = sys4(__NR_wait4, -1, &status, __WALL | WNOHANG, 0);
			if (r == -EINTR)
				continue;
			if (r < 0)
				fail("wait", r);
			if (r == prog_pid) {
				report("exit", 1, (unsigned)status);
				die(0);
			}
			if (r == 0)
				wait_signal();
		}
	}
	say(REAPER_STATUS_FD, READY);
	// Nothing of the supervisor's is left open but the status pipe, whose
	// EOF tells the supervisor that pid 1 is gone, as an init's does.
	if (keep_only_status() < 0)
		die(1);
	// The program is a zygote's child, not this process's: it only reaps what
	// the program leaves to it, until the run's end kills it.
	for (;;) {
		while (sys4(__NR_wait4, -1, 0, WNOHANG | __WALL, 0) > 0)
			;
		wait_signal(); // SIGCHLD blocked by harden, the backstop's at the start
	}
}

// reaper_start takes over a process started as the reaper: pid 1, with the
// one argument REAPER_ARG. Anything else returns.
static void reaper_start(int argc, char **argv) {
	if (argc == 2 && same(argv[1], REAPER_ARG) && sys0(__NR_getpid) == 1)
		reaper_main();
}

#ifdef REAPER_STANDALONE
// bin/brig-reaper: `brig-reaper stamp` prints the build stamp, which brig
// compares with its own before it uses the binary (jail's helperPath).
#ifndef REAPER_STAMP
#define REAPER_STAMP ""
#endif

void *memset(void *s, int c, size_t n) {
	unsigned char *p = s;
	while (n--)
		*p++ = (unsigned char)c;
	return s;
}

void *memcpy(void *d, const void *s, size_t n) {
	unsigned char *p = d;
	const unsigned char *q = s;
	while (n--)
		*p++ = *q++;
	return d;
}

__attribute__((used, noreturn)) void reaper_entry(long *sp) {
	int argc = (int)sp[0];
	char **argv = (char **)(sp + 1);
	reaper_start(argc, argv);
	if (argc == 2 && same(argv[1], "stamp")) {
		say(1, REAPER_STAMP "\n");
		die(0);
	}
	say(2, "brig-reaper is the pid 1 brig starts in a zygote's sandbox; it is not run by hand\n");
	die(2);
}

#if defined(__x86_64__)
__asm__(".text\n.global _start\n_start:\n\txor %rbp, %rbp\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall reaper_entry\n\thlt\n");
#elif defined(__aarch64__)
__asm__(".text\n.global _start\n_start:\n\tmov x29, #0\n\tmov x30, #0\n\tmov x0, sp\n\tbl reaper_entry\n");
#endif

#else
// In a Go binary: before main, and so before its Go runtime. glibc passes
// constructors the program's arguments.
__attribute__((constructor)) static void reaper_ctor(int argc, char **argv, char **envp) {
	(void)envp;
	reaper_start(argc, argv);
}
#endif
