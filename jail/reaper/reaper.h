// Shared by reaper.c and reaper.go (cgo): the reaper's argument, descriptors,
// config and run.
#include <stdint.h>

#define REAPER_ARG "reaper"
#define REAPER_SPEC_FD 3
#define REAPER_STATUS_FD 4
#define REAPER_VERSION 2
#define REAPER_MAX_FILTER 4096
#define REAPER_MAX_RLIMITS 16
// A run's frame (struct reaper_run and its strings) is at most this long: the
// API's bodies are at most 4 MiB, whose environment a warm sandbox's handover
// carries as JSON, where each of <, > and & takes 6 bytes.
#define REAPER_MAX_RUN (64 << 20)
#define REAPER_MAX_ARGS 64
#define REAPER_MAX_ENV 512

// Modes: a zygote's sandbox, whose program is the zygote's child (the reaper
// only reaps), or a cold sandbox, whose program the reaper starts.
#define REAPER_MODE_REAP 0
#define REAPER_MODE_PROGRAM 1

struct reaper_rlimit {
	uint32_t resource, pad;
	uint64_t cur, max;
};

// The config, then the reaper's own filter (filter_len instructions); in
// program mode then the spawner's filter, the program's and the rlimits. A warm
// sandbox's reaper then reads its interpreter's argv and envp (warm_size bytes
// of NUL-terminated strings), which the supervisor sends once the root is
// built, and starts it before it says "ready".
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
