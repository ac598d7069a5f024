package rootfs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/brig-sandbox/brig/internal/pathwalk"
)

// ManifestFormat is the version of manifest.json and of the tree layout it describes
// that this brig writes and reads. A build of another format is rebuilt, never
// guessed at.
const ManifestFormat = 1

// ManifestName is the manifest's file name at the top of a built rootfs.
const ManifestName = "manifest.json"

// maxManifestSize bounds what ReadManifest reads; a real manifest is a few hundred bytes.
const maxManifestSize = 64 << 10

// ErrNotBuilt is returned when a directory holds no built rootfs (no manifest.json), or
// no directory is configured for a language.
var ErrNotBuilt = errors.New("rootfs not built")

// ErrInvalidManifest is returned when manifest.json can't be parsed or does not
// describe the tree it sits in.
var ErrInvalidManifest = errors.New("invalid rootfs manifest")

// Manifest describes a built rootfs. It is written as manifest.json at the top of the
// tree; the sandbox can read it, and it holds nothing the API doesn't already report.
type Manifest struct {
	// FormatVersion is ManifestFormat of the brig that built the tree.
	FormatVersion int      `json:"format_version"`
	Language      Language `json:"language"`
	// Interpreter is the interpreter's absolute path inside the root.
	Interpreter string `json:"interpreter"`
	// Version is the interpreter's own report of its version ("3.11.2", "18.20.4").
	Version string `json:"version"`
	// Suite and Mirror are the Debian release and mirror the tree was made from.
	Suite  string `json:"suite"`
	Mirror string `json:"mirror"`
	// Variant is debootstrap's --variant.
	Variant string `json:"variant"`
	// Packages are the packages asked for with --include (their dependencies come too).
	Packages []string  `json:"packages"`
	Created  time.Time `json:"created"`
}

// ReadManifest reads dir/manifest.json. A missing file is ErrNotBuilt; a file that
// isn't a manifest of ManifestFormat is ErrInvalidManifest. It does not check the
// tree; OpenBuilt does.
func ReadManifest(dir string) (*Manifest, error) {
	p := filepath.Join(dir, ManifestName)
	f, err := os.Open(p)
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("%w: %q has no %s", ErrNotBuilt, dir, ManifestName)
	}
	if err != nil {
		return nil, fmt.Errorf("reading rootfs manifest %q: %w", p, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading rootfs manifest %q: %w", p, err)
	}
	if len(b) > maxManifestSize {
		return nil, fmt.Errorf("%w: %q is larger than %d bytes", ErrInvalidManifest, p, maxManifestSize)
	}
	// The format version is read first so that a manifest from another brig is
	// reported as such, not as an unknown field.
	var v struct {
		FormatVersion int `json:"format_version"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%w: parsing %q: %v", ErrInvalidManifest, p, err)
	}
	if v.FormatVersion != ManifestFormat {
		return nil, fmt.Errorf("%w: %q has format version %d, this brig reads %d (rebuild it with `brig rootfs build`)", ErrInvalidManifest, p, v.FormatVersion, ManifestFormat)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: parsing %q: %v", ErrInvalidManifest, p, err)
	}
	return &m, nil
}

// check reports whether m describes a usable lang rootfs at dir: the right format
// and language, a version, and an executable interpreter inside the tree.
func (m *Manifest) check(dir string, lang Language) error {
	if m.FormatVersion != ManifestFormat {
		return fmt.Errorf("%w: format version %d, want %d", ErrInvalidManifest, m.FormatVersion, ManifestFormat)
	}
	if m.Language != lang {
		return fmt.Errorf("%w: %q is a %q rootfs, not %q", ErrInvalidManifest, dir, m.Language, lang)
	}
	if m.Version == "" {
		return fmt.Errorf("%w: %q records no interpreter version", ErrInvalidManifest, dir)
	}
	if !path.IsAbs(m.Interpreter) || path.Clean(m.Interpreter) != m.Interpreter {
		return fmt.Errorf("%w: interpreter %q is not a clean absolute path", ErrInvalidManifest, m.Interpreter)
	}
	host, err := resolveIn(dir, m.Interpreter)
	if err != nil {
		return fmt.Errorf("%w: interpreter %s in %q: %v", ErrInvalidManifest, m.Interpreter, dir, err)
	}
	fi, err := os.Stat(host)
	if err != nil {
		return fmt.Errorf("%w: interpreter %s in %q: %v", ErrInvalidManifest, m.Interpreter, dir, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%w: interpreter %s in %q is not an executable file", ErrInvalidManifest, m.Interpreter, dir)
	}
	return nil
}

// writeManifest writes m as dir/manifest.json.
func writeManifest(dir string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(dir, ManifestName)
	if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Chmod(p, 0o644) // readable by runs whatever the umask

}

// resolveIn returns the host path of p, a path inside the tree at root, following
// symlinks as the kernel would after chroot(root): an absolute link target starts
// again at root, and ".." never climbs above it.
func resolveIn(root, p string) (string, error) { return pathwalk.Resolve(root, p, nil) }
