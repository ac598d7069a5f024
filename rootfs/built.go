package rootfs

import (
	"fmt"
	"path/filepath"
)

// Built is the provider of rootfs trees made by Build: each language's tree is the
// overlay's whole lower layer, with nothing bound from the host.
type Built struct {
	roots map[Language]*Root // read-only after OpenBuilt
}

// OpenBuilt reads and checks the manifest of each language's directory. A language
// missing from dirs (or with an empty directory) is not an error here; Root says how
// to build it. A directory that holds no build, a build of another language, a
// manifest whose interpreter is missing, or a tree CheckLower refuses is.
func OpenBuilt(dirs map[Language]string) (*Built, error) {
	b := &Built{roots: map[Language]*Root{}}
	for lang, dir := range dirs {
		if _, err := ParseLanguage(string(lang)); err != nil {
			return nil, err
		}
		if dir == "" {
			continue
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("opening the built %s rootfs %q: %w", lang, dir, err)
		}
		m, err := ReadManifest(abs)
		if err == nil {
			err = m.check(abs, lang)
		}
		if err == nil {
			// A build by an older brig has a /sandbox of the sandbox id, which is a
			// host account's: it could plant a module every run would import.
			err = CheckLower(abs)
		}
		if err != nil {
			return nil, fmt.Errorf("opening the built %s rootfs %q: %w (Hint: %s)", lang, abs, err, buildHint(lang, abs))
		}
		b.roots[lang] = &Root{
			Language:    lang,
			Lower:       abs,
			Interpreter: m.Interpreter,
			Args:        interpreterArgs(lang),
			Version:     m.Version,
		}
	}
	return b, nil
}

// Name implements Provider.
func (b *Built) Name() string { return "built" }

// Root implements Provider. The Root is the caller's to keep and change.
func (b *Built) Root(lang Language) (*Root, error) {
	if _, err := ParseLanguage(string(lang)); err != nil {
		return nil, err
	}
	r, ok := b.roots[lang]
	if !ok {
		return nil, fmt.Errorf("%w: no built rootfs is configured for %s (Hint: %s, then configure that directory)", ErrNotBuilt, lang, buildHint(lang, "DIR"))
	}
	c := *r
	c.Args = append([]string(nil), r.Args...)
	return &c, nil
}

func buildHint(lang Language, dir string) string {
	return fmt.Sprintf("build one with `brig rootfs build %s --dir %s`", lang, dir)
}
