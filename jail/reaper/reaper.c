// The reaper: pid 1 of a zygote's sandbox (see reaper.go). One source, built
// two ways: into the Go binaries that link package reaper, where a constructor
// runs it before their Go runtime starts; and, with REAPER_STANDALONE, by
// make into bin/brig-reaper, a static executable without a C library. It calls
// the kernel directly in both, since a C library's start (its CPU feature
// probes, each CPUID a trap under a hypervisor) costs several times what the
// reaper does.
#include <asm/unistd.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/poll.h>
#include <linux/prctl.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <linux/wait.h>
#include <stddef.h>
#include <stdint.h>

#include "reaper.h"

#define SIGKILL 9
#define SIGCHLD 17
#define SIG_BLOCK 0
#define EINTR 4
#define EINVAL 22
#define EPIPE 32

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

// fail reports an error as the Go init does (pid1.Message) and exits 1. The
// error is errno's number: the reaper has no strerror.
static __attribute__((noreturn)) void fail(const char *step, long err) {
	char num[24], *p = num + sizeof num;
	unsigned long v = err < 0 ? -err : err;
	*--p = 0;
	do
		*--p = '0' + v % 10;
	while (v /= 10);
	char msg[256];
	size_t at = 0;
	append(msg, sizeof msg, &at, "{\"kind\":\"error\",\"step\":\"");
	append(msg, sizeof msg, &at, step);
	append(msg, sizeof msg, &at, "\",\"error\":\"errno ");
	append(msg, sizeof msg, &at, p);
	append(msg, sizeof msg, &at, "\"}\n");
	say(REAPER_STATUS_FD, msg);
	die(1);
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

static __attribute__((noreturn)) void reaper_main(void) {
	// Named for what it is in ps and /proc/1/comm, not after the path it
	// was started by.
	sys2(__NR_prctl, PR_SET_NAME, "brig-reaper");
	struct reaper_config cfg;
	long r = read_full(REAPER_SPEC_FD, &cfg, sizeof cfg);
	if (r == 0)
		die(0); // discarded before it was prepared
	if (r < 0)
		fail("reading the config", r);
	if (cfg.version != REAPER_VERSION || cfg.filter_len == 0 || cfg.filter_len > REAPER_MAX_FILTER)
		fail("reading the config", EINVAL);
	if ((r = read_full(REAPER_SPEC_FD, filter, cfg.filter_len * sizeof filter[0])) != 1)
		fail("reading the filter", r == 0 ? -EPIPE : r);

	// As the Go init's prepareSteps and hardenSteps (package pid1), for an
	// init that starts no program: the cgroup namespace once the supervisor
	// has moved it into the run's cgroups (it sends the config after), then
	// an unprivileged identity with no capability, no_new_privs and a filter.
	if ((r = sys1(__NR_unshare, CLONE_NEWCGROUP)) < 0)
		fail("cgroup namespace", r);
	for (uint32_t c = 0; c <= cfg.last_cap; c++)
		if ((r = sys2(__NR_prctl, PR_CAPBSET_DROP, c)) < 0)
			fail("capability bounding set", r);
	if ((r = sys2(__NR_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)) < 0)
		fail("capability bounding set", r);
	// Back to nice 0 from the spawner's prepareNice while it still may, as
	// the Go init's threads go (gatherThreads): it reaps the run's orphans.
	if ((r = sys3(__NR_setpriority, 0 /* PRIO_PROCESS */, 0, 0)) < 0)
		fail("priority", r);
	if ((r = sys2(__NR_setgroups, 0, 0)) < 0 ||
	    (r = sys3(__NR_setresgid, cfg.gid, cfg.gid, cfg.gid)) < 0 ||
	    (r = sys3(__NR_setresuid, cfg.uid, cfg.uid, cfg.uid)) < 0)
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
	if ((r = sys2(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1)) < 0)
		fail("no_new_privs", r);
	struct sock_fprog prog = {(unsigned short)cfg.filter_len, filter};
	if ((r = sys3(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)) < 0)
		fail("init seccomp", r);
	say(REAPER_STATUS_FD, "{\"kind\":\"ready\"}\n");
	// Nothing of the supervisor's is left open but the status pipe, whose
	// EOF tells the supervisor that pid 1 is gone, as an init's does.
	if (sys3(__NR_close_range, 0, REAPER_STATUS_FD - 1, 0) < 0 ||
	    sys3(__NR_close_range, REAPER_STATUS_FD + 1, ~0U, 0) < 0)
		die(1);
	// The program is a zygote's child, not this process's: it only reaps what
	// the program leaves to it, until the run's end kills it.
	for (;;) {
		while (sys4(__NR_wait4, -1, 0, WNOHANG | __WALL, 0) > 0)
			;
		sys4(__NR_rt_sigtimedwait, &chld, 0, 0, sizeof chld);
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
