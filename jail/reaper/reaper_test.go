package reaper

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/brig-sandbox/brig/jail/pid1"
	"github.com/brig-sandbox/brig/seccomp/bpf"
)

// TestMarshalRun: the frame is the header the reaper checks, then the
// script's path, the code, argv and envp, each NUL-terminated; what the
// reaper could not pass on as C strings is refused.
func TestMarshalRun(t *testing.T) {
	rs := &pid1.RunSpec{ScriptPath: "/sandbox/main.py", Code: []byte("print(1)\n"),
		Argv: []string{"/usr/bin/python3", "-u", "/sandbox/main.py"}, Env: []string{"A=b"}}
	b, err := MarshalRun(rs, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := "/sandbox/main.py\x00print(1)\n\x00/usr/bin/python3\x00-u\x00/sandbox/main.py\x00A=b\x00"
	if head, want := header(b), [6]uint32{uint32(len(body)), 9, 3, 1, 0, 0}; head != want || string(b[24:]) != body {
		t.Fatalf("got header %v and body %q, want %v and %q", head, b[24:], want, body)
	}
	// A warm sandbox's: no command line, and the environment handed over.
	b, err = MarshalRun(rs, []byte(`{"A":"b"}`))
	if err != nil {
		t.Fatal(err)
	}
	body = "/sandbox/main.py\x00print(1)\n\x00{\"A\":\"b\"}"
	if head, want := header(b), [6]uint32{uint32(len(body)), 9, 0, 0, 9, 0}; head != want || string(b[24:]) != body {
		t.Fatalf("warm: got header %v and body %q, want %v and %q", head, b[24:], want, body)
	}
	for name, bad := range map[string]*pid1.RunSpec{
		"NUL in env":  {ScriptPath: "/s", Argv: []string{"/p"}, Env: []string{"A=\x00b"}},
		"NUL in path": {ScriptPath: "/s\x00", Argv: []string{"/p"}},
		"no argv":     {ScriptPath: "/s"},
		"too large":   {ScriptPath: "/s", Argv: []string{"/p"}, Code: []byte(strings.Repeat("x", 65<<20))},
	} {
		if _, err := MarshalRun(bad, nil); err == nil {
			t.Errorf("%s: got a frame, want an error", name)
		}
	}
}

// TestMarshalProgramConfig: a cold sandbox's config carries the program's
// ids, both filters and the rlimits after the reaper's own filter, then the
// root's strings.
func TestMarshalProgramConfig(t *testing.T) {
	f := bpf.Program{{Code: 6, K: 0x7fff0000}}
	c := Config{UID: 10, GID: 11, LastCap: 40, Filter: f, Program: &ProgramConfig{
		UID: 1000, GID: 1000, HostUID: 20, HostGID: 21,
		SpawnFilter: f.Marshal(), Filter: append(f.Marshal(), f.Marshal()...),
		Rlimits: []pid1.Rlimit{{Resource: 7, Cur: 1024, Max: 2048}},
	}, Root: testRoot()}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var head [24]uint32
	for i := range head {
		head[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	root := "/s\x00/l\x00/e\x00sandbox\x00\x00/usr\x00/usr\x00parts\x00/usr/bin\x00/usr/bin\x00kcore\x00acpi\x00sys\x00irq\x00" +
		"python3.11-1\x00/usr/bin/python3.11\x00"
	if want := [24]uint32{5, 10, 11, 40, 1, 1, 1000, 1000, 20, 21, 1, 2, 1, 0, 0, 0, uint32(len(root)), 1, 1, 1, 2, 20, 21, 1}; head != want {
		t.Fatalf("got header %v, want %v", head, want)
	}
	if got := binary.LittleEndian.Uint64(b[96:]); got != 64<<20 {
		t.Fatalf("got a scratch size of %d, want %d", got, 64<<20)
	}
	if len(b) != 104+8*4+24+len(root) || string(b[len(b)-len(root):]) != root {
		t.Fatalf("got %d bytes ending %q, want the header, four instructions, one rlimit and the root %q", len(b), b[104+8*4+24:], root)
	}
	// A warm sandbox's interpreter's argv and envp come last, after the
	// root's strings, which the reaper reads first.
	c.Program.WarmArgv, c.Program.WarmEnv = []string{"node", "boot.js"}, []string{"A=b"}
	if b, err = c.Marshal(); err != nil {
		t.Fatal(err)
	}
	if want := root + "node\x00boot.js\x00A=b\x00"; !strings.HasSuffix(string(b), want) || binary.LittleEndian.Uint32(b[52:]) != 17 {
		t.Fatalf("warm: got %q at the end, warm_size %d; want %q and 17", b[len(b)-len(want):], binary.LittleEndian.Uint32(b[52:]), want)
	}
	c.Program.SpawnFilter = nil
	if _, err := c.Marshal(); err == nil {
		t.Fatal("no spawner filter: got a config, want an error")
	}
}

// TestRootConfig: the reaper writes a warm sandbox's bootstrap where the Go
// init does, and a root it could not build is refused before it is sent.
func TestRootConfig(t *testing.T) {
	if scratchBytesPerInode != pid1.ScratchBytesPerInode {
		t.Errorf("the reaper's scratch tmpfs has an inode for each %d bytes, the init's for each %d", scratchBytesPerInode, pid1.ScratchBytesPerInode)
	}
	if copiesFiles != pid1.CopiesFiles || copiesEmpty != pid1.CopiesEmpty {
		t.Errorf("the reaper's copies' folders %q and %q, the init's %q and %q", copiesFiles, copiesEmpty, pid1.CopiesFiles, pid1.CopiesEmpty)
	}
	if warmBootPath != pid1.WarmBootPath {
		t.Errorf("the reaper's bootstrap path %q, the init's %q", warmBootPath, pid1.WarmBootPath)
	}
	if warmFD != pid1.WarmFD {
		t.Errorf("the reaper's warm descriptor %d, the init's %d", warmFD, pid1.WarmFD)
	}
	f := bpf.Program{{Code: 6, K: 0x7fff0000}}
	for name, change := range map[string]func(*RootConfig){
		"no root":                      nil,
		"no scratch":                   func(r *RootConfig) { r.Scratch = "" },
		"no scratch size":              func(r *RootConfig) { r.ScratchBytes = 0 },
		"root's ids":                   func(r *RootConfig) { r.HostUID = 0 },
		"a NUL in a path":              func(r *RootConfig) { r.Binds[0].Target = "/usr/\x00bin" },
		"a colon in a view":            func(r *RootConfig) { r.Binds[0].Source = "/usr/b:in" },
		"too many binds":               func(r *RootConfig) { r.Binds = make([]pid1.Bind, 65) },
		"a colon in the view's folder": func(r *RootConfig) { r.View.Source = "/u:sr" },
		"a relative view":              func(r *RootConfig) { r.View.Target = "usr" },
		"a view that shows no folder":  func(r *RootConfig) { r.View.Dir = "" },
		"a view that shows a path":     func(r *RootConfig) { r.View.Dir = "a/b" },
		"too many masks":               func(r *RootConfig) { r.ProcFiles = make([]string, 65) },
		"a huge bootstrap":             func(r *RootConfig) { r.WarmBoot = strings.Repeat("x", 1<<20) },
	} {
		c := Config{UID: 10, GID: 11, LastCap: 40, Filter: f}
		if change != nil {
			c.Root = testRoot()
			change(c.Root)
		}
		if _, err := c.Marshal(); err == nil {
			t.Errorf("%s: got a config, want an error", name)
		}
	}
}

func testRoot() *RootConfig {
	return &RootConfig{Scratch: "/s", Lower: "/l", Empty: "/e", Hostname: "sandbox", ScratchBytes: 64 << 20,
		HostUID: 20, HostGID: 21, View: &pid1.View{Source: "/usr", Target: "/usr", Dir: "parts"},
		Binds:     []pid1.Bind{{Source: "/usr/bin", Target: "/usr/bin"}},
		ProcFiles: []string{"kcore"}, ProcDirs: []string{"acpi"}, ProcReadOnly: []string{"sys", "irq"},
		Copies: []pid1.Copy{{Name: "python3.11-1", Target: "/usr/bin/python3.11"}}}
}

// header reads struct reaper_run from the start of b.
func header(b []byte) (h [6]uint32) {
	for i := range h {
		h[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return h
}
