package supervisor

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/egress"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/packages"
)

// Defaults of Config. deploy/brig.toml writes each of them down.
const (
	DefaultSocket = "/run/brig/brig.sock"
	// DefaultStateDir is the jail's, so that the service and `brig run --local`
	// share one state directory by default.
	DefaultStateDir  = jail.DefaultStateDir
	DefaultQueueSize = 64
	// DefaultRetention is API.md's promise and no more: each result keeps its
	// output (up to 1.1 million characters), and a benchmark harness can push
	// hundreds of thousands of runs an hour through one host.
	DefaultRetention = time.Hour
	DefaultGrace     = 30 * time.Second
	// MinRetention is API.md's promise: results are kept at least an hour.
	MinRetention = time.Hour
	// memoryShare is the part of the host's memory that runs may reserve when
	// Config.MaxConcurrent is zero; the rest is the host's and brig's.
	memoryShare = 0.75
	// runsPerCore bounds the default concurrency by CPU: each run gets one CPU
	// of quota, and runs spend part of their life waiting (start, I/O, sleep).
	runsPerCore = 4
)

// Config configures a Service. Zero values mean the defaults above.
type Config struct {
	// StateDir holds the journal (journal.db); zero means DefaultStateDir.
	// StateLock, when set, is its lock, taken already (LockStateDir), under
	// which the journal opens; its taker closes it.
	StateDir  string
	StateLock *os.File
	// AllowUIDs and AllowGIDs are the peers (by SO_PEERCRED) that may use the
	// API: a peer whose uid or primary gid is listed. Both empty means root only.
	AllowUIDs []int
	AllowGIDs []int
	// AdminGIDs are groups whose members see and stop every uid's runs, as root
	// does; a peer is a member by its primary gid or a supplementary group
	// (SO_PEERGROUPS). Others see only the runs their own uid created. Empty
	// means root alone. Being an admin does not admit a peer: it must also be
	// allowed by AllowUIDs or AllowGIDs.
	AdminGIDs []int
	// MaxConcurrent is how many runs execute at once; zero means a default from
	// the host: runsPerCore per core, and no more than memoryShare of the host's
	// memory holds at the default memory limit.
	MaxConcurrent int
	// MemoryBudgetMiB bounds the sum of memory_mib of the runs executing at once;
	// zero means memoryShare of the host's memory. A run waits in the queue until
	// its memory fits.
	MemoryBudgetMiB int
	// QueueSize is how many admitted runs of one uid may wait for a slot;
	// beyond it that uid's requests get 429. Zero means DefaultQueueSize;
	// negative means no queue.
	QueueSize int
	// QueueTotal is how many admitted runs of all uids together may wait for a
	// slot. Zero means four times QueueSize, four uids' shares; negative means
	// no queue.
	QueueTotal int
	// Retention is how long finished results are kept; zero means
	// DefaultRetention. Less than MinRetention is refused.
	Retention time.Duration
	// Grace is how long Shutdown lets runs finish before it stops them; zero
	// means DefaultGrace, negative none: the runs are stopped at once.
	Grace time.Duration
	// NetworkModes are the network modes this host gives a run (of
	// api.NetworkModes), api.NetworkNone among them: a request without a network
	// asks for it. Empty means api.NetworkNone only, so that a Service offers
	// egress only when told to; brig serve offers them all by default.
	NetworkModes []string
	// Egress is the operator's egress configuration, shared by every networked
	// run: pinned destinations, private hosts allowed by name, the upstream
	// resolver and the per-run limits. Its zero fields are egress's defaults; a
	// nil Egress.Logger becomes Logger, and a nil Egress.RegistryHosts every
	// language's RegistryHosts (whose addresses may then be non-public unless
	// Egress.RegistriesPublicOnly).
	Egress egress.Config
	// RegistryHosts maps a language (of api.Languages) to the host names a
	// run of it with network "registries" may reach (the hosts alone, not their
	// subdomains), as
	// packages.Managers.RegistryHosts gives them: read once when the service
	// starts, never per run. A language with none admits nothing in that mode.
	// GET /v1/health lists them.
	RegistryHosts map[string][]string
	// RegistryPorts maps a language to the ports its registry hosts may be
	// reached on in that mode (packages.Registry's Ports); a language with
	// none admits 80 and 443.
	RegistryPorts map[string][]int
	// RegistryIndexes maps a language to its registry URLs, as its package
	// installer has them (packages.Registry's Indexes): a networked run of the
	// language gets them as its own package manager's settings (registryEnv),
	// so that its pip or npm asks the registry mode registries admits.
	RegistryIndexes map[string][]string
	// Packages are the runs' packages: the layer cache and the policy.
	Packages PackagesConfig
	// RunProcesses and RunCPUs are each run's pids and CPU limits, as the
	// Launcher sets them, for GET /v1/limits; zero leaves them out of it.
	RunProcesses int
	RunCPUs      float64
	// Logger gets one line per request and one per run; nil means slog.Default().
	Logger *slog.Logger
	// Version is the build's, for the log's first line and brig_build_info;
	// empty means "unknown".
	Version string
}

// withDefaults fills the zero fields of cfg.
func (cfg Config) withDefaults() Config {
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.Version == "" {
		cfg.Version = "unknown"
	}
	if len(cfg.AllowUIDs) == 0 && len(cfg.AllowGIDs) == 0 {
		cfg.AllowUIDs = []int{0}
	}
	hostMiB := hostMemoryMiB()
	if cfg.MemoryBudgetMiB == 0 {
		cfg.MemoryBudgetMiB = int(float64(hostMiB) * memoryShare)
	}
	if cfg.MaxConcurrent == 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent(runtime.NumCPU(), hostMiB)
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = DefaultQueueSize
	} else if cfg.QueueSize < 0 {
		cfg.QueueSize = 0
	}
	if cfg.QueueTotal == 0 {
		cfg.QueueTotal = 4 * cfg.QueueSize
	} else if cfg.QueueTotal < 0 {
		cfg.QueueTotal = 0
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	}
	cfg.Packages.InstallMemoryMiB = cmp.Or(cfg.Packages.InstallMemoryMiB, packages.DefaultInstallMemoryMiB)
	cfg.Packages.InstallTimeout = cmp.Or(cfg.Packages.InstallTimeout, packages.DefaultInstallTimeout)
	if len(cfg.NetworkModes) == 0 {
		cfg.NetworkModes = []string{api.NetworkNone}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Egress.Logger == nil {
		cfg.Egress.Logger = cfg.Logger
	}
	if cfg.RegistryHosts == nil {
		cfg.RegistryHosts = map[string][]string{}
	}
	cfg.Egress = withRegistryHosts(cfg.Egress, cfg.RegistryHosts)
	return cfg
}

// DefaultMaxConcurrent is the concurrency a host of cpus cores and memMiB of
// memory gets when none is configured.
func DefaultMaxConcurrent(cpus, memMiB int) int {
	n := cpus * runsPerCore
	if byMem := int(float64(memMiB)*memoryShare) / api.DefaultMemoryMiB; byMem < n {
		n = byMem
	}
	return max(n, 1)
}

// Concurrent is how many runs cfg lets execute at once, its default filled
// in.
func (cfg Config) Concurrent() int { return cfg.withDefaults().MaxConcurrent }

// Validate runs the checks of cfg, its defaults filled in, as New does: a
// caller runs them before anything privileged (New runs them again).
func (cfg Config) Validate() error {
	return cfg.withDefaults().validate()
}

// validate runs the checks of a filled Config before anything is opened.
func (cfg Config) validate() error {
	var errs []error
	if cfg.MaxConcurrent < 1 {
		errs = append(errs, fmt.Errorf("max_concurrent %d: give at least 1, or 0 to size it from the host's cores and memory", cfg.MaxConcurrent))
	}
	if cfg.MemoryBudgetMiB < api.MaxMemoryMiB {
		errs = append(errs, fmt.Errorf("memory_budget_mib %d: give at least %d, so that a run of the largest memory limit fits, or 0 for 75%% of the host's memory", cfg.MemoryBudgetMiB, api.MaxMemoryMiB))
	}
	if cfg.Retention < MinRetention {
		errs = append(errs, fmt.Errorf("retention %s: results must be kept at least %s (API.md)", cfg.Retention, MinRetention))
	}
	for _, ids := range []struct {
		what string
		ids  []int
	}{{"admin gid", cfg.AdminGIDs}, {"allowed uid", cfg.AllowUIDs}, {"allowed gid", cfg.AllowGIDs}} {
		for _, id := range ids.ids {
			if id < 0 || id > math.MaxUint32-1 {
				// (uid_t is 32 bits, and -1, its largest, is no id: a
				// larger one never matches a peer, and was taken.)
				errs = append(errs, fmt.Errorf("%s %d: give an id from 0 to %d", ids.what, id, uint32(math.MaxUint32-1)))
			}
		}
	}
	errs = append(errs, checkNetworkModes(cfg.NetworkModes)...)
	errs = append(errs, checkEgress(cfg.Egress)...)
	errs = append(errs, checkRegistryHosts(cfg.RegistryHosts)...)
	return errors.Join(errs...)
}

// WarnMemoryBudget logs a warning when budgetMiB (Config.MemoryBudgetMiB) is
// more than this host's memory: New says it of its config, brig check of a
// config file.
func WarnMemoryBudget(log *slog.Logger, budgetMiB int) {
	if host := hostMemoryMiB(); host > 0 && budgetMiB > host {
		log.Warn("memory_budget_mib is more than this host's memory: runs admitted together may need more than it has, and the kernel's OOM killer then chooses among them and the host's own processes",
			"memory_budget_mib", budgetMiB, "host_mib", host)
	}
}

func hostMemoryMiB() int {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 4096
	}
	return int(uint64(si.Totalram) * uint64(si.Unit) >> 20)
}
