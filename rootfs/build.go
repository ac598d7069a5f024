package rootfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Build defaults.
const (
	// buildVariant is debootstrap's smallest variant: essential packages and apt.
	buildVariant = "minbase"
	// debootstrapWaitDelay bounds how long Build waits for debootstrap's output to
	// close once it has exited or been killed.
	debootstrapWaitDelay = 10 * time.Second
	// versionTimeout bounds `interpreter --version` inside the new tree.
	versionTimeout = 30 * time.Second
	// tailLines is how many of debootstrap's last lines a failure quotes.
	tailLines = 15
	// nobodyID runs the interpreter's --version in the tree: nothing from the new
	// tree runs as root on the host but debootstrap's own package scripts.
	nobodyID = 65534
)

// buildPackages are what each language's rootfs is made with, besides the minbase
// essentials. ca-certificates brings the tree's own certificate bundle, so TLS works
// without the host's /etc.
var buildPackages = map[Language][]string{
	Python:     {"python3", "ca-certificates"},
	JavaScript: {"nodejs", "ca-certificates"},
}

// buildInterpreters are the interpreters' paths inside a built tree (Debian's).
var buildInterpreters = map[Language]string{
	Python:     DefaultPythonPath,
	JavaScript: DefaultNodePath,
}

// BuildOptions configures Build and EnsureBuilt.
type BuildOptions struct {
	// Language is the rootfs's one language; the other's interpreter is kept out.
	Language Language
	// Dir is where the rootfs is published, replacing an older build. The build is
	// made in a temporary directory beside it (same file system) and renamed onto it.
	Dir string
	// Mirror is the Debian mirror's URL; zero means the host apt's mirror for Suite.
	Mirror string
	// Suite is the Debian release's code name; zero means the host's
	// (VERSION_CODENAME in /etc/os-release).
	Suite string
	// Keyring is the keyring debootstrap checks the release's signature with; zero
	// means debootstrap's default (Debian's archive keyring). The signature is
	// always checked.
	Keyring string
}

// validate runs the checks that need no privilege and no network.
func (o *BuildOptions) validate() error {
	if _, err := ParseLanguage(string(o.Language)); err != nil {
		return err
	}
	if o.Dir == "" {
		return errors.New("no rootfs directory given")
	}
	if !filepath.IsAbs(o.Dir) {
		abs, err := filepath.Abs(o.Dir)
		if err != nil {
			return fmt.Errorf("rootfs directory %q: %w", o.Dir, err)
		}
		o.Dir = abs
	}
	o.Dir = filepath.Clean(o.Dir)
	if o.Dir == "/" {
		return errors.New("the rootfs directory can't be /")
	}
	// The name makes the pattern that finds a killed build's leftovers; a glob
	// character in it could match another directory's builds.
	if strings.ContainsAny(filepath.Base(o.Dir), `*?[\`) {
		return fmt.Errorf("the rootfs directory's name %q has a glob character", filepath.Base(o.Dir))
	}
	if o.Mirror != "" {
		if err := validMirror(o.Mirror); err != nil {
			return err
		}
	}
	if o.Suite != "" && !suiteRE.MatchString(o.Suite) {
		return fmt.Errorf("suite %q is not a Debian release name", o.Suite)
	}
	if o.Keyring != "" {
		if _, err := os.Stat(o.Keyring); err != nil {
			return fmt.Errorf("keyring: %w", err)
		}
	}
	return nil
}

var suiteRE = regexp.MustCompile(`^[a-z][a-z0-9.-]*$`)

// resolveSource fills Suite and Mirror from the host where they are zero.
func (o *BuildOptions) resolveSource(osRelease, etcApt string) error {
	if o.Suite == "" {
		s, err := suiteFromOSRelease(osRelease)
		if err != nil {
			return err
		}
		if !suiteRE.MatchString(s) {
			return fmt.Errorf("%q names suite %q, which is not a Debian release name (set the suite explicitly)", osRelease, s)
		}
		o.Suite = s
	}
	if o.Mirror == "" {
		m, err := mirrorFromApt(o.Suite, hostAptFiles(etcApt))
		if err != nil {
			return err
		}
		o.Mirror = m
	}
	return nil
}

// debootstrapArgs is debootstrap's command line for o (resolved) into target.
func debootstrapArgs(o BuildOptions, target string) []string {
	args := []string{
		"--variant=" + buildVariant,
		"--components=main",
		"--include=" + strings.Join(buildPackages[o.Language], ","),
		// Fail rather than install from an unsigned or unverifiable release.
		"--force-check-gpg",
	}
	if o.Keyring != "" {
		args = append(args, "--keyring="+o.Keyring)
	}
	return append(args, o.Suite, target, o.Mirror)
}

// Build makes a minimal Debian rootfs for opts.Language with debootstrap and
// publishes it at opts.Dir, replacing any earlier build. debootstrap's progress lines
// are written to progress (which may be nil) as they come. It needs root and the
// mirror's network, and takes a minute or more. On failure opts.Dir is unchanged and
// nothing of the attempt is left.
func Build(ctx context.Context, opts BuildOptions, progress io.Writer) (*Manifest, error) {
	unlock, _, err := startBuild(ctx, opts, progress)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return buildLocked(ctx, opts, progress)
}

// startBuild validates opts and takes the build lock of opts.Dir; the caller
// runs unlock when done.
func startBuild(ctx context.Context, opts BuildOptions, progress io.Writer) (unlock func(), say func(string), err error) {
	if err := opts.validate(); err != nil {
		return nil, nil, fmt.Errorf("building the %s rootfs: %w", opts.Language, err)
	}
	say = sayer(progress)
	unlock, err = lockBuild(ctx, opts.Dir+".lock", say)
	if err != nil {
		return nil, nil, err
	}
	return unlock, say, nil
}

// EnsureBuilt returns the manifest of the build at opts.Dir when it is a valid
// opts.Language rootfs (of opts.Suite, when set), and otherwise builds it as Build
// does. Concurrent callers, in this process or others, wait for one build.
func EnsureBuilt(ctx context.Context, opts BuildOptions, progress io.Writer) (*Manifest, error) {
	unlock, say, err := startBuild(ctx, opts, progress)
	if err != nil {
		return nil, err
	}
	defer unlock()
	m, err := ReadManifest(opts.Dir)
	if err == nil {
		err = m.check(opts.Dir, opts.Language)
	}
	if err == nil && opts.Suite != "" && m.Suite != opts.Suite {
		err = fmt.Errorf("it is of suite %q, not %q", m.Suite, opts.Suite)
	}
	if err == nil {
		// A build by an older brig may have a /sandbox owned by the sandbox id, or
		// Debian's group-writable and setuid files.
		err = CheckLower(opts.Dir)
	}
	if err == nil {
		return m, nil
	}
	if !errors.Is(err, ErrNotBuilt) {
		say(fmt.Sprintf("rebuilding %s: %v", opts.Dir, err))
	}
	return buildLocked(ctx, opts, progress)
}

// buildLocked is Build once the build lock is held.
func buildLocked(ctx context.Context, opts BuildOptions, progress io.Writer) (_ *Manifest, retErr error) {
	if progress == nil {
		progress = io.Discard
	}
	say := sayer(progress)
	defer func() {
		if retErr != nil {
			retErr = fmt.Errorf("building the %s rootfs at %q: %w", opts.Language, opts.Dir, retErr)
		}
	}()

	// 1. Checks before anything privileged or networked.
	if os.Geteuid() != 0 {
		return nil, errors.New("debootstrap needs root (Hint: run `sudo brig rootfs build`)")
	}
	debootstrap, err := findDebootstrap()
	if err != nil {
		return nil, err
	}
	if err := opts.resolveSource(hostOSRelease, hostAptDir); err != nil {
		return nil, err
	}
	if err := checkReplaceable(opts.Dir, opts.Language); err != nil {
		return nil, err
	}

	// 2. A temporary tree beside Dir, so that publishing is one rename on one file
	// system. Leftovers of builds killed before their cleanup ran go first; the
	// lock says no other build of Dir is running.
	parent, base := filepath.Split(opts.Dir)
	if err := mkdirRoot(parent); err != nil {
		return nil, err
	}
	if err := checkAboveDir(opts.Dir); err != nil {
		return nil, err
	}
	tmpPattern := "." + base + ".build-"
	if old, _ := filepath.Glob(filepath.Join(parent, tmpPattern+"*")); len(old) > 0 {
		for _, o := range old {
			say("removing the leftover of an earlier build: " + o)
			if err := os.RemoveAll(o); err != nil {
				return nil, fmt.Errorf("removing leftover build %q: %w", o, err)
			}
		}
	}
	tmp, err := os.MkdirTemp(parent, tmpPattern)
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			if err := os.RemoveAll(tmp); err != nil {
				retErr = fmt.Errorf("%w (and removing %q: %v)", retErr, tmp, err)
			}
		}
	}()
	// MkdirTemp made it 0700; it becomes the root folder of every run.
	if err := setOwnerMode(tmp, dirMode); err != nil {
		return nil, err
	}

	// 3. debootstrap.
	start := time.Now()
	say(fmt.Sprintf("building the %s rootfs: debootstrap %s from %s into %s", opts.Language, opts.Suite, opts.Mirror, tmp))
	if err := runDebootstrap(ctx, debootstrap, debootstrapArgs(opts, tmp), progress); err != nil {
		return nil, err
	}
	say(fmt.Sprintf("debootstrap finished in %s", time.Since(start).Round(time.Second)))

	// 4. One language per tree. This reads dpkg's status, so it runs before the
	// pruning; the interpreter must be there too.
	if err := checkExclusive(tmp, opts.Language); err != nil {
		return nil, err
	}
	interp := buildInterpreters[opts.Language]
	if _, err := resolveIn(tmp, interp); err != nil {
		return nil, fmt.Errorf("the built tree has no %s: %w", interp, err)
	}

	// 5. Remove what a sandbox must not see or need, then brig's /etc and mount
	// points. The directories brig writes into are checked first to be real
	// directories, so that no write follows a link out of the tree.
	if err := prune(tmp); err != nil {
		return nil, fmt.Errorf("pruning the built tree: %w", err)
	}
	if err := writeBuiltEtc(tmp); err != nil {
		return nil, fmt.Errorf("writing /etc: %w", err)
	}
	if err := writeLayout(tmp); err != nil {
		return nil, fmt.Errorf("creating mount points: %w", err)
	}
	if err := noPrivateKeys(tmp); err != nil {
		return nil, err
	}
	// Nothing in the tree may be a run's to change, nor setuid; the check after
	// the hardening fails the build on anything it missed.
	if err := hardenTree(tmp); err != nil {
		return nil, err
	}
	if err := CheckLower(tmp); err != nil {
		return nil, err
	}

	// 6. The interpreter reports its own version, run in the tree.
	version, err := chrootVersion(ctx, tmp, interp)
	if err != nil {
		return nil, err
	}
	m := &Manifest{
		FormatVersion: ManifestFormat,
		Language:      opts.Language,
		Interpreter:   interp,
		Version:       version,
		Suite:         opts.Suite,
		Mirror:        opts.Mirror,
		Variant:       buildVariant,
		Packages:      buildPackages[opts.Language],
		Created:       time.Now().UTC().Truncate(time.Second),
	}
	if err := writeManifest(tmp, m); err != nil {
		return nil, fmt.Errorf("writing the manifest: %w", err)
	}
	// What is published is read back exactly as OpenBuilt will read it.
	got, err := ReadManifest(tmp)
	if err == nil {
		err = got.check(tmp, opts.Language)
	}
	if err != nil {
		return nil, fmt.Errorf("checking the new build: %w", err)
	}

	// 7. Publish.
	if err := publish(tmp, opts.Dir); err != nil {
		return nil, err
	}
	say(fmt.Sprintf("built the %s rootfs (%s %s) at %s in %s", opts.Language, interp, version, opts.Dir, time.Since(start).Round(time.Second)))
	return got, nil
}

// publish puts the tree at tmp in dst's place. When dst exists the two are swapped
// with one renameat2(RENAME_EXCHANGE), so that dst always names a whole build, and the
// old one (now at tmp) is removed. Runs already using the old tree keep its inodes
// until they end.
func publish(tmp, dst string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dst, unix.RENAME_EXCHANGE)
	switch {
	case err == nil:
		// The new build is in place; if the old one can't be removed now, the next
		// build's sweep of leftovers removes it.
		os.RemoveAll(tmp)
		return nil
	case errors.Is(err, unix.ENOENT):
		if err := os.Rename(tmp, dst); err != nil {
			return fmt.Errorf("publishing %q as %q: %w", tmp, dst, err)
		}
		return nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		// A file system without RENAME_EXCHANGE: move the old build aside, then
		// the new one in. dst is missing for a moment, never half-built.
		old := tmp + ".old"
		if err := os.Rename(dst, old); err != nil {
			return fmt.Errorf("moving the old build %q aside: %w", dst, err)
		}
		if err := os.Rename(tmp, dst); err != nil {
			os.Rename(old, dst)
			return fmt.Errorf("publishing %q as %q: %w", tmp, dst, err)
		}
		os.RemoveAll(old)
		return nil
	default:
		return fmt.Errorf("publishing %q as %q: %w", tmp, dst, err)
	}
}

// findDebootstrap looks on PATH and in the sbin folders a non-login PATH may miss.
func findDebootstrap() (string, error) {
	if p, err := exec.LookPath("debootstrap"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/debootstrap", "/sbin/debootstrap"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", errors.New("debootstrap is not installed (Hint: apt-get install debootstrap)")
}

// runDebootstrap runs debootstrap in its own mount namespace, so that the /proc and
// /sys it mounts in the target go away with it however it ends, and in its own
// process group, so that cancelling ctx kills its dpkg and maintainer scripts too.
func runDebootstrap(ctx context.Context, bin string, args []string, progress io.Writer) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = debootstrapEnv(os.Environ())
	lw := &lineWriter{w: progress, keep: tailLines}
	cmd.Stdout = lw
	cmd.Stderr = lw
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:      true,
		Unshareflags: syscall.CLONE_NEWNS, // Go makes / private in the child first
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = debootstrapWaitDelay
	err := cmd.Run()
	lw.flush()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("debootstrap: %w", ctx.Err())
	}
	msg := fmt.Sprintf("debootstrap %s: %v", strings.Join(args, " "), err)
	if t := lw.tail(); t != "" {
		msg += "; its last lines:\n" + t
	}
	if log := tailFile(filepath.Join(args[len(args)-2], "debootstrap", "debootstrap.log"), tailLines); log != "" {
		msg += "\nthe end of its log:\n" + log
	}
	return errors.New(msg + "\n(Hint: check that the mirror is reachable and the suite exists on it)")
}

// debootstrapEnv is env with a PATH that has the sbin folders (chroot, ldconfig),
// the C locale, and no questions from debconf.
func debootstrapEnv(env []string) []string {
	var out []string
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		switch k {
		case "PATH", "LC_ALL", "LANG", "LANGUAGE", "DEBIAN_FRONTEND":
			continue
		}
		out = append(out, e)
	}
	return append(out,
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"LC_ALL=C",
		"DEBIAN_FRONTEND=noninteractive",
	)
}

// chrootVersion runs `interp --version` chrooted into root, as nobody, and parses it.
func chrootVersion(ctx context.Context, root, interp string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, interp, "--version")
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C.UTF-8", "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: nobodyID, Gid: nobodyID, NoSetGroups: true},
	}
	// Both interpreters print their version on stdout; stderr is only for errors.
	var out, errOut bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("running chroot %s %s --version: %w: %s", root, interp, err, strings.TrimSpace(errOut.String()))
	}
	v := parseVersion(out.String())
	if v == "" || v[0] < '0' || v[0] > '9' {
		return "", fmt.Errorf("chroot %s %s --version printed %q, not a version", root, interp, out.String())
	}
	return v, nil
}

func sayer(w io.Writer) func(string) {
	return func(s string) {
		if w != nil {
			fmt.Fprintf(w, "brig: %s\n", s)
		}
	}
}

// lineWriter passes whole lines on to w as they are written and keeps the last keep
// of them for an error message. Errors writing to w are ignored: a user who stops
// watching must not fail the build.
type lineWriter struct {
	w    io.Writer
	keep int
	part []byte
	last []string
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		l.line(string(l.part[:i]))
		l.part = l.part[i+1:]
	}
	return len(p), nil
}

func (l *lineWriter) line(s string) {
	s = strings.TrimRight(s, "\r")
	if l.w != nil {
		io.WriteString(l.w, s+"\n")
	}
	l.last = append(l.last, s)
	if len(l.last) > l.keep {
		l.last = l.last[len(l.last)-l.keep:]
	}
}

func (l *lineWriter) flush() {
	if len(l.part) > 0 {
		l.line(string(l.part))
		l.part = nil
	}
}

func (l *lineWriter) tail() string { return strings.Join(l.last, "\n") }

// tailFile returns the last n lines of a file, or "".
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// checkReplaceable refuses to build into dir when it holds something other
// than a rootfs of brig's (a manifest.json at its top): publishing a build
// replaces the whole directory, and a mistyped --dir (a state directory, a
// home) would lose what it holds.
func checkReplaceable(dir string, lang Language) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || err == nil && len(ents) == 0 {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestName)); err == nil {
		return nil
	}
	return fmt.Errorf("%q holds %d entries and no %s: a build replaces the directory it is given, so brig builds only into a missing or empty one, or over an earlier build; give another --dir, such as <state_dir>/rootfs/%s", dir, len(ents), ManifestName, lang)
}
