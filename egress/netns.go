package egress

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netns"

	"github.com/brig-sandbox/brig/internal/osthread"
)

// errHostNamespace is inNetns's error for a process in the host's own network
// namespace.
var errHostNamespace = errors.New("not in a network namespace of its own")

// inNetns runs bind with the calling OS thread in the network namespace of
// process pid, so that the sockets bind makes live there, and returns the
// thread to the host's namespace. Sockets keep the namespace they were made
// in, so they are served from ordinary goroutines afterwards, and dials from
// ordinary goroutines leave from the host.
//
// It runs on a thread of its own (osthread.Run, never the main thread): if the
// thread cannot be returned to the host's namespace, it ends, so no other
// goroutine ever runs in the run's namespace by accident.
func inNetns(pid int, bind func() error) error {
	return osthread.Run(func() (bool, error) {
		host, err := netns.Get()
		if err != nil {
			return false, fmt.Errorf("opening the host's network namespace: %w", err)
		}
		defer host.Close()
		target, err := netns.GetFromPid(pid)
		if err != nil {
			return false, fmt.Errorf("opening the network namespace of pid %d: %w", pid, err)
		}
		defer target.Close()
		// A sandbox whose pid 1 has not yet made its network namespace (jail's
		// reaper makes its own) is in the host's: the run's servers must never
		// be bound there.
		if target.Equal(host) {
			return false, fmt.Errorf("pid %d is in the host's network namespace: %w", pid, errHostNamespace)
		}
		if err := netns.Set(target); err != nil {
			// setns failing leaves the thread where it was; discard it anyway,
			// it costs a thread and proves nothing.
			return true, fmt.Errorf("entering the network namespace of pid %d: %w", pid, err)
		}
		bindErr := bind()
		if err := netns.Set(host); err != nil {
			return true, fmt.Errorf("returning to the host's network namespace (the thread is discarded): %w", err)
		}
		return false, bindErr
	})
}
