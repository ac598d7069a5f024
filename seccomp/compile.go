package seccomp

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"os"
	"slices"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/brig-sandbox/brig/seccomp/bpf"
)

// Program is a compiled filter (bpf.Program): Compile needs cgo and
// libseccomp, the program does not, and a sandbox's init loads it with package
// bpf alone.
type Program = bpf.Program

var (
	// ErrInvalidPolicy is returned by Compile for a policy that breaks a rule of
	// the Policy type.
	ErrInvalidPolicy = errors.New("invalid seccomp policy")
)

const (
	// maxBranchesPerCall bounds the libseccomp rules one call's conditions expand
	// to, so that a careless Cond cannot blow the program past bpf.MaxInstructions.
	// Default's largest is socket, whose per-family protocols expand to 97
	// (about 310 instructions, reached only by socket(2) calls).
	maxBranchesPerCall = 128
	// optimizeBinaryTree is libseccomp's SCMP_FLTATR_CTL_OPTIMIZE level 2: the
	// filter finds the call number by binary search instead of comparing it with
	// every rule in turn, so a call costs about log2(#calls) jumps, not hundreds.
	optimizeBinaryTree = 2
)

// Log field names.
const (
	logKeyLibseccomp = "libseccomp"
	logKeyErr        = "err"
)

// Compile turns p into a filter for the native architecture (x86_64) with
// libseccomp. Calls from any other architecture the CPU can run, i386 through
// int 0x80 and x32 (call numbers with bit 0x40000000 set, which the kernel
// reports as x86_64), kill the whole process: a program has no business switching
// ABI, and the table's numbers mean other calls there.
//
// Compile needs cgo and libseccomp; the program it returns does not, so the
// supervisor compiles and the sandbox's init only Loads.
func Compile(p Policy) (Program, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	f, err := libseccomp.NewFilter(p.Default.libseccomp())
	if err != nil {
		return nil, fmt.Errorf("creating libseccomp filter: %w", err)
	}
	defer f.Release()
	if err := f.SetBadArchAction(libseccomp.ActKillProcess); err != nil {
		return nil, fmt.Errorf("setting the foreign-architecture action: %w", err)
	}
	// libseccomp never loads this filter (Load does), so it must not try to set
	// no_new_privs either.
	if err := f.SetNoNewPrivsBit(false); err != nil {
		return nil, fmt.Errorf("clearing libseccomp's no_new_privs attribute: %w", err)
	}
	if err := f.SetOptimize(optimizeBinaryTree); err != nil {
		// Still correct, only slower: say so rather than fail every run.
		major, minor, micro := libseccomp.GetLibraryVersion()
		slog.Warn("seccomp: libseccomp cannot build a binary-tree filter (needs 2.5); using a linear one",
			logKeyLibseccomp, fmt.Sprintf("%d.%d.%d", major, minor, micro), logKeyErr, err)
	}
	for _, r := range p.Rules {
		branches, err := r.branches()
		if err != nil {
			return nil, err
		}
		for _, name := range r.Names {
			call, err := libseccomp.GetSyscallFromName(name)
			if err != nil {
				return nil, fmt.Errorf("resolving system call %q (%v): %w", name, err, ErrInvalidPolicy)
			}
			for _, b := range branches {
				if b.action == p.Default {
					// libseccomp refuses a rule that repeats the default
					// action; the call falls through to it all the same.
					continue
				}
				if err := b.add(f, call); err != nil {
					return nil, fmt.Errorf("adding rule for %s: %w", name, err)
				}
			}
		}
	}
	raw, err := exportBPF(f)
	if err != nil {
		return nil, err
	}
	prog, err := bpf.Unmarshal(raw)
	if err != nil {
		return nil, fmt.Errorf("reading libseccomp's program: %w", err)
	}
	return prog, nil
}

// exportBPF has libseccomp write the program into a memfd and reads it back.
// libseccomp 2.5 (Debian 12) has no export to memory.
func exportBPF(f *libseccomp.ScmpFilter) ([]byte, error) {
	fd, err := unix.MemfdCreate("brig-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("creating memfd for the filter: %w", err)
	}
	file := os.NewFile(uintptr(fd), "brig-seccomp")
	defer file.Close()
	if err := f.ExportBPF(file); err != nil {
		return nil, fmt.Errorf("exporting filter: %w", err)
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("rewinding filter memfd: %w", err)
	}
	raw, err := io.ReadAll(file)
	if err != nil {
		return nil, fmt.Errorf("reading filter memfd: %w", err)
	}
	return raw, nil
}

func (a Action) libseccomp() libseccomp.ScmpAction {
	switch a {
	case Allow:
		return libseccomp.ActAllow
	case Deny:
		return libseccomp.ActErrno.SetReturnCode(int16(unix.EPERM))
	case NoSys:
		return libseccomp.ActErrno.SetReturnCode(int16(unix.ENOSYS))
	case Ignore:
		// The kernel skips the call and returns -0: success, nothing done.
		return libseccomp.ActErrno.SetReturnCode(0)
	}
	// validate rejects every other value before libseccomp sees it.
	panic(fmt.Sprintf("seccomp: unvalidated action %v", a))
}

// validate runs the small checks that make a policy compilable and unambiguous.
func (p Policy) validate() error {
	if !p.Default.valid() {
		return fmt.Errorf("checking policy: default action %v: %w", p.Default, ErrInvalidPolicy)
	}
	seen := map[string]int{}
	for i, r := range p.Rules {
		if err := r.validate(); err != nil {
			return fmt.Errorf("checking policy: rule %d %v: %w", i, r.Names, err)
		}
		for _, n := range r.Names {
			if j, dup := seen[n]; dup {
				return fmt.Errorf("checking policy: %s is in rules %d and %d, a call belongs in one: %w", n, j, i, ErrInvalidPolicy)
			}
			seen[n] = i
		}
	}
	return nil
}

func (r Rule) validate() error {
	switch {
	case len(r.Names) == 0:
		return fmt.Errorf("names no call: %w", ErrInvalidPolicy)
	case len(r.When) > 0 && len(r.Cases) > 0:
		return fmt.Errorf("has both When and Cases: %w", ErrInvalidPolicy)
	case len(r.Cases) > 0:
		return r.validateCases()
	case !r.Action.valid():
		return fmt.Errorf("action %v: %w", r.Action, ErrInvalidPolicy)
	case len(r.When) == 0 && r.Else != actionUnset:
		return fmt.Errorf("has Else %v but no When: %w", r.Else, ErrInvalidPolicy)
	case len(r.When) > 0 && (!r.Else.valid() || r.Else == r.Action):
		return fmt.Errorf("Else %v must be a valid action other than Action %v: %w", r.Else, r.Action, ErrInvalidPolicy)
	}
	if err := validateConds(r.When); err != nil {
		return err
	}
	return checkGuardMasks(r.Action, r.Else, r.When)
}

// checkGuardMasks refuses a check that guards a call (an action other than
// Allow when it holds, Allow when not) with an In condition on all 64 bits:
// a caller would dodge it by setting bits the kernel does not read, as NotIn's
// Mask rule says of denylists.
func checkGuardMasks(action, otherwise Action, when []Cond) error {
	if action == Allow || otherwise != Allow {
		return nil
	}
	for _, c := range when {
		if c.Op == In && c.Mask == 0 {
			return fmt.Errorf("argument %d: an in check that guards the call (%v when it holds, allow when not) with no Mask: give the bits the kernel reads (lowWord for an int; ^0 for a 64-bit argument): %w", c.Arg, action, ErrInvalidPolicy)
		}
	}
	return nil
}

func (r Rule) validateCases() error {
	if r.Action != actionUnset {
		return fmt.Errorf("has Action %v and Cases (each case has its action): %w", r.Action, ErrInvalidPolicy)
	}
	if !r.Else.valid() {
		return fmt.Errorf("Else %v with Cases: %w", r.Else, ErrInvalidPolicy)
	}
	differs := false
	for i, c := range r.Cases {
		if !c.Action.valid() {
			return fmt.Errorf("case %d: action %v: %w", i, c.Action, ErrInvalidPolicy)
		}
		if len(c.When) == 0 {
			return fmt.Errorf("case %d: no conditions (a case that always holds is Else): %w", i, ErrInvalidPolicy)
		}
		if err := validateConds(c.When); err != nil {
			return fmt.Errorf("case %d: %w", i, err)
		}
		if err := checkGuardMasks(c.Action, r.Else, c.When); err != nil {
			return fmt.Errorf("case %d: %w", i, err)
		}
		// A case with Else's action is an exception carved out of a later
		// case; but if every case has it, the rule is unconditional.
		differs = differs || c.Action != r.Else
	}
	if !differs {
		return fmt.Errorf("every case has Else's action %v: %w", r.Else, ErrInvalidPolicy)
	}
	return nil
}

func validateConds(when []Cond) error {
	var args [6]bool
	for _, c := range when {
		if c.Arg < 0 || c.Arg >= len(args) {
			return fmt.Errorf("argument %d out of 0..5: %w", c.Arg, ErrInvalidPolicy)
		}
		if args[c.Arg] {
			return fmt.Errorf("argument %d checked twice (libseccomp compares an argument once per rule): %w", c.Arg, ErrInvalidPolicy)
		}
		args[c.Arg] = true
		if err := c.validate(); err != nil {
			return fmt.Errorf("argument %d: %w", c.Arg, err)
		}
	}
	return nil
}

func (c Cond) validate() error {
	if c.Op != In && c.Op != NotIn {
		return fmt.Errorf("op %v: %w", c.Op, ErrInvalidPolicy)
	}
	if len(c.Values) == 0 {
		return fmt.Errorf("no values: %w", ErrInvalidPolicy)
	}
	if c.Op == NotIn && c.Mask == 0 {
		// A denylist compared on all 64 bits is dodged by setting bits the
		// kernel does not read (an int's high word): its Mask is required.
		return fmt.Errorf("a not-in check with no Mask: give the bits the kernel reads (lowWord for an int; ^0 for a 64-bit argument): %w", ErrInvalidPolicy)
	}
	for i, v := range c.Values {
		if v&^c.mask() != 0 {
			return fmt.Errorf("value %#x has bits outside mask %#x, so never matches: %w", v, c.mask(), ErrInvalidPolicy)
		}
		if slices.Contains(c.Values[:i], v) {
			return fmt.Errorf("value %#x listed twice: %w", v, ErrInvalidPolicy)
		}
	}
	return nil
}

// A comparison is one libseccomp check of one argument.
type comparison struct {
	arg   uint
	op    libseccomp.ScmpCompareOp
	mask  uint64 // for CompareMaskedEqual only
	value uint64
}

// A branch is one libseccomp rule: the action when all its comparisons hold.
type branch struct {
	action Action
	cmps   []comparison
}

func (b branch) add(f *libseccomp.ScmpFilter, call libseccomp.ScmpSyscall) error {
	if len(b.cmps) == 0 {
		return f.AddRuleExact(call, b.action.libseccomp())
	}
	conds := make([]libseccomp.ScmpCondition, 0, len(b.cmps))
	for _, c := range b.cmps {
		vals := []uint64{c.value}
		if c.op == libseccomp.CompareMaskedEqual {
			vals = []uint64{c.mask, c.value}
		}
		cond, err := libseccomp.MakeCondition(c.arg, c.op, vals...)
		if err != nil {
			return fmt.Errorf("making condition on argument %d: %w", c.arg, err)
		}
		conds = append(conds, cond)
	}
	return f.AddRuleConditionalExact(call, b.action.libseccomp(), conds)
}

// branches expands r into libseccomp rules that never overlap, so that no
// argument values match two rules with different actions. libseccomp has no
// "otherwise" and resolves overlaps by merging its decision tree, which is not a
// semantics to review a sandbox by.
//
// The expansion keeps a list of open conjunctions: disjoint sets of comparisons
// that together match exactly the calls no earlier case took (at first, one
// empty conjunction: every call). A case with conditions C1..Cn splits each
// open conjunction into the part where all of C1..Cn hold, which gets the
// case's action, and for each k the part where C1..Ck-1 hold and Ck fails,
// which stays open for the next case. What is open after the last case gets
// Else. Each "holds" or "fails" is itself a set of disjoint single-argument
// comparisons (see Cond.hits and Cond.misses); adding one to a conjunction that
// already compares the same argument intersects the two (see intersect), since
// libseccomp compares an argument once per rule.
func (r Rule) branches() ([]branch, error) {
	cases := r.cases()
	if len(cases) == 0 {
		return []branch{{action: r.Action}}, nil
	}
	var out []branch
	open := [][]comparison{nil}
	for _, c := range cases {
		var next [][]comparison
		for _, conj := range open {
			holds := [][]comparison{conj} // all ways for the conditions so far to hold
			for _, cond := range c.When {
				hits, misses := cond.hits(), cond.misses()
				if cond.Op == NotIn {
					hits, misses = misses, hits
				}
				fails, err := cross(holds, misses)
				if err != nil {
					return nil, fmt.Errorf("rule %v: %w", r.Names, err)
				}
				next = append(next, fails...)
				if holds, err = cross(holds, hits); err != nil {
					return nil, fmt.Errorf("rule %v: %w", r.Names, err)
				}
			}
			for _, cmps := range holds {
				out = append(out, branch{action: c.Action, cmps: cmps})
			}
			if len(out)+len(next) > maxBranchesPerCall {
				return nil, fmt.Errorf("rule %v: conditions expand to over %d libseccomp rules per call: %w",
					r.Names, maxBranchesPerCall, ErrInvalidPolicy)
			}
		}
		open = next
	}
	for _, cmps := range open {
		out = append(out, branch{action: r.Else, cmps: cmps})
	}
	return out, nil
}

// cross is every conjunction of prefixes extended with every one of cmps, the
// empty ones (an argument that cannot meet both comparisons) left out.
func cross(prefixes [][]comparison, cmps []comparison) ([][]comparison, error) {
	var out [][]comparison
	for _, p := range prefixes {
		for _, c := range cmps {
			ext, err := and(p, c)
			if err != nil {
				return nil, err
			}
			out = append(out, ext...)
		}
	}
	return out, nil
}

// and is the conjunction conj ∧ c as disjoint conjunctions, each comparing an
// argument at most once.
func and(conj []comparison, c comparison) ([][]comparison, error) {
	i := slices.IndexFunc(conj, func(x comparison) bool { return x.arg == c.arg })
	if i < 0 {
		return [][]comparison{append(slices.Clip(conj), c)}, nil
	}
	parts, err := intersect(conj[i], c)
	if err != nil {
		return nil, err
	}
	out := make([][]comparison, 0, len(parts))
	for _, p := range parts {
		ext := slices.Clone(conj)
		ext[i] = p
		out = append(out, ext)
	}
	return out, nil
}

// intersect is the set of argument values both a and b (on the same argument)
// match, as disjoint comparisons: none if they share no value. A less-than or
// greater-than meeting a partial mask is first cut into aligned blocks, each a
// masked comparison, since two masked comparisons always meet in one.
func intersect(a, b comparison) ([]comparison, error) {
	if a.op == libseccomp.CompareEqual || b.op == libseccomp.CompareEqual {
		eq, other := a, b
		if eq.op != libseccomp.CompareEqual {
			eq, other = b, a
		}
		if other.matches(eq.value) {
			return []comparison{eq}, nil
		}
		return nil, nil
	}
	ranged := func(c comparison) bool {
		return c.op == libseccomp.CompareLess || c.op == libseccomp.CompareGreater
	}
	switch {
	case a.op == libseccomp.CompareMaskedEqual && b.op == libseccomp.CompareMaskedEqual:
		if (a.value^b.value)&a.mask&b.mask != 0 {
			return nil, nil
		}
		return []comparison{block(a.arg, a.mask|b.mask, a.value|b.value)}, nil
	case ranged(a) && ranged(b):
		lo, hi := max(a.lowest(), b.lowest()), min(a.highest(), b.highest())
		switch {
		case lo > hi:
			return nil, nil
		case lo == 0: // a or b is Less and the other no tighter
			return []comparison{{arg: a.arg, op: libseccomp.CompareLess, value: hi + 1}}, nil
		case hi == ^uint64(0):
			return []comparison{{arg: a.arg, op: libseccomp.CompareGreater, value: lo - 1}}, nil
		}
		return blocks(a.arg, lo, hi), nil
	case ranged(a) && b.op == libseccomp.CompareMaskedEqual, ranged(b) && a.op == libseccomp.CompareMaskedEqual:
		r, m := a, b
		if !ranged(r) {
			r, m = b, a
		}
		var out []comparison
		for _, blk := range blocks(r.arg, r.lowest(), r.highest()) {
			parts, err := intersect(blk, m)
			if err != nil {
				return nil, err
			}
			out = append(out, parts...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("intersecting comparisons %v and %v of argument %d: %w", a.op, b.op, a.arg, ErrInvalidPolicy)
}

// lowest and highest bound the values a less-than or greater-than comparison
// matches.
func (c comparison) lowest() uint64 {
	if c.op == libseccomp.CompareGreater {
		return c.value + 1
	}
	return 0
}

func (c comparison) highest() uint64 {
	if c.op == libseccomp.CompareLess {
		return c.value - 1
	}
	return ^uint64(0)
}

// matches evaluates a comparison the way the compiled filter does.
func (c comparison) matches(x uint64) bool {
	switch c.op {
	case libseccomp.CompareEqual:
		return x == c.value
	case libseccomp.CompareLess:
		return x < c.value
	case libseccomp.CompareGreater:
		return x > c.value
	case libseccomp.CompareMaskedEqual:
		return x&c.mask == c.value
	}
	panic("comparison op the expansion never emits: " + c.op.String())
}

// hits are disjoint comparisons that together match exactly the argument values
// whose masked value is one of c.Values.
func (c Cond) hits() []comparison {
	out := make([]comparison, 0, len(c.Values))
	for _, v := range c.Values {
		out = append(out, c.block(c.mask(), v))
	}
	return out
}

// misses are disjoint comparisons that together match exactly the argument
// values whose masked value is none of c.Values.
func (c Cond) misses() []comparison {
	vals := slices.Sorted(slices.Values(c.Values))
	if c.mask() == ^uint64(0) {
		return c.rangeMisses(vals)
	}
	// With a partial mask, walk the mask's bits from the top as a binary trie of
	// the values: a subtree that holds no value is one masked comparison
	// (arg & bits so far == prefix). That is at most popcount(mask) per value.
	var out []comparison
	var walk func(rest, known, prefix uint64, vals []uint64)
	walk = func(rest, known, prefix uint64, vals []uint64) {
		if len(vals) == 0 {
			out = append(out, c.block(known, prefix))
			return
		}
		if rest == 0 {
			return // prefix is one of the values
		}
		bit := uint64(1) << (63 - bits.LeadingZeros64(rest))
		var zero, one []uint64
		for _, v := range vals {
			if v&bit == 0 {
				zero = append(zero, v)
			} else {
				one = append(one, v)
			}
		}
		walk(rest&^bit, known|bit, prefix, zero)
		walk(rest&^bit, known|bit, prefix|bit, one)
	}
	walk(c.mask(), 0, 0, vals)
	return out
}

// rangeMisses covers the gaps around the sorted whole-register values: below the
// first, above the last, and each gap between as aligned power-of-two blocks.
func (c Cond) rangeMisses(vals []uint64) []comparison {
	arg := uint(c.Arg)
	var out []comparison
	if vals[0] > 0 {
		out = append(out, comparison{arg: arg, op: libseccomp.CompareLess, value: vals[0]})
	}
	for i := 0; i+1 < len(vals); i++ {
		if vals[i]+1 < vals[i+1] {
			out = append(out, blocks(arg, vals[i]+1, vals[i+1]-1)...)
		}
	}
	if last := vals[len(vals)-1]; last < ^uint64(0) {
		out = append(out, comparison{arg: arg, op: libseccomp.CompareGreater, value: last})
	}
	return out
}

// blocks covers lo..hi inclusive with aligned power-of-two blocks, each one
// masked comparison: at most two per bit of the register.
func blocks(arg uint, lo, hi uint64) []comparison {
	var out []comparison
	for {
		size := lo & -lo // the largest block aligned at lo; zero means 2^64
		for size-1 > hi-lo || size == 0 && hi-lo != ^uint64(0) {
			if size == 0 {
				size = 1 << 63
			} else {
				size >>= 1
			}
		}
		out = append(out, block(arg, ^(size-1), lo))
		if hi-lo == size-1 {
			return out
		}
		lo += size
	}
}

// block is the comparison arg & mask == value, written as plain equality when
// mask is the whole register.
func (c Cond) block(mask, value uint64) comparison { return block(uint(c.Arg), mask, value) }

func block(arg uint, mask, value uint64) comparison {
	if mask == ^uint64(0) {
		return comparison{arg: arg, op: libseccomp.CompareEqual, value: value}
	}
	return comparison{arg: arg, op: libseccomp.CompareMaskedEqual, mask: mask, value: value}
}
