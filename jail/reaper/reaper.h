// Shared by reaper.c and reaper.go (cgo): the reaper's argument, descriptors
// and config.
#include <stdint.h>

#define REAPER_ARG "reaper"
#define REAPER_SPEC_FD 3
#define REAPER_STATUS_FD 4
#define REAPER_VERSION 1
#define REAPER_MAX_FILTER 4096

struct reaper_config {
	uint32_t version;
	uint32_t uid, gid;
	uint32_t last_cap;
	uint32_t filter_len; // instructions; the filter follows
};
