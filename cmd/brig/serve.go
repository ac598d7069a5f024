package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/urfave/cli/v2"

	"github.com/brig-sandbox/brig/api"
	"github.com/brig-sandbox/brig/cgroup"
	"github.com/brig-sandbox/brig/egress"
	"github.com/brig-sandbox/brig/internal/sysmon"
	"github.com/brig-sandbox/brig/jail"
	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/packages"
	"github.com/brig-sandbox/brig/rootfs"
	"github.com/brig-sandbox/brig/supervisor"
)

// serveConfig is the service's config file (TOML; deploy/brig.toml lists every
// key with its default). Flags override it.
type serveConfig struct {
	// Socket is the API socket's path.
	Socket string `toml:"socket"`
	// SocketGroup owns the socket with root (mode 0660); empty: root's group.
	SocketGroup string `toml:"socket_group"`
	// StateDir holds the journal, the rootfs skeleton and the scratch mount point.
	StateDir string `toml:"state_dir"`
	// AllowUIDs and AllowGIDs are the peers that may use the API; both empty: root only.
	AllowUIDs []int `toml:"allow_uids"`
	AllowGIDs []int `toml:"allow_gids"`
	// AdminGIDs are groups whose members see every uid's runs, as root does; empty: root alone.
	AdminGIDs []int `toml:"admin_gids"`
	// MaxConcurrent runs execute at once; 0: from the host's cores and memory.
	MaxConcurrent int `toml:"max_concurrent"`
	// MemoryBudgetMiB bounds the sum of executing runs' memory_mib; 0: 75% of the host's memory.
	MemoryBudgetMiB int `toml:"memory_budget_mib"`
	// QueueSize runs of one uid may wait for a slot, QueueTotal of all uids;
	// beyond either, 429.
	QueueSize  int `toml:"queue_size"`
	QueueTotal int `toml:"queue_total"`
	// Retention keeps finished results this long (at least 1h).
	Retention duration `toml:"retention"`
	// Grace lets runs finish this long on SIGTERM before they are stopped.
	Grace duration `toml:"grace"`
	// LogFormat is json or text; LogLevel debug, info, warn or error.
	LogFormat string `toml:"log_format"`
	LogLevel  string `toml:"log_level"`
	// Packages are the runs' packages: the installer, its layer cache and the
	// policy.
	Packages struct {
		// Enabled lets runs ask for packages (installed from the registries of
		// [egress.registries] or the package managers' settings).
		Enabled bool `toml:"enabled"`
		// CacheDir holds the installed layers; empty: <state_dir>/packages.
		CacheDir string `toml:"cache_dir"`
		// CacheMaxBytes bounds the layers' total size (least recently used
		// evicted first, never one a run holds).
		CacheMaxBytes int64 `toml:"cache_max_bytes"`
		// LayerMaxBytes bounds one layer's installed size
		// (packages.CacheConfig.LayerMaxBytes); 0 means 5 GiB, or
		// cache_max_bytes where that is less.
		LayerMaxBytes int64 `toml:"layer_max_bytes"`
		// MinFreeBytes is the disk space installs leave free where the
		// layers are (packages.CacheConfig.MinFreeBytes).
		MinFreeBytes int64 `toml:"min_free_bytes"`
		// OpenTTL is how long a layer of open constraints is reused before it
		// is resolved again (packages.CacheConfig.OpenTTL).
		OpenTTL duration `toml:"open_ttl"`
		// InstallTimeout and InstallMemoryMiB bound each install's sandbox.
		InstallTimeout   duration `toml:"install_timeout"`
		InstallMemoryMiB int      `toml:"install_memory_mib"`
		// AllowSourceBuilds lets pip build packages that have no wheel, which
		// runs their code at install time; off, only wheels are installed.
		AllowSourceBuilds bool `toml:"allow_source_builds"`
		// Policy: mode "open" (every package), "allow" (only names or globs
		// in allow), "deny" (all but those in deny) or "reviewed" (only the
		// exact name==version or name@version pairs in reviewed).
		Policy struct {
			Mode     string   `toml:"mode"`
			Allow    []string `toml:"allow"`
			Deny     []string `toml:"deny"`
			Reviewed []string `toml:"reviewed"`
		} `toml:"policy"`
	} `toml:"packages"`
	Sandbox struct {
		// CgroupParent is the cgroup (under each hierarchy) runs' groups are made in.
		CgroupParent string `toml:"cgroup_parent"`
		// Pool is how many prepared sandboxes wait for runs, per rootfs.
		Pool int `toml:"pool"`
		// CPUs is each run's CPU limit; Pids its limit on processes and threads.
		CPUs float64 `toml:"cpus"`
		Pids int64   `toml:"pids"`
		// IDFirst and IDCount are the range of host ids runs are mapped to, two
		// per sandbox; no account, process or file may use them.
		IDFirst uint32 `toml:"id_first"`
		IDCount uint32 `toml:"id_count"`
		// Warm lists the languages whose pooled sandboxes hold their
		// interpreter already started, waiting for a program.
		Warm []string `toml:"warm"`
		// Rootfs maps a language to a built rootfs directory; others use the host's.
		Rootfs map[string]string `toml:"rootfs"`
		// InterpreterCopies runs the interpreters from copies on huge pages.
		InterpreterCopies bool `toml:"interpreter_copies"`
	} `toml:"sandbox"`
	Egress egressConfig `toml:"egress"`
}

// egressConfig is the [egress] section: the network modes on offer and the
// operator's egress settings (supervisor.Config's NetworkModes, Egress and,
// once read, RegistryHosts).
type egressConfig struct {
	// Modes are the network modes this host offers; "none" must be one.
	Modes []string `toml:"modes"`
	// Pins maps "host:port" to the "ip:port" the proxy dials for it.
	Pins map[string]string `toml:"pins"`
	// AllowPrivateHosts may resolve to non-public addresses (with subdomains).
	AllowPrivateHosts []string `toml:"allow_private_hosts"`
	// PrivateRegistries lets the registry hosts resolve to private, shared,
	// unique-local, documentation or benchmarking addresses (a mirror or a
	// gateway of the host's network): egress.Config.RegistriesPublicOnly's
	// opposite.
	PrivateRegistries bool `toml:"private_registries"`
	// Resolver is the upstream DNS server, ip:port; empty: /etc/resolv.conf's first.
	Resolver string `toml:"resolver"`
	// MaxConns, ConnsPerSecond and MaxBytes (each way) bound each run.
	MaxConns       int     `toml:"max_conns"`
	ConnsPerSecond float64 `toml:"conns_per_second"`
	MaxBytes       int64   `toml:"max_bytes"`
	// HandshakeTimeout bounds reading a ClientHello, request head or CONNECT line.
	HandshakeTimeout duration `toml:"handshake_timeout"`
	// Registries are each language's registry URLs; empty: ask its package manager.
	Registries struct {
		Python     []string `toml:"python"`
		JavaScript []string `toml:"javascript"`
	} `toml:"registries"`
}

// registries is the list of lang's registry URLs.
func (e *egressConfig) registries(lang api.Language) *[]string {
	if lang == api.JavaScript {
		return &e.Registries.JavaScript
	}
	return &e.Registries.Python
}

// duration is a time.Duration written as "30s" or "24h" in the config file.
type duration time.Duration

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = duration(v)
	if err != nil {
		// time's own words alone ("missing unit in duration") did not say
		// what to write (the operator probe of 2026-12-06).
		return fmt.Errorf("%w: write a duration in quotes with its unit, such as \"30s\", \"5m\" or \"1h\"", err)
	}
	return nil
}

// Defaults of the service; deploy/brig.toml writes each down (a test checks).
const (
	defaultServePool   = 4
	defaultLogFormat   = "json"
	defaultLogLevel    = "info"
	defaultServeParent = "brig"
)

func defaultServeConfig() serveConfig {
	var sc serveConfig
	sc.Socket = supervisor.DefaultSocket
	sc.StateDir = supervisor.DefaultStateDir
	sc.AllowUIDs = []int{0}
	sc.AllowGIDs = []int{}
	sc.AdminGIDs = []int{}
	sc.QueueSize = supervisor.DefaultQueueSize
	sc.QueueTotal = queueTotalOf(sc.QueueSize)
	sc.Retention = duration(supervisor.DefaultRetention)
	sc.Grace = duration(supervisor.DefaultGrace)
	sc.LogFormat = defaultLogFormat
	sc.LogLevel = defaultLogLevel
	sc.Sandbox.CgroupParent = defaultServeParent
	sc.Sandbox.Pool = defaultServePool
	sc.Sandbox.CPUs = jail.DefaultCPUs
	sc.Sandbox.Pids = jail.DefaultPids
	sc.Sandbox.IDFirst = jail.DefaultIDFirst
	sc.Sandbox.IDCount = jail.DefaultIDCount
	sc.Sandbox.Warm = []string{"python", "javascript"}
	sc.Sandbox.InterpreterCopies = true
	sc.Sandbox.Rootfs = map[string]string{}
	sc.Packages.Enabled = true
	sc.Packages.CacheMaxBytes = packages.DefaultCacheBytes
	sc.Packages.MinFreeBytes = packages.DefaultMinFreeBytes
	sc.Packages.InstallTimeout = duration(packages.DefaultInstallTimeout)
	sc.Packages.OpenTTL = duration(packages.DefaultOpenTTL)
	sc.Packages.InstallMemoryMiB = packages.DefaultInstallMemoryMiB
	sc.Packages.Policy.Mode = "open"
	sc.Packages.Policy.Allow, sc.Packages.Policy.Deny, sc.Packages.Policy.Reviewed = []string{}, []string{}, []string{}
	sc.Egress.Modes = api.Strings(api.NetworkModes)
	sc.Egress.Pins = map[string]string{}
	sc.Egress.AllowPrivateHosts = []string{}
	sc.Egress.PrivateRegistries = true
	sc.Egress.MaxConns = egress.DefaultMaxConns
	sc.Egress.ConnsPerSecond = egress.DefaultConnsPerSecond
	sc.Egress.MaxBytes = egress.DefaultMaxBytes
	sc.Egress.HandshakeTimeout = duration(egress.DefaultHandshakeTimeout)
	sc.Egress.Registries.Python = []string{}
	sc.Egress.Registries.JavaScript = []string{}
	return sc
}

// loadServeConfig reads path over the defaults; unknown keys are refused.
func loadServeConfig(path string) (serveConfig, error) {
	sc, _, err := loadServeConfigKeys(path)
	return sc, err
}

// loadServeConfigKeys is loadServeConfig, and whether the file gave
// queue_total, which otherwise follows queue_size (queueTotalOf).
func loadServeConfigKeys(path string) (sc serveConfig, queueTotalGiven bool, err error) {
	sc = defaultServeConfig()
	if path == "" {
		return sc, false, nil
	}
	md, err := toml.DecodeFile(path, &sc)
	if err != nil {
		return sc, false, fmt.Errorf("reading the config %s: %w", path, err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		keys := make([]string, len(un))
		for i, k := range un {
			keys[i] = k.String()
		}
		return sc, false, fmt.Errorf("the config %s has unknown keys: %s%s (deploy/brig.toml lists the keys)", path, strings.Join(keys, ", "), sectionHint(un, reflect.TypeOf(sc)))
	}
	if err := checkKeySpelling(md.Keys(), reflect.TypeOf(sc)); err != nil {
		return sc, false, fmt.Errorf("the config %s: %w (deploy/brig.toml lists the keys)", path, err)
	}
	queueTotalGiven = md.IsDefined("queue_total")
	if !queueTotalGiven {
		sc.QueueTotal = queueTotalOf(sc.QueueSize)
	}
	return sc, queueTotalGiven, nil
}

// sectionHint names the table an unknown top-level key belongs in, where one
// of t's tables has a key of that name ("pool" at the top: "[sandbox]"), as
// "; pool belongs under [sandbox]".
func sectionHint(keys []toml.Key, t reflect.Type) string {
	var hints []string
	for _, k := range keys {
		if len(k) != 1 {
			continue
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			table := strings.Split(f.Tag.Get("toml"), ",")[0]
			if f.Type.Kind() != reflect.Struct || table == "" {
				continue
			}
			for j := 0; j < f.Type.NumField(); j++ {
				if strings.Split(f.Type.Field(j).Tag.Get("toml"), ",")[0] == k[0] {
					hints = append(hints, fmt.Sprintf("%s belongs under [%s]", k[0], table))
				}
			}
		}
	}
	if len(hints) == 0 {
		return ""
	}
	return "; " + strings.Join(hints, ", ")
}

// checkKeySpelling refuses a key of the file that is not spelled as its
// field's tag: the TOML decoder matches a key to a field regardless of case,
// so "Pool" was taken for "pool", and both in one table were two keys, the
// last one winning, where a key given twice is refused (the operator probe of
// 2026-12-06). t is the type the keys were decoded into; a map's keys are the
// file's own.
func checkKeySpelling(keys []toml.Key, t reflect.Type) error {
	for _, key := range keys {
		at := t
		for i, part := range key {
			for at.Kind() == reflect.Pointer {
				at = at.Elem()
			}
			switch at.Kind() {
			case reflect.Map:
				at = at.Elem()
				continue
			case reflect.Struct:
			default:
				continue // a value's own, past the config's keys
			}
			var field *reflect.StructField
			var spelled string
			for j := range at.NumField() {
				f := at.Field(j)
				name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
				if name == part {
					field = &f
					break
				}
				if strings.EqualFold(name, part) {
					spelled = name
				}
			}
			if field == nil {
				what := strings.Join(key[:i+1], ".")
				if spelled != "" {
					return fmt.Errorf("%s is spelled %s: keys are lower case, as written", what, strings.Join(append(slices.Clone(key[:i]), spelled), "."))
				}
				return fmt.Errorf("unknown key %s", what)
			}
			at = field.Type
		}
	}
	return nil
}

// queueTotalOf is queue_total where neither the file nor a flag gives it:
// four uids' shares, so that a queue_size set alone keeps its meaning for a
// lone uid and scales the whole queue with it (the default's 64 gives 256).
func queueTotalOf(queueSize int) int { return 4 * queueSize }

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the service on its Unix socket, in the foreground, until SIGTERM or SIGINT",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "a TOML config file (see deploy/brig.toml); flags override it"},
			&cli.StringFlag{Name: "socket", Usage: "the API socket", DefaultText: supervisor.DefaultSocket},
			&cli.StringFlag{Name: "socket-group", Usage: "group that owns the socket with root (mode 0660)"},
			&cli.StringFlag{Name: "state-dir", Usage: "directory of the journal and the sandboxes' state: root's, writable by root alone, on a path no one else can change", DefaultText: supervisor.DefaultStateDir},
			&cli.IntSliceFlag{Name: "allow-uid", Usage: "a uid allowed to use the API, which must also be in --socket-group to open the socket (repeatable; with neither this nor --allow-gid, root only; a list replaces that default: root is refused unless --allow-uid 0 is given too)"},
			&cli.IntSliceFlag{Name: "allow-gid", Usage: "a gid allowed to use the API, which must also be the --socket-group for its members to open the socket (repeatable; replaces the default of root only, as --allow-uid does)"},
			&cli.IntSliceFlag{Name: "admin-gid", Usage: "a gid whose members see and stop every uid's runs, as root does (repeatable; default none)"},
			&cli.IntFlag{Name: "max-concurrent", Usage: "runs executing at once (0: from the host's cores and memory)", DefaultText: "0"},
			&cli.IntFlag{Name: "queue", Usage: "runs of one uid that may wait for a slot before its requests get 429 (0: no queue)", DefaultText: fmt.Sprint(supervisor.DefaultQueueSize)},
			&cli.IntFlag{Name: "queue-total", Usage: "runs of all uids together that may wait for a slot (at least --queue; four times it when not given)", DefaultText: fmt.Sprint(queueTotalOf(supervisor.DefaultQueueSize))},
			&cli.DurationFlag{Name: "retention", Usage: "how long finished results are kept (at least 1h)", DefaultText: supervisor.DefaultRetention.String()},
			&cli.DurationFlag{Name: "grace", Usage: "how long runs may finish on SIGTERM before they are stopped (0s: stopped at once)", DefaultText: supervisor.DefaultGrace.String()},
			&cli.StringFlag{Name: "log-format", Usage: "json or text", DefaultText: defaultLogFormat},
			&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error", DefaultText: defaultLogLevel},
			&cli.StringFlag{Name: "cgroup-parent", Usage: "cgroup under which runs' groups are made", DefaultText: defaultServeParent},
			&cli.IntFlag{Name: "pool", Usage: "prepared sandboxes kept waiting per rootfs (0: each run builds its own)", DefaultText: fmt.Sprint(defaultServePool)},
			&cli.Float64Flag{Name: "cpus", Usage: "CPU limit of each run, in CPUs", DefaultText: fmt.Sprint(jail.DefaultCPUs)},
			&cli.Int64Flag{Name: "pids", Usage: "limit on processes and threads of each run", DefaultText: fmt.Sprint(jail.DefaultPids)},
			&cli.StringSliceFlag{Name: "warm", Usage: "a language whose pooled sandboxes hold its interpreter already started (repeatable; default python and javascript; --warm none for none)"},
			&cli.BoolFlag{Name: "interpreter-copies", Usage: "run the interpreters from copies on huge pages, which start faster for the copies' memory (=false: from their own files)", DefaultText: "true"},
			&cli.UintFlag{Name: "id-first", Usage: "first host id of the range runs are mapped to (see brig check)", DefaultText: fmt.Sprint(jail.DefaultIDFirst)},
			&cli.UintFlag{Name: "id-count", Usage: "how many host ids the range holds (two per sandbox)", DefaultText: fmt.Sprint(jail.DefaultIDCount)},
			&cli.StringSliceFlag{Name: "rootfs", Usage: "a built rootfs for a language, as LANG=DIR"},
			&cli.StringSliceFlag{Name: "network-mode", Usage: "a network mode this host offers: none, registries, domains or any (repeatable; default all four)"},
			&cli.StringSliceFlag{Name: "egress-pin", Usage: "a destination the proxy dials at a fixed address, as HOST:PORT=IP:PORT (repeatable; added to the config's [egress.pins], replacing one of the same HOST:PORT)"},
			&cli.StringSliceFlag{Name: "allow-private-host", Usage: "a host name (with its subdomains) whose addresses may be of a class that is not public, such as private or link-local (repeatable)"},
			&cli.BoolFlag{Name: "private-registries", Value: true, Usage: "let the package registries' hosts resolve to private, shared, unique-local, documentation or benchmarking addresses (a mirror or a gateway of this host's network); =false refuses them as any other name's"},
			&cli.StringFlag{Name: "egress-resolver", Usage: "the upstream DNS server of the egress proxy, as IP:PORT (default: the first nameserver of /etc/resolv.conf)"},
			&cli.StringSliceFlag{Name: "registry", Usage: "a package registry URL of a language, as LANG=URL (repeatable; replaces the config's URLs of that language, not of the other; default: the package manager's own setting)"},
		},
		Action: serveAction,
	}
}

// serveConfigFrom is the config file with the flags that were given over it.
func serveConfigFrom(c *cli.Context) (serveConfig, error) {
	if err := checkIDFlags(c); err != nil {
		return serveConfig{}, err
	}
	if c.IsSet("config") && c.String("config") == "" {
		// An unset variable in a unit's --config "$BRIG_CONFIG" had the
		// service start on the defaults without a word (the operator probe).
		return serveConfig{}, errors.New("--config is empty: give the config file's path, or leave --config out for the embedded defaults")
	}
	sc, queueTotalGiven, err := loadServeConfigKeys(c.String("config"))
	if err != nil {
		return sc, err
	}
	override(c, "socket", &sc.Socket, c.String)
	override(c, "socket-group", &sc.SocketGroup, c.String)
	override(c, "state-dir", &sc.StateDir, c.String)
	override(c, "log-format", &sc.LogFormat, c.String)
	override(c, "log-level", &sc.LogLevel, c.String)
	override(c, "cgroup-parent", &sc.Sandbox.CgroupParent, c.String)
	override(c, "allow-uid", &sc.AllowUIDs, c.IntSlice)
	override(c, "allow-gid", &sc.AllowGIDs, c.IntSlice)
	override(c, "admin-gid", &sc.AdminGIDs, c.IntSlice)
	override(c, "max-concurrent", &sc.MaxConcurrent, c.Int)
	override(c, "queue", &sc.QueueSize, c.Int)
	override(c, "queue-total", &sc.QueueTotal, c.Int)
	if !queueTotalGiven && !c.IsSet("queue-total") {
		sc.QueueTotal = queueTotalOf(sc.QueueSize)
	}
	override(c, "retention", &sc.Retention, func(n string) duration { return duration(c.Duration(n)) })
	override(c, "grace", &sc.Grace, func(n string) duration { return duration(c.Duration(n)) })
	override(c, "pool", &sc.Sandbox.Pool, c.Int)
	override(c, "cpus", &sc.Sandbox.CPUs, c.Float64)
	override(c, "pids", &sc.Sandbox.Pids, c.Int64)
	override(c, "warm", &sc.Sandbox.Warm, c.StringSlice)
	override(c, "interpreter-copies", &sc.Sandbox.InterpreterCopies, c.Bool)
	override(c, "id-first", &sc.Sandbox.IDFirst, func(n string) uint32 { return uint32(c.Uint(n)) })
	override(c, "id-count", &sc.Sandbox.IDCount, func(n string) uint32 { return uint32(c.Uint(n)) })
	built := map[rootfs.Language]string{}
	if err := parseRootfsFlags(c.StringSlice("rootfs"), built); err != nil {
		return sc, err
	}
	for lang, dir := range built {
		sc.Sandbox.Rootfs[lang.String()] = dir
	}
	override(c, "network-mode", &sc.Egress.Modes, c.StringSlice)
	override(c, "allow-private-host", &sc.Egress.AllowPrivateHosts, c.StringSlice)
	override(c, "private-registries", &sc.Egress.PrivateRegistries, c.Bool)
	override(c, "egress-resolver", &sc.Egress.Resolver, c.String)
	// Flags of maps and lists by language override the file's entries they
	// name, and leave the others: an operator who overrode npm's registry
	// had sent Python's installs to pip's default index instead of the
	// config's mirror (the operator probe of 2026-12-06).
	if c.IsSet("egress-pin") {
		if sc.Egress.Pins == nil {
			sc.Egress.Pins = map[string]string{}
		}
		for _, kv := range c.StringSlice("egress-pin") {
			// Neither side holds a "=": the first one splits.
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return sc, fmt.Errorf("--egress-pin %q: write it as HOST:PORT=IP:PORT", kv)
			}
			sc.Egress.Pins[k] = v
		}
	}
	if c.IsSet("registry") {
		named := map[api.Language]bool{}
		for _, kv := range c.StringSlice("registry") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return sc, fmt.Errorf("--registry %q: write it as LANG=URL", kv)
			}
			lang, err := api.ParseLanguage(k)
			if err != nil {
				return sc, fmt.Errorf("--registry %q: %q is not a language brig runs; use %s", kv, k, api.OneOf(api.Languages))
			}
			urls := sc.Egress.registries(lang)
			if !named[lang] {
				named[lang] = true
				*urls = []string{}
			}
			*urls = append(*urls, v)
		}
	}
	return sc, nil
}

// checkValues refuses the values of the service's keys that they can't mean.
// Every key means what it says: deploy/brig.toml writes each default down, so a
// zero is never "the default", as it is in the libraries' configs. A bound must
// be positive; queue_size and grace may be zero, meaning none. max_concurrent,
// memory_budget_mib and packages.layer_max_bytes are the exceptions,
// documented: 0 sizes the first two from the host, the last from
// cache_max_bytes (an operator's smaller cache must not stop the service).
func (sc serveConfig) checkValues() error {
	errs := refuseNonPositive(
		bound{"packages.cache_max_bytes", sc.Packages.CacheMaxBytes > 0, sc.Packages.CacheMaxBytes},
		bound{"packages.min_free_bytes", sc.Packages.MinFreeBytes > 0, sc.Packages.MinFreeBytes},
		bound{"packages.install_timeout", sc.Packages.InstallTimeout > 0, time.Duration(sc.Packages.InstallTimeout)},
		bound{"packages.open_ttl", sc.Packages.OpenTTL > 0, time.Duration(sc.Packages.OpenTTL)},
		bound{"packages.install_memory_mib", sc.Packages.InstallMemoryMiB > 0, sc.Packages.InstallMemoryMiB},
		bound{"egress.max_conns", sc.Egress.MaxConns > 0, sc.Egress.MaxConns},
		bound{"egress.conns_per_second", sc.Egress.ConnsPerSecond > 0, sc.Egress.ConnsPerSecond},
		bound{"egress.max_bytes", sc.Egress.MaxBytes > 0, sc.Egress.MaxBytes},
		bound{"egress.handshake_timeout", sc.Egress.HandshakeTimeout > 0, time.Duration(sc.Egress.HandshakeTimeout)},
	)
	if c := sc.Egress.ConnsPerSecond; math.IsInf(c, 0) || math.IsNaN(c) {
		errs = append(errs, fmt.Errorf("egress.conns_per_second %v: give a finite positive number", c))
	}
	for _, lang := range slices.Sorted(maps.Keys(sc.Sandbox.Rootfs)) {
		if sc.Sandbox.Rootfs[lang] == "" {
			errs = append(errs, fmt.Errorf("sandbox.rootfs.%s is empty: give the directory of a rootfs that brig rootfs build made, or leave the key out for the host's interpreter", lang))
		}
	}
	if r := time.Duration(sc.Retention); r < supervisor.MinRetention {
		errs = append(errs, fmt.Errorf("retention %s: give at least %s, which API.md promises harnesses", r, supervisor.MinRetention))
	}
	if l := sc.Packages.LayerMaxBytes; l < 0 || l > sc.Packages.CacheMaxBytes {
		errs = append(errs, fmt.Errorf("packages.layer_max_bytes %d: give at most packages.cache_max_bytes (%d), or 0 for 5 GiB or the cache's size where that is less", l, sc.Packages.CacheMaxBytes))
	}
	if sc.Sandbox.CgroupParent == "" {
		errs = append(errs, fmt.Errorf("sandbox.cgroup_parent is empty: name the cgroup the runs' groups go under (%q by default)", defaultServeParent))
	} else if err := (cgroup.Config{Parent: sc.Sandbox.CgroupParent}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("sandbox.cgroup_parent: %w: give a name below the hierarchy's root, such as %q", err, defaultServeParent))
	}
	if sc.StateDir == "" {
		// Read as the default by the journal and the jail, and as the working
		// directory by the package cache and the rootfs skeleton: the state
		// would be split across the two.
		errs = append(errs, fmt.Errorf("state_dir is empty: give the absolute path of the directory for the journal, the package cache and the rootfs skeleton (%q by default)", defaultServeConfig().StateDir))
	} else if !filepath.IsAbs(sc.StateDir) {
		errs = append(errs, fmt.Errorf("state_dir %q is a relative path: give an absolute one, such as %q", sc.StateDir, defaultServeConfig().StateDir))
	}
	if sc.Socket == "" {
		errs = append(errs, fmt.Errorf("socket is empty: give the path of the Unix socket to serve on (%q by default)", defaultServeConfig().Socket))
	} else if !filepath.IsAbs(sc.Socket) {
		// Taken against the working directory, / under systemd: the
		// harnesses would look for it elsewhere.
		errs = append(errs, fmt.Errorf("socket %q is a relative path: give an absolute one, such as %q", sc.Socket, defaultServeConfig().Socket))
	} else if len(sc.Socket) > maxSocketPath {
		// Found before anything is made: bind's EINVAL came after the
		// whole start (the operator probe of 2026-12-06).
		errs = append(errs, fmt.Errorf("socket %q is %d bytes long: a Unix socket's path is at most %d; give a shorter one", sc.Socket, len(sc.Socket), maxSocketPath))
	}
	if d := sc.Packages.CacheDir; d != "" && !filepath.IsAbs(d) {
		errs = append(errs, fmt.Errorf("packages.cache_dir %q is a relative path: give an absolute one, or leave it out for <state_dir>/packages", d))
	}
	if len(sc.Egress.Modes) == 0 {
		errs = append(errs, fmt.Errorf("egress.modes is empty: list %q at least, the mode of every request that names no network", api.NetworkNone))
	}
	if sc.QueueSize < 0 {
		errs = append(errs, fmt.Errorf("queue_size %d: give 0 (no queue: a request that finds no free slot gets 429) or more", sc.QueueSize))
	} else if sc.QueueTotal < sc.QueueSize {
		errs = append(errs, fmt.Errorf("queue_total %d is below queue_size %d, the most one uid may have waiting: give at least that, or leave queue_total out for four times queue_size", sc.QueueTotal, sc.QueueSize))
	}
	if sc.Grace < 0 {
		errs = append(errs, fmt.Errorf("grace %s: give 0s (runs are stopped at once) or more", time.Duration(sc.Grace)))
	}
	if m := sc.Packages.InstallMemoryMiB; m > 0 && (m < api.MinMemoryMiB || m > api.MaxMemoryMiB) {
		errs = append(errs, fmt.Errorf("packages.install_memory_mib %d: give %d to %d MiB, a run's bounds", m, api.MinMemoryMiB, api.MaxMemoryMiB))
	}
	if sc.SocketGroup != "" {
		if _, err := supervisor.SocketGroupID(sc.SocketGroup); err != nil {
			errs = append(errs, fmt.Errorf("socket_group: %w", err))
		}
	}
	return errors.Join(errs...)
}

// supervisorConfig maps the config file's service keys to supervisor.Config,
// whose zero queue and grace mean its defaults and a negative one none.
// RegistryHosts is left to registryHosts, which runs the package managers.
func (sc serveConfig) supervisorConfig(log *slog.Logger) supervisor.Config {
	none := func(v int64) int64 {
		if v == 0 {
			return -1
		}
		return v
	}
	return supervisor.Config{
		StateDir:        sc.StateDir,
		AllowUIDs:       sc.AllowUIDs,
		AllowGIDs:       sc.AllowGIDs,
		AdminGIDs:       sc.AdminGIDs,
		MaxConcurrent:   sc.MaxConcurrent,
		MemoryBudgetMiB: sc.MemoryBudgetMiB,
		QueueSize:       int(none(int64(sc.QueueSize))),
		QueueTotal:      int(none(int64(sc.QueueTotal))),
		Retention:       time.Duration(sc.Retention),
		Grace:           time.Duration(none(int64(sc.Grace))),
		NetworkModes:    sc.Egress.Modes,
		RunProcesses:    int(sc.Sandbox.Pids),
		RunCPUs:         sc.Sandbox.CPUs,
		Egress: egress.Config{
			Pins:                 sc.Egress.Pins,
			AllowPrivateHosts:    sc.Egress.AllowPrivateHosts,
			RegistriesPublicOnly: !sc.Egress.PrivateRegistries,
			Resolver:             sc.Egress.Resolver,
			MaxConns:             sc.Egress.MaxConns,
			ConnsPerSecond:       sc.Egress.ConnsPerSecond,
			MaxBytes:             sc.Egress.MaxBytes,
			HandshakeTimeout:     time.Duration(sc.Egress.HandshakeTimeout),
			Logger:               log,
		},
		Logger:  log,
		Version: version(),
	}
}

// packageCacheDir is where the installed layers are: cache_dir, by default
// <state_dir>/packages.
func packageCacheDir(sc serveConfig) string {
	if sc.Packages.CacheDir != "" {
		return sc.Packages.CacheDir
	}
	return filepath.Join(sc.StateDir, "packages")
}

// openPackageCache opens the layer cache, whose installer runs pip or npm in
// sandboxes of l with network "registries".
func openPackageCache(sc serveConfig, regs map[string]packages.Registry, cfg supervisor.Config, l *jail.Launcher, log *slog.Logger) (*packages.Cache, error) {
	indexes := map[string][]string{}
	for lang, r := range regs {
		indexes[lang] = r.Indexes
	}
	icfg := packages.InstallerConfig{
		Run:               supervisor.InstallerRun(l, cfg.Egress, cfg.RegistryHosts),
		Registries:        indexes,
		Timeout:           time.Duration(sc.Packages.InstallTimeout),
		MemoryMiB:         sc.Packages.InstallMemoryMiB,
		AllowSourceBuilds: sc.Packages.AllowSourceBuilds,
	}
	inst, err := packages.NewInstaller(icfg)
	if err != nil {
		return nil, fmt.Errorf("the package installer: %w", err)
	}
	cache, err := packages.OpenCache(packages.CacheConfig{Dir: packageCacheDir(sc), MaxBytes: sc.Packages.CacheMaxBytes, LayerMaxBytes: sc.Packages.LayerMaxBytes, MinFreeBytes: sc.Packages.MinFreeBytes, OpenTTL: time.Duration(sc.Packages.OpenTTL), Installer: inst, Logger: log})
	if err != nil {
		return nil, err // it says it was opening the package cache
	}
	return cache, nil
}

// installerOptions are the installer's options per language, part of each
// layer's key.
func installerOptions(sc serveConfig) map[string][]string {
	icfg := packages.InstallerConfig{AllowSourceBuilds: sc.Packages.AllowSourceBuilds}
	opts := map[string][]string{}
	for _, lang := range api.Languages {
		opts[lang.String()] = icfg.Options(lang.String())
	}
	return opts
}

// registryHosts reads, once at the start, the registry hosts of each language
// that a `registries` network admits: the configured URLs', else those the
// package manager names. A language without its package manager gets none, and
// the log says so; without the registries mode on offer nothing is read.
func registryHosts(ctx context.Context, sc serveConfig, m packages.Managers, log *slog.Logger) (map[string][]string, error) {
	regs, err := registries(ctx, sc, m, log)
	if err != nil {
		return nil, err
	}
	hosts := map[string][]string{}
	for lang, r := range regs {
		hosts[lang] = r.Hosts
	}
	return hosts, nil
}

// registries reads each language's registry once at the start, as
// registryHosts describes, when the registries mode is on offer or packages
// are installed (whose installer uses the same URLs and hosts).
func registries(ctx context.Context, sc serveConfig, m packages.Managers, log *slog.Logger) (map[string]packages.Registry, error) {
	regs := map[string]packages.Registry{}
	if !slices.Contains(sc.Egress.Modes, api.NetworkRegistries) && !sc.Packages.Enabled {
		return regs, nil
	}
	for _, l := range api.Languages {
		lang := struct {
			name       string
			configured []string
		}{l.String(), *sc.Egress.registries(l)}
		r, err := m.Registry(ctx, lang.name, lang.configured)
		switch {
		case errors.Is(err, packages.ErrNoManager):
			log.Warn("network mode registries admits nothing for this language, and its packages can't be installed: its package manager is not installed and no registry is configured", "language", lang.name, "err", err,
				"hint", "install it, or set [egress.registries] "+lang.name+" in the config")
			r = packages.Registry{Indexes: []string{}, Hosts: []string{}}
		case err != nil:
			return nil, fmt.Errorf("the %s registries: %w (Hint: set [egress.registries] %s in the config, or --registry %s=URL)", lang.name, err, lang.name, lang.name)
		default:
			log.Info("registry hosts", "language", lang.name, "hosts", r.Hosts, "configured", len(lang.configured) > 0)
		}
		regs[lang.name] = r
	}
	return regs, nil
}

// warnConfig logs a warning for each value of sc that brig takes but that
// can't do what it says: serve says them at its start, brig check of a config
// file.
func warnConfig(sc serveConfig, log *slog.Logger) {
	if n := runtime.NumCPU(); sc.Sandbox.CPUs > float64(n) {
		log.Warn("sandbox.cpus is more than this host has: a run is held to the host's CPUs alone", "cpus", sc.Sandbox.CPUs, "host_cpus", n)
	}
	// Each sandbox takes two ids, a running one and each waiting in the
	// pools (one per language) alike.
	if need := sc.MaxConcurrent + len(api.Languages)*sc.Sandbox.Pool; sc.MaxConcurrent > 0 && int(sc.Sandbox.IDCount)/2 < need {
		log.Warn("sandbox.id_count holds fewer sandboxes than max_concurrent runs and the pools need: runs past it fail internal (no ids left)",
			"id_count", sc.Sandbox.IDCount, "sandboxes", sc.Sandbox.IDCount/2, "max_concurrent", sc.MaxConcurrent, "pool", sc.Sandbox.Pool)
	}
	if sc.Sandbox.Pool == 0 && len(sc.Sandbox.Warm) > 0 && !slices.Equal(sc.Sandbox.Warm, []string{"none"}) && !slices.Equal(sc.Sandbox.Warm, defaultServeConfig().Sandbox.Warm) {
		log.Warn("sandbox.warm names languages but sandbox.pool is 0: warm sandboxes wait in the pool, so every run starts cold", "warm", sc.Sandbox.Warm)
	}
	if peers := peersWithoutSocket(sc); len(peers) > 0 {
		log.Warn("allow_uids or allow_gids name peers that can't open the socket unless they are in socket_group too, which with root alone may (mode 0660): they get a permission error, not the API; set socket_group to a group they are in",
			"peers", strings.Join(peers, ", "), "socket_group", sc.SocketGroup)
	}
	if unadmitted := slices.DeleteFunc(slices.Clone(sc.AdminGIDs), func(g int) bool { return slices.Contains(sc.AllowGIDs, g) }); len(unadmitted) > 0 {
		// An admin group widens what an allowed peer sees; it admits no one
		// (the identity probe of 2026-12-06 was refused 403 as an admin).
		log.Warn("admin_gids names groups that allow_gids does not: an admin group admits no one by itself, so its members get 403 unless allow_uids or allow_gids allows them; add the group to allow_gids too",
			"gids", fmt.Sprint(unadmitted))
	}
	if open := []string{"", packages.PolicyOpen}; sc.Packages.Enabled && !slices.Contains(open, sc.Packages.Policy.Mode) {
		if reach := slices.DeleteFunc(slices.Clone(sc.Egress.Modes), func(m string) bool { return m == api.NetworkNone }); len(reach) > 0 {
			// The policy checks what a request names and what its install
			// resolves; a program that reaches a registry itself fetches
			// what it likes (the packages probe of 2026-12-06 unpacked a
			// denied package's tarball with fetch in mode registries).
			log.Warn("the package policy does not bound what a run fetches itself: a program in these network modes can download a refused package from a registry; offer only mode none (egress.modes) where the policy must hold",
				"policy", sc.Packages.Policy.Mode, "modes", strings.Join(reach, ", "))
		}
	}
	// As brig check says: a service on a 2 MiB state directory started
	// without a word, and every install failed (the recovery probe).
	if sc.Packages.Enabled {
		if ch := cacheSpaceCheck(sc); ch.Warn {
			log.Warn("the package cache's disk has less free than installs keep: installs fail until there is room", "check", ch.Detail, "hint", ch.Hint)
		}
	}
}

// peersWithoutSocket are the allowed peers other than root that can't
// connect to the socket (the docs audit's uid, allowed without a socket
// group, got EACCES): a gid that is not the socket's group (whose members
// connect only if they are in it too), and a uid whose account is not in that
// group. A uid without an account is only named when there is no socket
// group at all, since its groups can't be read. The accounts are read
// through the host's name service, which may hang (a directory server): past
// peerLookupWait the check is left out, so that the start is not held.
func peersWithoutSocket(sc serveConfig) []string {
	done := make(chan []string, 1)
	go func() { done <- peersWithoutSocketNow(sc) }()
	select {
	case peers := <-done:
		return peers
	case <-time.After(peerLookupWait):
		return nil
	}
}

// peerLookupWait bounds peersWithoutSocket's lookups.
const peerLookupWait = 2 * time.Second

func peersWithoutSocketNow(sc serveConfig) []string {
	gid := 0
	if sc.SocketGroup != "" {
		var err error
		if gid, err = supervisor.SocketGroupID(sc.SocketGroup); err != nil {
			return nil // refused by checkValues
		}
	}
	var peers []string
	for _, uid := range sc.AllowUIDs {
		if uid == 0 {
			continue
		}
		u, err := user.LookupId(strconv.Itoa(uid))
		if err != nil {
			if sc.SocketGroup == "" {
				peers = append(peers, "uid "+strconv.Itoa(uid))
			}
			continue
		}
		if groups, err := u.GroupIds(); err == nil && !slices.Contains(append(groups, u.Gid), strconv.Itoa(gid)) {
			peers = append(peers, fmt.Sprintf("uid %d (%s)", uid, u.Username))
		}
	}
	for _, g := range sc.AllowGIDs {
		if g != gid {
			peers = append(peers, "gid "+strconv.Itoa(g))
		}
	}
	return peers
}

// warnHostLimits warns where runs at once can take a host-wide pool whole
// (the red team of 2026-12-05 counted them): the pids of every process of
// the host (kernel.pid_max, where each run may hold pids of them), and the
// ptys every devpts instance but the host's shares (kernel.pty.max less
// kernel.pty.reserve, where each run may hold 64). kernel is the folder of
// those settings. Neither is checked where it can't be read.
func warnHostLimits(concurrent int, pids int64, kernel string, log *slog.Logger) {
	read := func(name string) int64 {
		b, err := os.ReadFile(filepath.Join(kernel, name))
		if err != nil {
			return 0
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	if max := read("pid_max"); max > 0 && int64(concurrent)*pids > max/2 {
		log.Warn("the runs at once may hold half the host's pids or more: raise kernel.pid_max, or lower sandbox.pids or max_concurrent",
			"max_concurrent", concurrent, "pids", pids, "pid_max", max)
	}
	if shared := read("pty/max") - read("pty/reserve"); shared > 0 && int64(concurrent)*pid1.DevptsMax > shared {
		log.Warn("the runs at once may take every pty the host's containers share: raise kernel.pty.max, or lower max_concurrent",
			"max_concurrent", concurrent, "ptys_a_run", pid1.DevptsMax, "ptys_shared", shared)
	}
}

// override sets *dst to the flag's value when the flag was given.
func override[T any](c *cli.Context, name string, dst *T, get func(string) T) {
	if c.IsSet(name) {
		*dst = get(name)
	}
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	// The four words alone: slog's own parser also takes "info+2" or
	// "WARN", which README does not (the operator probe of 2026-12-06).
	lv, ok := logLevels[level]
	if !ok {
		return nil, fmt.Errorf("log level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: use json or text", format)
}

// logLevels are the values of log_level and --log-level.
var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// maxSocketPath is the longest path a Unix socket's address holds: sun_path's
// 108 bytes, less its terminating NUL.
const maxSocketPath = 107

// serviceProcs is the service's GOMAXPROCS, unless the environment sets
// one: a quarter of the host's CPUs, at least 2. With one P, the service's
// goroutines (HTTP, the journal, the pool's fillers and their many system
// calls, each of which holds the P until the runtime hands it over) waited
// for it: a Go execution trace of the service at C=2 (runtime/trace from a
// temporary build, go tool trace -pprof=sched) showed 8.5 s of
// scheduling delay in 3 s, and warm Python's throughput did not grow from
// C=1 to C=2. Two against one (brig bench --rounds 5, each service in turn,
// three rounds, on 2026-12-03): 93.1, 97.5 and 98.1 % of bare at C=2 against
// 79.3, 74.0 and 79.0 %, back to back at C=1 172.7 and 179.9 % against
// 136.4 and 145.3 % (p50 53 and 48 % of bare against 77 and 67 %), for
// 0.2 to 1.2 ms more of the service's CPU a run. Four gave what two did
// (92.9 and 94.4 % against 92.8 and 95.7 %). (Earlier, on a slower day and
// without the rounds, one P had cost less CPU, 7.4 and 7.0 ms a run against
// 9.0 and 9.2, for a throughput that looked unchanged.)
func serviceProcs(env string, cpus int) (int, bool) {
	if env != "" {
		return 0, false
	}
	return max(2, cpus/4), true
}

// sysmonSlack is the timer slack of the service's Go runtime monitor
// (internal/sysmon). One service, the monitor's slack switched between this
// and the kernel's 50 us every 4 s during brig bench -c 2 -d 38s
// (bench/measure/sysmon_slack.sh, five pairs): the service's CPU was 5.81 to
// 6.08 ms a run against 6.31 to 7.47 (means 5.92 and 6.86), the whole
// machine's 19.4 against 20.7 ms (means), the runs 349 against 335 a
// window, the monitor's wakes 939 against 4,293 a second.
const sysmonSlack = time.Millisecond

// serveAction is flags and config file → configs → library calls: the checks
// that need no privilege first, then the host's, the cgroup parent's lock, the
// sandboxes, the package cache and the service, served until a signal.
func serveAction(c *cli.Context) error {
	// The signals are caught before anything else: a SIGTERM while the
	// service starts (a supervisor that stops it at once, a rollout) would
	// otherwise kill it half-way, its cgroup parent, lock and socket left.
	// One that comes during the start is acted on once the start is over.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	// SIGHUP, which would kill the process and every run with it, is the
	// signal an operator sends for a reload: brig has none, and says so.
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	sc, err := serveConfigFrom(c)
	if err != nil {
		return err
	}
	log, err := newLogger(os.Stderr, sc.LogFormat, sc.LogLevel)
	if err != nil {
		return err
	}
	go func() {
		for range hups {
			log.Warn("SIGHUP ignored: brig serve reads its configuration only at its start; restart it (SIGTERM, then start it again) to change it")
		}
	}()
	if procs, set := serviceProcs(os.Getenv("GOMAXPROCS"), runtime.NumCPU()); set {
		runtime.GOMAXPROCS(procs)
		log.Debug("the service's Go code runs on a quarter of the host's CPUs, at least 2 (GOMAXPROCS in its environment overrides it)", "gomaxprocs", procs, "cpus", runtime.NumCPU())
	}
	if tid, err := sysmon.SetSlack(sysmonSlack); err != nil {
		log.Info("the Go runtime's system monitor keeps its timer slack, which costs the service CPU under load", "err", err)
	} else {
		log.Debug("the Go runtime's system monitor wakes with a timer slack", "thread", tid, "slack", sysmonSlack)
	}
	// The service's config is checked, and the registries read, before
	// anything privileged: a typo costs no cgroup sweep.
	cfg, regs, err := sc.serviceConfig(c.Context, log)
	if err != nil {
		return err
	}
	lc, err := sc.launcherConfig()
	if err != nil {
		return err
	}
	if err := jail.FirstFailure(jail.CheckHost()); err != nil {
		return err
	}
	// Before anything is made: Listen checks again, at the end of the start.
	if err := supervisor.CheckSocket(sc.Socket); err != nil {
		return err
	}
	if n, err := jail.FileMax(); err == nil && n < jail.FileMaxWanted {
		ch := jail.CheckFileMax()
		log.Warn("the host's open-file limit is within one run's reach", "check", ch.Detail, "hint", ch.Hint)
	}
	if ch := jail.CheckTCPMem(); ch.Warn {
		log.Warn("the host's TCP memory pressure threshold is within one run's reach", "check", ch.Detail, "hint", ch.Hint)
	}
	if ch := jail.CheckOOMFloor(); ch.Warn {
		log.Warn("a run can lower the oom_score_adj brig gives it", "check", ch.Detail, "hint", ch.Hint)
	}
	// A run must share no id with anything else on the host, as brig check
	// says: no runs are served on a range that an account, a subordinate
	// range or a file a run sees already uses. Processes of the range are
	// only logged: a brig that just stopped (a restart) leaves runs that are
	// still dying, whose ids no lock says are brig's any more. This comes
	// before the launcher claims its first block of the range, whose ids the
	// check would take for another brig process's.
	stateLock, err := supervisor.LockStateDir(lc.StateDir)
	if err != nil {
		return err
	}
	defer stateLock.Close() // last: after the sandboxes' teardown, below
	cfg.StateLock = stateLock
	roots, err := newProvider(lc)
	if err != nil {
		return err
	}
	if ch := jail.CheckViewLayers(lc.StateDir, bindSources(roots)); ch.Warn {
		log.Warn("the host folders' read-only views need overlayfs's xino here", "check", ch.Detail, "hint", ch.Hint)
	}
	if ch, ok := usrViewCheck(roots); ok && ch.Warn {
		log.Warn("the parts of /usr cost each sandbox an overlay each", "check", ch.Detail, "hint", ch.Hint)
	}
	var static []jail.Check
	for _, ch := range jail.CheckIDRange(lc.IDs, "", idRangeRoots(lc, roots), packages.StagingDir(packageCacheDir(sc))) {
		if ch.Name == jail.IDRangeProcesses && !ch.OK {
			log.Warn("processes run as ids of the runs' range; if they are not a stopped brig's runs still exiting, choose another range", "detail", ch.Detail, "hint", "brig check")
			continue
		}
		static = append(static, ch)
	}
	if err := jail.FirstFailure(static); err != nil {
		return err
	}
	// The service owns its cgroup parent: whatever a previous instance left
	// there (after a crash) is removed before anything runs.
	lock, err := cgroup.LockParent("", lc.CgroupParent)
	if err != nil {
		return err
	}
	defer lock.Close() // also keeps the lock from the GC
	sb, err := newSandbox(lc, roots, true, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := sb.Close(); err != nil {
			log.Warn("closing the sandboxes", "err", err)
		}
	}()
	sweepEarlierParents(lc.StateDir, lc.CgroupParent, log)
	host, err := sb.hostInfo()
	if err != nil {
		return err
	}
	if sc.Packages.Enabled {
		cache, err := openPackageCache(sc, regs, cfg, sb.Launcher, log)
		if err != nil {
			return err
		}
		defer cache.Close()
		cfg.Packages.Cache = cache
		cfg.Packages.Options = installerOptions(sc)
		cfg.Packages.InstallMemoryMiB = sc.Packages.InstallMemoryMiB
		cfg.Packages.InstallTimeout = time.Duration(sc.Packages.InstallTimeout)
		cfg.Packages.Languages = packageLanguages(regs)
	}
	svc, err := supervisor.New(cfg, host, sb.Launcher)
	if err != nil {
		return err
	}
	select {
	case sig := <-sigs:
		// Asked to stop while it started: it never serves.
		log.Info("shutting down before serving: the signal came during the start", "signal", sig.String())
		return svc.Shutdown(context.Background())
	default:
	}
	ln, err := supervisor.Listen(sc.Socket, sc.SocketGroup)
	if err != nil {
		svc.Shutdown(context.Background())
		return err
	}
	warnConfig(sc, log)
	warnHostLimits(cfg.Concurrent(), sc.Sandbox.Pids, "/proc/sys/kernel", log)
	log.Info("serving", "version", version(), "socket", sc.Socket, "state_dir", sc.StateDir, "cgroup_mode", host.CgroupMode,
		"rootfs", host.Rootfs, "pool", sc.Sandbox.Pool, "network_modes", cfg.NetworkModes, "config", c.String("config"))
	return serveUntilSignal(svc, ln, sc.Socket, sigs, time.Duration(sc.Grace), log)
}

// parentRecordName is the state directory's file that names the cgroup
// parents of its services, a line each: the last one's that started, then
// every earlier one whose leftovers a start could not remove because another
// process held that parent then.
const parentRecordName = "cgroup-parent"

// sweepEarlierParents removes what a crash of a service of stateDir left in the
// cgroup parents it had, when this one, which owns parent, has another
// (sweepEarlierParent), and then records parent, and the earlier parents to
// try again at the next start. The record is written only once the start has
// got this far, so a refused start never names a parent. Nothing here stops
// the start: what is left is logged.
func sweepEarlierParents(stateDir, parent string, log *slog.Logger) {
	record := filepath.Join(stateDir, parentRecordName)
	b, err := os.ReadFile(record)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("reading the cgroup parents an earlier service recorded", "err", err)
	}
	keep := []string{parent}
	for _, earlier := range strings.Split(string(b), "\n") {
		if earlier == "" || slices.Contains(keep, earlier) || strings.HasPrefix(parent, earlier+"/") || strings.HasPrefix(earlier, parent+"/") {
			continue // the same, or parent's lock and sweep are its
		}
		if held := sweepEarlierParent(earlier, log); held {
			keep = append(keep, earlier)
		}
	}
	tmp := record + ".tmp"
	err = os.WriteFile(tmp, []byte(strings.Join(keep, "\n")+"\n"), 0o600)
	if err == nil {
		err = os.Rename(tmp, record)
	}
	if err != nil {
		log.Warn("recording the cgroup parent in the state directory; a later start with another parent won't remove what this one leaves in it", "err", err)
	}
}

// sweepEarlierParent removes the run groups of brig processes that are gone
// from the cgroup parent earlier, and then earlier where nothing else is in
// it. It looks first, reading alone: a parent that holds no such group is left
// as it is, since its name may be another program's now. It leaves earlier
// alone too where another process holds its lock (a service, a brig run
// --local), which it reports as held, to be tried again, and where it holds
// anything brig did not make, before New writes a file of it.
func sweepEarlierParent(earlier string, log *slog.Logger) (held bool) {
	dirs, err := cgroup.ParentDirs(cgroup.Config{Parent: earlier})
	if err != nil {
		return false // a name New refuses, or no cgroups
	}
	left := false
	for _, d := range dirs {
		ents, _ := os.ReadDir(d) // missing in this hierarchy: nothing left there
		left = left || slices.ContainsFunc(ents, func(e fs.DirEntry) bool { return e.IsDir() && jail.LeftoverOfDeadProcess(e.Name()) })
	}
	if !left {
		return false
	}
	lock, err := cgroup.LockParent("", earlier)
	if errors.Is(err, cgroup.ErrParentLocked) {
		log.Info("leaving what a crash left in this state directory's earlier cgroup parent while another process uses it; the next start tries again", "earlier_parent", earlier, "err", err)
		return true
	}
	if err != nil {
		log.Warn("leaving what a crash left in this state directory's earlier cgroup parent; the next start tries again", "earlier_parent", earlier, "err", err)
		return true
	}
	defer lock.Close()
	leave := func(why string, err error) {
		log.Warn("leaving what a crash left in this state directory's earlier cgroup parent: "+why, "earlier_parent", earlier, "err", err)
	}
	if err := jail.ForeignGroups(earlier); err != nil {
		leave("it holds what brig did not make", err)
		return false
	}
	cg, err := cgroup.New(cgroup.Config{Parent: earlier, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		leave("opening it", err)
		return false
	}
	n, err := cg.SweepIf(jail.LeftoverOfDeadProcess)
	if err == nil {
		err = cg.RemoveParentIfEmpty()
	}
	if err != nil {
		leave("removing its run groups", err)
		return false
	}
	log.Info("removed the run groups a crash left in this state directory's earlier cgroup parent", "earlier_parent", earlier, "count", n)
	return false
}

// serviceConfig is the supervisor's config, checked, with the registry hosts
// and the package policy: everything that needs no privilege. regs are the
// registries read, for the package installer.
func (sc serveConfig) serviceConfig(ctx context.Context, log *slog.Logger) (supervisor.Config, map[string]packages.Registry, error) {
	cfg := sc.supervisorConfig(log)
	// The file's keys first: the supervisor's own check of the same values
	// would name them again, with its own zero's meaning.
	if err := sc.checkValues(); err != nil {
		return cfg, nil, fmt.Errorf("invalid configuration: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, nil, fmt.Errorf("invalid configuration: %w", err)
	}
	regs, err := registries(ctx, sc, packages.Managers{}, log)
	if err != nil {
		return cfg, nil, err
	}
	cfg.RegistryHosts = map[string][]string{}
	cfg.RegistryPorts = map[string][]int{}
	cfg.RegistryIndexes = map[string][]string{}
	for lang, r := range regs {
		cfg.RegistryHosts[lang] = r.Hosts
		cfg.RegistryPorts[lang] = r.Ports
		cfg.RegistryIndexes[lang] = r.Indexes
	}
	cfg.Packages.Policy = packages.PolicyConfig{Mode: sc.Packages.Policy.Mode, Allow: sc.Packages.Policy.Allow,
		Deny: sc.Packages.Policy.Deny, Reviewed: sc.Packages.Policy.Reviewed}
	if err := cfg.Packages.Policy.Validate(); err != nil {
		return cfg, nil, fmt.Errorf("invalid configuration: packages.policy: %w", err)
	}
	return cfg, regs, nil
}

// launcherConfig maps the config file's [sandbox] section to the sandboxes'
// config.
func (sc serveConfig) launcherConfig() (launcherConfig, error) {
	lc := launcherConfig{
		StateDir:     sc.StateDir,
		CgroupParent: sc.Sandbox.CgroupParent,
		Built:        map[rootfs.Language]string{},
		CPUs:         sc.Sandbox.CPUs,
		Pids:         sc.Sandbox.Pids,
		Pool:         sc.Sandbox.Pool,
		IDs:          jail.IDRange{First: sc.Sandbox.IDFirst, Count: sc.Sandbox.IDCount},
		Warm:         map[rootfs.Language]bool{},
		Copies:       sc.Sandbox.InterpreterCopies,
	}
	for i, w := range sc.Sandbox.Warm {
		switch {
		case w == "none" && len(sc.Sandbox.Warm) > 1:
			return lc, fmt.Errorf("sandbox.warm %q: \"none\" turns warm starts off and stands alone (use [\"none\"], or list the languages)", sc.Sandbox.Warm)
		case w == "none":
			continue
		case slices.Contains(sc.Sandbox.Warm[:i], w):
			return lc, fmt.Errorf("sandbox.warm %q: %q is listed twice (list each language once)", sc.Sandbox.Warm, w)
		}
		lang, err := rootfs.ParseLanguage(w)
		if err != nil {
			return lc, fmt.Errorf("sandbox.warm %q: not a language brig runs: use python, javascript or none", w)
		}
		lc.Warm[lang] = true
	}
	for k, v := range sc.Sandbox.Rootfs {
		lang, err := rootfs.ParseLanguage(k)
		if err != nil {
			return lc, fmt.Errorf("sandbox.rootfs %q: %w", k, err)
		}
		lc.Built[lang] = v
	}
	return lc, lc.check()
}

// packageLanguages are the languages whose registry has an index to install from.
func packageLanguages(regs map[string]packages.Registry) []string {
	langs := []string{}
	for _, lang := range api.Languages {
		if len(regs[lang.String()].Indexes) > 0 {
			langs = append(langs, lang.String())
		}
	}
	return langs
}

// serveUntilSignal serves svc on ln until SIGTERM or SIGINT comes on sigs,
// then shuts it down within grace; a second signal cuts the grace short.
// It tells systemd (notify.go) that it is ready once it serves, pings a
// watchdog the unit asks for while the socket answers, and says when it
// stops.
func serveUntilSignal(svc *supervisor.Service, ln net.Listener, socket string, sigs chan os.Signal, grace time.Duration, log *slog.Logger) error {
	served := make(chan error, 1)
	go func() { served <- svc.Serve(ln) }()
	// The listener is bound and listening: a connection from now on is
	// served, so the service is ready.
	notifySystemd(log, daemon.SdNotifyReady)
	pings, stopPings := context.WithCancel(context.Background())
	defer stopPings()
	go watchdog(pings, socket, svc.Failing, log)
	// sigs is never stopped nor ignored: a signal during the sandboxes' cleanup that
	// follows (serveAction's defers) must not kill the process half-way and
	// leave its cgroups (SIGKILL still does). Once sigs is full the runtime
	// drops what comes. Not signal.Ignore: the runtime stops handling the
	// signal before it installs SIG_IGN, and a signal in between takes the
	// default action (TestServeStopsCleanlyUnderRepeatedSignals, once in CI).
	select {
	case sig := <-sigs:
		notifySystemd(log, daemon.SdNotifyStopping)
		log.Info("shutting down", "signal", sig.String(), "grace", max(grace, 0).String())
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-sigs:
			if ctx.Err() == nil { // not a signal that came with the first, once the stop was done
				log.Warn("second signal: stopping the runs now")
				cancel()
			}
		case <-ctx.Done():
		}
	}()
	err := svc.Shutdown(ctx)
	// The watch ends before the stop's last lines: a second signal that came
	// with the first (GNU timeout signals the process and its group) had been
	// logged after "stopped" (the operator probe of 2026-12-06).
	cancel()
	<-watched
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		// A stop that could not finish its work (answered results not
		// written to the journal) exits 1, apart from the 2 of a service
		// that could not start (README).
		log.Error("stopped, but not cleanly", "err", err)
		fmt.Fprintln(os.Stderr, "brig:", err)
		return exitError(1)
	}
	log.Info("stopped")
	return nil
}
