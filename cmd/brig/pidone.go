package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// runAsPIDOne is main's when brig is the first process of its pid namespace,
// as a container's entrypoint is (the DaemonSet's, without an init of the
// pod's): such a process inherits every orphan of the namespace, and the
// Go runtime reaps only the children it started. A warm Python sandbox's
// program, whose parent is its zygote, became brig's when the zygote died at
// a stop; left a zombie, it kept its sandbox's pid 1 from exiting (a pid
// namespace's init waits for every process of it to be reaped), and brig
// waited for that init forever: a SIGTERM never ended the service. So brig
// runs as the child of a minimal init: this process starts it, passes it the
// signals it gets, reaps every process that becomes its own, and exits with
// brig's status once brig has exited. It returns that status.
func runAsPIDOne() int {
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "brig: starting brig under its own init (it is pid 1 here): %v\n", err)
		return 1
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "brig: waiting as pid 1: %v\n", err)
			return 1
		}
		if pid != cmd.Process.Pid {
			continue // an orphan, reaped
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}
