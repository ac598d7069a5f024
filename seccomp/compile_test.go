package seccomp

import (
	"errors"
	"slices"
	"testing"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/seccomp/bpf"
)

func TestCompileRejectsInvalidPolicy(t *testing.T) {
	allowRead := Rule{Names: []string{"read"}, Action: Allow}
	tests := []struct {
		name   string
		policy Policy
	}{
		{"unset default", Policy{Rules: []Rule{allowRead}}},
		{"unknown default", Policy{Default: Action(9), Rules: []Rule{allowRead}}},
		{"rule without names", Policy{Default: NoSys, Rules: []Rule{{Action: Allow}}}},
		{"rule without action", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}}}}},
		{"unknown call", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"reed"}, Action: Allow}}}},
		{"call in two rules", Policy{Default: NoSys, Rules: []Rule{allowRead, {Names: []string{"write", "read"}, Action: Deny}}}},
		{"else without when", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Action: Allow, Else: Deny}}}},
		{"when without else", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Action: Allow,
			When: []Cond{{Arg: 0, Op: In, Values: []uint64{0}}}}}}},
		{"else equal to action", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Action: Allow, Else: Allow,
			When: []Cond{{Arg: 0, Op: In, Values: []uint64{0}}}}}}},
		{"argument 6", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Action: Allow, Else: Deny,
			When: []Cond{{Arg: 6, Op: In, Values: []uint64{0}}}}}}},
		{"argument checked twice", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Action: Allow, Else: Deny,
			When: []Cond{{Arg: 0, Op: In, Values: []uint64{0}}, {Arg: 0, Mask: lowWord, Op: NotIn, Values: []uint64{1}}}}}}},
		{"not in without a mask", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"fadvise64"}, Action: Allow, Else: Ignore,
			When: []Cond{{Arg: 3, Op: NotIn, Values: []uint64{4}}}}}}},
		{"in that guards without a mask", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"prctl"}, Action: Deny, Else: Allow,
			When: []Cond{{Arg: 0, Op: In, Values: []uint64{67}}}}}}},
		{"a case's in that guards without a mask", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"prctl"}, Else: Allow,
			Cases: []Case{{Action: Ignore, When: []Cond{{Arg: 0, Op: In, Values: []uint64{67}}}}}}}}},
		{"unset op", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Action: Allow, Else: Deny,
			When: []Cond{{Arg: 0, Values: []uint64{0}}}}}}},
		{"no values", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Action: Allow, Else: Deny,
			When: []Cond{{Arg: 0, Op: In}}}}}},
		{"value outside mask", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Action: Allow, Else: Deny,
			When: []Cond{{Arg: 0, Mask: 0xff, Op: In, Values: []uint64{0x100}}}}}}},
		{"value twice", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Action: Allow, Else: Deny,
			When: []Cond{{Arg: 0, Op: In, Values: []uint64{3, 3}}}}}}},
		{"when and cases", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Else: Deny,
			When:  []Cond{{Arg: 0, Op: In, Values: []uint64{0}}},
			Cases: []Case{{Action: Allow, When: []Cond{{Arg: 1, Op: In, Values: []uint64{0}}}}}}}}},
		{"cases with action", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Action: Allow, Else: Deny,
			Cases: []Case{{Action: Allow, When: []Cond{{Arg: 1, Op: In, Values: []uint64{0}}}}}}}}},
		{"cases without else", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"},
			Cases: []Case{{Action: Allow, When: []Cond{{Arg: 1, Op: In, Values: []uint64{0}}}}}}}}},
		{"case without conditions", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Else: Deny,
			Cases: []Case{{Action: Allow}}}}}},
		{"case without action", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Else: Deny,
			Cases: []Case{{When: []Cond{{Arg: 1, Op: In, Values: []uint64{0}}}}}}}}},
		{"case checks an argument twice", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Else: Deny,
			Cases: []Case{{Action: Allow, When: []Cond{{Arg: 1, Op: In, Values: []uint64{0}}, {Arg: 1, Op: In, Values: []uint64{1}}}}}}}}},
		{"every case is else", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Else: Deny,
			Cases: []Case{{Action: Deny, When: []Cond{{Arg: 1, Op: In, Values: []uint64{0}}}}}}}}},
		{"too many branches", Policy{Default: NoSys, Rules: []Rule{{Names: []string{"read"}, Action: Allow, Else: Deny,
			When: []Cond{{Arg: 0, Mask: 0xffffffff, Op: NotIn, Values: []uint64{0x12345678, 0x87654321, 0x0f0f0f0f, 0xf0f0f0f0, 0x55aa55aa}}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(tt.policy)
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("got error %v, want ErrInvalidPolicy", err)
			}
		})
	}
}

// TestCondExpansion checks the claim Rule.branches rests on: a condition's hits
// and misses are single-argument comparisons that never overlap and together
// cover every value, with the hits exactly the values the table says match.
func TestCondExpansion(t *testing.T) {
	tests := []struct {
		name string
		cond Cond
	}{
		{"whole register, one value", Cond{Op: In, Values: []uint64{unix.AF_UNIX}}},
		{"whole register, families", Cond{Op: In, Values: []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6}}},
		{"whole register, zero and max", Cond{Op: In, Values: []uint64{0, ^uint64(0)}}},
		{"whole register, adjacent", Cond{Op: In, Values: []uint64{7, 8, 9}}},
		{"low word, ioctl commands", Cond{Mask: lowWord, Op: NotIn, Values: []uint64{unix.TIOCSTI, unix.TIOCLINUX}}},
		{"low word, personality", Cond{Mask: lowWord, Op: In, Values: []uint64{perLinux, personalityQuery}}},
		{"socket type mask", Cond{Mask: sockTypeMask, Op: In, Values: []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_SEQPACKET}}},
		{"namespace flags clear", Cond{Mask: namespaceFlags, Op: In, Values: []uint64{0}}},
		{"scattered mask", Cond{Mask: 0x8000_0000_0000_0101, Op: NotIn, Values: []uint64{0x100, 0x8000_0000_0000_0001}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cond
			hits, misses := c.hits(), c.misses()
			for _, x := range boundaryValues(c) {
				var nHits, nMisses int
				for _, cmp := range hits {
					if cmp.matches(x) {
						nHits++
					}
				}
				for _, cmp := range misses {
					if cmp.matches(x) {
						nMisses++
					}
				}
				if nHits+nMisses != 1 {
					t.Fatalf("value %#x: got %d hits and %d misses matching, want exactly one comparison", x, nHits, nMisses)
				}
				inValues := slices.Contains(c.Values, x&c.mask())
				if (nHits == 1) != inValues {
					t.Errorf("value %#x: got hit %v, want %v", x, nHits == 1, inValues)
				}
			}
		})
	}
}

// TestIntersect checks the other claim the expansion rests on: intersect(a, b)
// is disjoint comparisons that together match exactly the values both a and b
// match.
func TestIntersect(t *testing.T) {
	eq := func(v uint64) comparison { return comparison{op: libseccomp.CompareEqual, value: v} }
	lt := func(v uint64) comparison { return comparison{op: libseccomp.CompareLess, value: v} }
	gt := func(v uint64) comparison { return comparison{op: libseccomp.CompareGreater, value: v} }
	masked := func(m, v uint64) comparison { return comparison{op: libseccomp.CompareMaskedEqual, mask: m, value: v} }
	tests := []struct {
		name string
		a, b comparison
	}{
		{"equal, equal same", eq(2), eq(2)},
		{"equal, equal other", eq(2), eq(10)},
		{"equal, less", eq(2), lt(10)},
		{"equal below greater", eq(2), gt(10)},
		{"equal, masked", eq(0x105), masked(0xf, 5)},
		{"less, less", lt(10), lt(3)},
		{"greater, greater", gt(1), gt(2)},
		{"greater, less, a gap", gt(2), lt(10)},
		{"greater, less, adjacent", gt(1), lt(2)},
		{"greater, less, top", gt(0xffff), lt(^uint64(0))},
		{"less, masked", lt(0x30), masked(0xf, 5)},
		{"greater, masked high bit", gt(7), masked(1<<63, 1<<63)},
		{"masked, masked agree", masked(0xf, 5), masked(0xf0, 0x30)},
		{"masked, masked overlap agree", masked(0xff, 0x35), masked(0xf0f, 0x5)},
		{"masked, masked disagree", masked(0xf, 5), masked(0x3, 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts, err := intersect(tt.a, tt.b)
			if err != nil {
				t.Fatalf("intersect: %v", err)
			}
			var xs []uint64
			for _, c := range []comparison{tt.a, tt.b} {
				xs = append(xs, boundaryValues(Cond{Op: In, Values: []uint64{c.value}, Mask: c.mask})...)
			}
			for _, x := range xs {
				n := 0
				for _, p := range parts {
					if p.matches(x) {
						n++
					}
				}
				want := 0
				if tt.a.matches(x) && tt.b.matches(x) {
					want = 1
				}
				if n != want {
					t.Errorf("value %#x: got %d of %d parts matching, want %d", x, n, len(parts), want)
				}
			}
		})
	}
}

// boundaryValues are argument values on and around the edges of c: each value, its
// neighbours, with each bit flipped and the high half set, the extremes, and
// every value of the low byte.
func boundaryValues(c Cond) []uint64 {
	out := []uint64{0, 1, ^uint64(0), c.mask(), ^c.mask(), 0xffffffff, 1 << 32, 1 << 63}
	for _, x := range c.Values {
		out = append(out, x, x+1, x-1, x|0xffffffff00000000, x|1<<32, ^x)
		for bit := range 64 {
			out = append(out, x^(1<<bit))
		}
	}
	for x := range uint64(256) {
		out = append(out, x, x<<56, x<<24)
	}
	return out
}

func compileDefault(tb testing.TB) Program {
	tb.Helper()
	prog, err := Compile(Default())
	if err != nil {
		tb.Fatalf("Compile(Default()): %v", err)
	}
	return prog
}

func TestMarshalRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		prog Program
	}{
		{"default policy", compileDefault(t)},
		{"one instruction", Program{{Code: 0x06, K: unix.SECCOMP_RET_ALLOW}}},
		{"every field set", Program{{Code: 0x1234, Jt: 0xab, Jf: 0xcd, K: 0xdeadbeef}, {Code: 0x06, K: 0x7fff0000}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.prog.Marshal()
			if got, want := len(b), 8*len(tt.prog); got != want {
				t.Errorf("got %d bytes, want %d", got, want)
			}
			got, err := bpf.Unmarshal(b)
			if err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if !slices.Equal(got, tt.prog) {
				t.Errorf("got %v, want %v", got, tt.prog)
			}
		})
	}
}

func TestUnmarshalRejects(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"half an instruction", make([]byte, 4)},
		{"one and a bit", make([]byte, 9)},
		{"over 4096 instructions", make([]byte, 8*4097)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := bpf.Unmarshal(tt.b)
			if !errors.Is(err, bpf.ErrInvalidProgram) {
				t.Errorf("got error %v, want ErrInvalidProgram", err)
			}
		})
	}
}

func TestParseAction(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Action
		wantErr bool
	}{
		{"allow", "allow", Allow, false},
		{"deny", "deny", Deny, false},
		{"nosys", "nosys", NoSys, false},
		{"ignore", "ignore", Ignore, false},
		{"unset is not an action", "unset", actionUnset, true},
		{"capitalised", "Allow", actionUnset, true},
		{"empty", "", actionUnset, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAction(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("got error %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if err == nil && got.String() != tt.in {
				t.Errorf("String: got %q, want %q", got.String(), tt.in)
			}
		})
	}
}

func TestParseOp(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Op
		wantErr bool
	}{
		{"in", "in", In, false},
		{"not in", "not in", NotIn, false},
		{"unset is not an op", "unset", opUnset, true},
		{"no space", "notin", opUnset, true},
		{"empty", "", opUnset, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseOp(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("got error %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if err == nil && got.String() != tt.in {
				t.Errorf("String: got %q, want %q", got.String(), tt.in)
			}
		})
	}
}

// TestDefaultRulesExplained holds the tables to their promise of a comment on
// every non-obvious entry: every denial, every ENOSYS, every ignored call and
// every argument check or list of cases.
func TestDefaultRulesExplained(t *testing.T) {
	for name, p := range map[string]Policy{"Default": Default(), "Spawner": Spawner(), "Reaper": Reaper(), "Init": Init()} {
		for _, r := range p.Rules {
			if !explained(r) {
				t.Errorf("%s rule %v (%v): got no Comment, want one saying why", name, r.Names, r.Action)
			}
		}
	}
}

func explained(r Rule) bool {
	return r.Comment != "" || r.Action == Allow && len(r.When) == 0 && len(r.Cases) == 0
}

// TestExplainedCatchesBareRules checks the check: a bare rule of each
// non-obvious shape fails it.
func TestExplainedCatchesBareRules(t *testing.T) {
	cond := []Cond{{Arg: 0, Op: In, Values: []uint64{0}}}
	tests := []struct {
		name string
		rule Rule
	}{
		{"deny", Rule{Names: []string{"read"}, Action: Deny}},
		{"nosys", Rule{Names: []string{"read"}, Action: NoSys}},
		{"ignore", Rule{Names: []string{"read"}, Action: Ignore}},
		{"argument check", Rule{Names: []string{"read"}, Action: Allow, When: cond, Else: Deny}},
		{"cases", Rule{Names: []string{"read"}, Cases: []Case{{Action: Allow, When: cond}}, Else: Deny}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if explained(tt.rule) {
				t.Errorf("got explained, want a missing comment caught")
			}
		})
	}
}

func TestDefaultFitsKernel(t *testing.T) {
	prog := compileDefault(t)
	if len(prog) > bpf.MaxInstructions {
		t.Errorf("got %d instructions, want at most %d", len(prog), bpf.MaxInstructions)
	}
	t.Logf("default policy: %d instructions", len(prog))
}

func BenchmarkCompile(b *testing.B) {
	p := Default()
	for b.Loop() {
		if _, err := Compile(p); err != nil {
			b.Fatal(err)
		}
	}
}
