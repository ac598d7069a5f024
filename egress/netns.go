package egress

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// inNetns runs bind with the calling OS thread in the network namespace of
// process pid, so that the sockets bind makes live there, and returns the
// thread to the host's namespace. Sockets keep the namespace they were made
// in, so they are served from ordinary goroutines afterwards, and dials from
// ordinary goroutines leave from the host.
//
// It runs on a goroutine of its own, locked to its thread: if the thread
// cannot be returned to the host's namespace, the goroutine exits still
// locked and Go discards the thread, so no other goroutine ever runs in the
// run's namespace by accident.
func inNetns(pid int, bind func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		host, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread() // nothing was changed
			errc <- fmt.Errorf("opening the host's network namespace: %w", err)
			return
		}
		defer host.Close()
		target, err := netns.GetFromPid(pid)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("opening the network namespace of pid %d: %w", pid, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			// setns failing leaves the thread where it was; discard it anyway,
			// it costs a thread and proves nothing.
			errc <- fmt.Errorf("entering the network namespace of pid %d: %w", pid, err)
			return
		}
		bindErr := bind()
		if err := netns.Set(host); err != nil {
			errc <- fmt.Errorf("returning to the host's network namespace (the thread is discarded): %w", err)
			return // still locked: Go ends the thread with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- bindErr
	}()
	return <-errc
}
