package cgroup

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestParseMode(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Mode
		wantErr error
	}{
		{name: "v2", in: "v2", want: ModeUnified},
		{name: "v1", in: "v1", want: ModeLegacy},
		{name: "hybrid", in: "hybrid", want: ModeHybrid},
		{name: "detect", in: "detect", want: ModeDetect},
		{name: "unset key", in: "", want: ModeDetect},
		{name: "wrong case", in: "V2", wantErr: ErrInvalid},
		{name: "kernel name", in: "cgroup2", wantErr: ErrInvalid},
		{name: "padded", in: " v1", wantErr: ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMode(tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ParseMode(%q) error: got %v, want %v", tt.in, err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Errorf("ParseMode(%q): got %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestModeString(t *testing.T) {
	tests := []struct {
		name string
		mode Mode
		want string
	}{
		{name: "unified", mode: ModeUnified, want: "v2"},
		{name: "legacy", mode: ModeLegacy, want: "v1"},
		{name: "hybrid", mode: ModeHybrid, want: "hybrid"},
		{name: "zero", mode: ModeDetect, want: "detect"},
		{name: "unknown", mode: Mode(42), want: "Mode(42)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.mode.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if back, err := ParseMode(tt.mode.String()); err == nil && back != tt.mode {
				t.Errorf("ParseMode(String()): got %v, want %v", back, tt.mode)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{name: "zero is the defaults", cfg: Config{}},
		{name: "nested parent", cfg: Config{Parent: "system.slice/brig.service"}},
		{name: "forced mode", cfg: Config{Mode: ModeHybrid}},
		{name: "relative root", cfg: Config{MountRoot: "sys/fs/cgroup"}, wantErr: true},
		{name: "unclean root", cfg: Config{MountRoot: "/sys/fs/cgroup/"}, wantErr: true},
		{name: "absolute parent", cfg: Config{Parent: "/brig"}, wantErr: true},
		{name: "parent escapes", cfg: Config{Parent: "../brig"}, wantErr: true},
		{name: "parent is the root", cfg: Config{Parent: "."}, wantErr: true},
		{name: "unclean parent", cfg: Config{Parent: "a//b"}, wantErr: true},
		{name: "parent with a newline", cfg: Config{Parent: "a\nb"}, wantErr: true},
		{name: "parent with a space", cfg: Config{Parent: "a b"}},
		{name: "unknown mode", cfg: Config{Mode: Mode(7)}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.withDefaults().validate()
			if got := err != nil; got != tt.wantErr {
				t.Fatalf("validate(%+v): got error %v, want error %v", tt.cfg, err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("got %v, want it to wrap ErrInvalid", err)
			}
		})
	}
}

func TestValidateName(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr bool
	}{
		{name: "run id", in: "run-01HZX3_a.b"},
		{name: "longest", in: strings.Repeat("a", maxNameLen)},
		{name: "empty", in: "", wantErr: true},
		{name: "too long", in: strings.Repeat("a", maxNameLen+1), wantErr: true},
		{name: "slash", in: "a/b", wantErr: true},
		{name: "dot dot", in: "..", wantErr: true},
		{name: "hidden", in: ".x", wantErr: true},
		{name: "space", in: "a b", wantErr: true},
		{name: "newline", in: "a\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateName(tt.in)
			if got := err != nil; got != tt.wantErr {
				t.Fatalf("validateName(%q): got error %v, want error %v", tt.in, err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("got %v, want it to wrap ErrInvalid", err)
			}
		})
	}
}

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		name      string
		limits    Limits
		wantErr   bool
		wantMsg   string
		wantQuota int64
	}{
		{name: "none", limits: Limits{}},
		{name: "one cpu", limits: Limits{CPUs: 1}, wantQuota: 100_000},
		{name: "half a cpu", limits: Limits{CPUs: 0.5}, wantQuota: 50_000},
		{name: "two and a half", limits: Limits{CPUs: 2.5}, wantQuota: 250_000},
		{name: "kernel minimum", limits: Limits{CPUs: 0.01}, wantQuota: 1_000},
		{name: "below kernel minimum", limits: Limits{CPUs: 0.005}, wantErr: true},
		{name: "negative memory", limits: Limits{MemoryBytes: -1}, wantErr: true},
		{name: "negative pids", limits: Limits{Pids: -1}, wantErr: true},
		{name: "negative cpus", limits: Limits{CPUs: -1}, wantErr: true},
		{name: "NaN cpus", limits: Limits{CPUs: math.NaN()}, wantErr: true},
		{name: "infinite cpus", limits: Limits{CPUs: math.Inf(1)}, wantErr: true},
		{name: "absurd cpus", limits: Limits{CPUs: 1e300}, wantErr: true, wantMsg: "absurdly large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limits.validate()
			if got := err != nil; got != tt.wantErr {
				t.Fatalf("validate(%+v): got error %v, want error %v", tt.limits, err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("got %v, want it to wrap ErrInvalid", err)
			}
			if err != nil && !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("got %v, want it to say %q", err, tt.wantMsg)
			}
			if err == nil && tt.limits.cpuQuota() != tt.wantQuota {
				t.Errorf("cpuQuota: got %d, want %d", tt.limits.cpuQuota(), tt.wantQuota)
			}
		})
	}
}
