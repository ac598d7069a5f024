package egress

import (
	"errors"
	"os"
	"testing"
)

// TestInNetnsRefusesHostNamespace: a process that is in the host's own
// network namespace (a sandbox whose pid 1 has not made its own yet) gets no
// bind there.
func TestInNetnsRefusesHostNamespace(t *testing.T) {
	called := false
	err := inNetns(os.Getpid(), func() error { called = true; return nil })
	if !errors.Is(err, errHostNamespace) {
		t.Errorf("got %v, want errHostNamespace", err)
	}
	if called {
		t.Error("bind ran in the host's network namespace")
	}
}
