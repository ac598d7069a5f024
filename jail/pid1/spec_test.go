package pid1

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
)

// A prepare spec and a run spec go down one pipe, one after the other, and
// come out whole: the byte fields ride as raw frames beside the JSON.
func TestSpecFramesRoundTrip(t *testing.T) {
	prep := PrepareSpec{
		Scratch: "/s", Lower: "/l", Binds: []Bind{{Source: "/a", Target: "/b"}},
		UID: 1000, Hostname: "sandbox", Rlimits: DefaultRlimits(),
		Seccomp: bytes.Repeat([]byte{0, 1, 2, 0xff}, 2000), InitSeccomp: []byte{7, 8, 9}, Zygote: true,
	}
	run := RunSpec{ScriptPath: "/sandbox/main.py", Code: []byte("print('\\x00 é')\n"), Argv: []string{"python3"}, Env: []string{"A=1"}}
	var pipe bytes.Buffer
	if err := WritePrepare(&pipe, &prep); err != nil {
		t.Fatal(err)
	}
	if err := WriteRun(&pipe, &run); err != nil {
		t.Fatal(err)
	}
	var gotPrep PrepareSpec
	var gotRun RunSpec
	if err := readPrepare(&pipe, &gotPrep); err != nil {
		t.Fatal(err)
	}
	if err := readRun(&pipe, &gotRun); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotPrep, prep) {
		t.Errorf("prepare spec: got %+v, want %+v", gotPrep, prep)
	}
	if !reflect.DeepEqual(gotRun, run) {
		t.Errorf("run spec: got %+v, want %+v", gotRun, run)
	}
	// Only the filter's bytes cross raw: the JSON frame holds none of them.
	var one bytes.Buffer
	WritePrepare(&one, &prep)
	n := binary.LittleEndian.Uint32(one.Bytes())
	if js := one.Bytes()[4 : 4+n]; bytes.Contains(js, []byte("Seccomp")) {
		t.Errorf("the JSON frame carries the filter: %s", js)
	}
}

// A pipe closed before a spec is io.EOF (the parent discarded the init); one
// closed inside a spec, or a frame beyond the bound, is an error.
func TestSpecFramesEnds(t *testing.T) {
	var prep PrepareSpec
	if err := readPrepare(bytes.NewReader(nil), &prep); err != io.EOF {
		t.Errorf("empty pipe: got %v, want io.EOF", err)
	}
	var whole bytes.Buffer
	WritePrepare(&whole, &PrepareSpec{Seccomp: []byte{1, 2, 3}})
	for cut := 1; cut < whole.Len(); cut++ {
		err := readPrepare(bytes.NewReader(whole.Bytes()[:cut]), &prep)
		if err == nil || err == io.EOF {
			t.Fatalf("spec cut at %d of %d bytes: got %v, want an error other than EOF", cut, whole.Len(), err)
		}
	}
	huge := binary.LittleEndian.AppendUint32(nil, maxSpecFrame+1)
	if err := readPrepare(bytes.NewReader(huge), &prep); err == nil || errors.Is(err, io.EOF) {
		t.Errorf("oversized frame: got %v, want an error", err)
	}
}
