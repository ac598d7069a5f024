package rootfs

import "fmt"

// Mixed is the Provider of a host where some languages have a built root: the
// built root where one is configured, the host's otherwise.
type Mixed struct {
	host  Provider
	built Provider // nil when no language has a built root
	langs map[Language]bool
}

// NewMixed gives built's root for the languages in langs and host's for the
// others. built may be nil when langs is empty.
func NewMixed(host, built Provider, langs []Language) (*Mixed, error) {
	m := &Mixed{host: host, built: built, langs: map[Language]bool{}}
	for _, l := range langs {
		if built == nil {
			return nil, fmt.Errorf("the %s root is built, but no built provider was given", l)
		}
		m.langs[l] = true
	}
	return m, nil
}

// Open is the Provider of a host whose built roots are dirs (a language to its
// directory, from `brig rootfs build`): a Mixed of those and the host's roots,
// whose skeleton is kept under stateDir.
func Open(stateDir string, dirs map[Language]string) (*Mixed, error) {
	host, err := NewHost(stateDir, HostConfig{})
	if err != nil {
		return nil, err
	}
	if len(dirs) == 0 {
		return NewMixed(host, nil, nil)
	}
	built, err := OpenBuilt(dirs)
	if err != nil {
		return nil, err
	}
	langs := make([]Language, 0, len(dirs))
	for l := range dirs {
		langs = append(langs, l)
	}
	return NewMixed(host, built, langs)
}

// Name is "host" when no language has a built root, "built" when every one
// does, and "host+built" in between.
func (m *Mixed) Name() string {
	switch len(m.langs) {
	case 0:
		return "host"
	case len(Languages):
		return "built"
	}
	return "host+built"
}

// Root returns lang's built root if it has one, else the host's.
func (m *Mixed) Root(lang Language) (*Root, error) {
	if m.langs[lang] {
		return m.built.Root(lang)
	}
	return m.host.Root(lang)
}

// ViewOff is the host rootfs's (Host.ViewOff), for the languages that use it.
func (m *Mixed) ViewOff() (why, hint string) {
	if h, ok := m.host.(*Host); ok && len(m.langs) < len(Languages) {
		return h.ViewOff()
	}
	return "", ""
}
