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
// ids, both filters and the rlimits after the reaper's own filter.
func TestMarshalProgramConfig(t *testing.T) {
	f := bpf.Program{{Code: 6, K: 0x7fff0000}}
	c := Config{UID: 10, GID: 11, LastCap: 40, Filter: f, Program: &ProgramConfig{
		UID: 1000, GID: 1000, HostUID: 20, HostGID: 21,
		SpawnFilter: f.Marshal(), Filter: append(f.Marshal(), f.Marshal()...),
		Rlimits: []pid1.Rlimit{{Resource: 7, Cur: 1024, Max: 2048}},
	}}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var head [16]uint32
	for i := range head {
		head[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	if want := [16]uint32{2, 10, 11, 40, 1, 1, 1000, 1000, 20, 21, 1, 2, 1, 0, 0, 0}; head != want {
		t.Fatalf("got header %v, want %v", head, want)
	}
	if len(b) != 64+8*4+24 {
		t.Fatalf("got %d bytes, want the header, four instructions and one rlimit", len(b))
	}
	c.Program.SpawnFilter = nil
	if _, err := c.Marshal(); err == nil {
		t.Fatal("no spawner filter: got a config, want an error")
	}
}

// header reads struct reaper_run from the start of b.
func header(b []byte) (h [6]uint32) {
	for i := range h {
		h[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return h
}
