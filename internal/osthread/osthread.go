// Package osthread runs a function on an OS thread of its own, for work that
// may leave the thread in a state no other goroutine may inherit: another
// mount or network namespace, another root. Such a thread must end with its
// goroutine, and it must never be the process's main thread, whose end leaves
// the process's /proc/self pointing at a zombie (the process then reads no
// mount table, no cgroup, no file descriptor of its own).
//
// Typical use:
//
//	err := osthread.Run(func() (bool, error) {
//		if err := unix.Setns(fd, unix.CLONE_NEWNS); err != nil {
//			return false, err // the thread is as it was: it may be reused
//		}
//		return true, attach() // tainted: the thread ends
//	})
package osthread

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Run calls f on a locked OS thread other than the main thread. f reports
// whether it left the thread tainted: a tainted thread ends with f's goroutine,
// a clean one goes back to the scheduler.
func Run(f func() (tainted bool, err error)) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			tainted, err := f()
			if !tainted {
				runtime.UnlockOSThread()
			}
			done <- err // tainted: exits locked, and the thread ends
			return
		}
		// On the main thread: while this goroutine holds it, f runs on
		// another thread.
		inner := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			tainted, err := f()
			if !tainted {
				runtime.UnlockOSThread()
			}
			inner <- err
		}()
		err := <-inner
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}
