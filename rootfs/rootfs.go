// Package rootfs provides the read-only root filesystems that runs see: which
// directory becomes the overlay's lower layer, which host folders are mounted read-only
// on top of it, and where the language's interpreter is.
//
// Two providers exist. Host (the embedded default) mounts the parts of the host's /usr
// the interpreters need (and, on hosts without merged /usr, /bin, /lib, /lib64, /sbin)
// over a small skeleton whose /etc is made up by brig: never the host's /etc, /root,
// /home, /var, /run, /tmp or /usr/local. Built is a minimal Debian made with debootstrap by `brig rootfs
// build`, with a manifest of interpreter versions.
//
// Typical use:
//
//	p, err := rootfs.NewHost(stateDir, rootfs.HostConfig{})
//	root, err := p.Root(rootfs.Python)
//	// root.Lower, root.Binds and root.Interpreter go into the jail's spec.
//
// A built rootfs is made once (as root, with the host's Debian mirror) and then
// opened by the service:
//
//	m, err := rootfs.Build(ctx, rootfs.BuildOptions{Language: rootfs.Python, Dir: dir}, os.Stderr)
//	p, err := rootfs.OpenBuilt(map[rootfs.Language]string{rootfs.Python: dir})
//
// EnsureBuilt is Build that keeps a valid existing build; tests get a shared one from
// package rootfstest.
//
// Every lower layer either provider gives is root's alone: CheckLower fails on any
// entry a run's id (or any host account) could write, own or use to gain a privilege.
package rootfs

import (
	"strings"

	"github.com/brig-sandbox/brig/api"
)

// Language is a language brig runs: api.Language's values, with what a root
// needs to know of each (ScriptName).
type Language string

// The languages of API.md, as the api package owns them.
const (
	Python     = Language(api.Python)
	JavaScript = Language(api.JavaScript)
)

// Languages lists every language, in the order brig reports them (api.Languages).
var Languages = func() []Language {
	out := make([]Language, len(api.Languages))
	for i, l := range api.Languages {
		out[i] = Language(l)
	}
	return out
}()

// ErrUnknownLanguage is wrapped by ParseLanguage's error for a name brig does not
// run; it is api.ErrUnknown.
var ErrUnknownLanguage = api.ErrUnknown

// ParseLanguage accepts exactly the languages of api.Languages.
func ParseLanguage(s string) (Language, error) {
	l, err := api.ParseLanguage(s)
	return Language(l), err
}

func (l Language) String() string { return string(l) }

// ScriptName is the file the code is written to, under /sandbox.
func (l Language) ScriptName() string {
	if l == JavaScript {
		return "main.js"
	}
	return "main.py"
}

// Bind is a host directory mounted read-only at Target inside the root.
type Bind struct {
	Source string // absolute path on the host
	Target string // absolute path inside the root
}

// View is one read-only overlay that shows the parts of a host folder (Source)
// that Binds name, and nothing else of it, at Target: its top layer is the
// lower layer's folder at Target, whose subfolder ViewDir holds a folder for
// each part, redirected to the host's (trusted.overlay.redirect, followed with
// overlayfs's redirect_dir=follow), a part's links as links, and every other
// folder opaque (trusted.overlay.opaque). A folder under ViewDir reaches the
// host folder only by a redirect: the lookups of ViewDir's own entries stay
// in the top layer, since the host folder has no ViewDir (and, were it to
// have one, ViewDir is opaque). The jail mounts that overlay and binds its
// ViewDir at Target, so a sandbox makes one overlay for all of /usr where it
// made one for each part; the parts are still seen through an overlay, whose
// inodes are the sandbox's own, not the host's.
type View struct {
	Source string // the host folder ("/usr")
	Target string // where it shows in the root, the same path
}

// ViewDir is the subfolder of a View's top layer that shows at its Target.
// (The layer's own root can't hide the host folder's other entries: overlayfs
// takes no opaque mark on a layer's root.)
const ViewDir = "parts"

// Root is what the jail mounts for one language.
type Root struct {
	Language Language
	// Lower is the directory used as the overlay's read-only lower layer. It holds
	// every mount point the jail uses (/proc, /dev, /tmp, /sandbox, and Binds'
	// targets), so that no run has to create one.
	Lower string
	// Binds are mounted read-only, nosuid and nodev on top of the overlay, in order,
	// but for those under View's Target, which View shows.
	Binds []Bind
	// View, when set, shows the Binds under its Target as one read-only mount
	// instead of a mount each.
	View *View
	// Interpreter is the interpreter's absolute path inside the root.
	Interpreter string
	// Args come between the interpreter and the script path.
	Args []string
	// Version is the interpreter's version, such as "3.11.2" or "20.20.2".
	Version string
}

// Argv is the full command line that runs script (a path inside the root).
func (r *Root) Argv(script string) []string {
	argv := append([]string{r.Interpreter}, r.Args...)
	return append(argv, script)
}

// Provider gives the Root of each language.
type Provider interface {
	// Name is "host" or "built", for `brig check` and /v1/health.
	Name() string
	// Root returns the root of lang, or an error saying what is missing.
	Root(lang Language) (*Root, error)
}

// interpreterArgs are the arguments brig always passes. Python's -u makes the output
// reach the supervisor as it is printed, as the API's stream promises; it is an
// argument rather than PYTHONUNBUFFERED so that a request's env can't undo it.
func interpreterArgs(lang Language) []string {
	if lang == Python {
		return []string{"-u"}
	}
	return nil
}

// parseVersion takes the version out of `python3 --version` ("Python 3.11.2") or
// `node --version` ("v20.20.2").
func parseVersion(out string) string {
	out = strings.TrimSpace(out)
	if i := strings.LastIndexByte(out, ' '); i >= 0 {
		out = out[i+1:]
	}
	return strings.TrimPrefix(out, "v")
}
