// Shared by reaper.c and reaper.go (cgo): the reaper's argument, descriptors,
// config and run.
#include <stdint.h>

#define REAPER_ARG "reaper"
#define REAPER_SPEC_FD 3
#define REAPER_STATUS_FD 4
// The mount namespace the reaper copies for its sandbox's, when the
// supervisor passes one (jail's mountns.go): entered and closed first thing.
#define REAPER_MNTNS_FD 6
// The tmpfs of the interpreters' copies (pid1.CopiesFD), passed with a copy
// to bind (the root's strings name it) and closed once it is bound.
#define REAPER_COPIES_FD 9
// Its folders: the copies, and an empty one (pid1.CopiesFiles, CopiesEmpty).
#define REAPER_COPIES_FILES "files"
#define REAPER_COPIES_EMPTY "empty"
#define REAPER_VERSION 5
#define REAPER_MAX_FILTER 4096
#define REAPER_MAX_RLIMITS 16
// A run's frame (struct reaper_run and its strings) is at most this long: the
// API's bodies are at most 4 MiB, whose environment a warm sandbox's handover
// carries as JSON, where each of <, > and & takes 6 bytes.
#define REAPER_MAX_RUN (64 << 20)
#define REAPER_MAX_ARGS 64
#define REAPER_MAX_ENV 512
// The root's strings (struct reaper_config's root_*): at most this many binds
// and masked or frozen proc paths of each kind, and this many bytes in all.
#define REAPER_MAX_BINDS 64
#define REAPER_MAX_PROC 64
#define REAPER_MAX_COPIES 8
#define REAPER_MAX_ROOT (1 << 20)
// The scratch tmpfs's reconfiguration context, which the reaper keeps open
// (close-on-exec) for the supervisor to take (pidfd_getfd) and resize it.
#define REAPER_SCRATCH_FD 5
// The scratch tmpfs has an inode for each this many bytes of its size
// (pid1.ScratchBytesPerInode).
#define REAPER_SCRATCH_BYTES_PER_INODE 4096
// pid1.WarmBootPath, where a warm sandbox's bootstrap is written.
#define REAPER_WARM_BOOT "/sandbox/.brg.js"
// pid1.WarmFD, the warm interpreter's descriptor of its socket.
#define REAPER_WARM_FD 63
// The read end of a cold program's report pipe (reaper.c's spawn), the one
// descriptor pid 1's filter lets it read (seccomp.ReaperReportFD).
#define REAPER_REPORT_FD 62

// Modes: a zygote's sandbox, whose program is the zygote's child (the reaper
// only reaps), or a cold sandbox, whose program the reaper starts.
// The signal by which the supervisor arms a run's backstop (reaper.c's
// wait_signal), the reaper's exit status when it fires, and the longest it
// takes (ms).
#define REAPER_BACKSTOP_SIGNAL 10 // SIGUSR1
#define REAPER_BACKSTOP_EXIT 3
#define REAPER_BACKSTOP_MAX_MS (24L * 3600 * 1000)

// siginfo_t as rt_sigqueueinfo takes it with SI_QUEUE (asm-generic/siginfo.h,
// 64-bit, x86-64 and arm64 alike): signo, errno, code and padding, then the
// _rt member: the sender's pid and uid (its claim, which the reaper ignores)
// and the value, the backstop's milliseconds.
struct reaper_siginfo {
	int32_t signo, err, code, pad;
	int32_t pid;
	uint32_t uid;
	uint64_t value;
	char rest[96];
};
_Static_assert(sizeof(struct reaper_siginfo) == 128, "siginfo_t is 128 bytes");
#define REAPER_MODE_REAP 0
#define REAPER_MODE_PROGRAM 1

struct reaper_rlimit {
	uint32_t resource, pad;
	uint64_t cur, max;
};

// The config, then the reaper's own filter (filter_len instructions); in
// program mode then the spawner's filter, the program's and the rlimits; then
// the root's strings (root_size bytes); then, for a warm sandbox, its
// interpreter's argv and envp (warm_size bytes of NUL-terminated strings),
// which the reaper starts once the root is built, before it says "ready".
struct reaper_config {
	uint32_t version;
	uint32_t uid, gid; // the init's host ids
	uint32_t last_cap;
	uint32_t filter_len;
	uint32_t mode;
	// Program mode only.
	uint32_t prog_uid, prog_gid; // the program's ids inside its user namespace
	uint32_t host_uid, host_gid; // what they map to on the host
	uint32_t spawn_filter_len, prog_filter_len;
	uint32_t nrlimits;
	uint32_t warm_size, warm_argc, warm_envc;
	// The root the reaper builds (as pid1's rootSteps) before anything else
	// but its namespaces: root_size bytes of NUL-terminated strings,
	// after the filters and rlimits: the scratch directory, the rootfs's
	// lower layer, the views' empty layer, the hostname, the warm
	// bootstrap ("" for none), and the view of a host folder's parts
	// (pid1.View: its host folder, target and shown folder; "" for none);
	// then root_nbinds pairs of a host folder and its target; then the proc files masked, the proc folders masked and
	// the proc paths made read-only (root_nfiles, root_ndirs, root_nro);
	// then root_ncopies pairs of an interpreter's copy (pid1.Copy: its name
	// at REAPER_COPIES_FD) and its target in the root.
	uint32_t root_size, root_nbinds, root_nfiles, root_ndirs, root_nro;
	uint32_t root_uid, root_gid; // the owner of /sandbox and the bootstrap
	uint32_t root_ncopies;
	uint64_t scratch_bytes;
};

// A program mode reaper's run, read once it has said "ready": this header,
// then size bytes: the script's path, its code, argv and envp, each string
// NUL-terminated (the code is code_len bytes, then a NUL), then handover_len
// bytes. A warm sandbox's run has no argv nor envp: its handover (the run's
// environment, jail's WarmEnv) goes to the waiting interpreter.
struct reaper_run {
	uint32_t size;
	uint32_t code_len;
	uint32_t argc, envc;
	uint32_t handover_len;
	uint32_t pad;
};
