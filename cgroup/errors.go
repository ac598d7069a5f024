package cgroup

import (
	"errors"
	"fmt"
)

// States callers branch on. Test them with errors.Is; the messages carry the
// details.
var (
	// ErrInvalid: a Config, Limits or group name failed validation.
	ErrInvalid = errors.New("invalid cgroup request")
	// ErrExists: Create was given the name of a group that already exists.
	ErrExists = errors.New("cgroup already exists")
	// ErrDeleted: the Group was already deleted.
	ErrDeleted = errors.New("cgroup already deleted")
	// ErrBusy: processes were still inside the group when the bounded wait for
	// them to die ran out.
	ErrBusy = errors.New("cgroup still has processes")
	// ErrNoCgroups: no usable cgroup filesystem is mounted at the mount root,
	// or it does not match the configured Mode.
	ErrNoCgroups = errors.New("no usable cgroup filesystem")
	// ErrControllerUnavailable: a limit was asked for whose controller this host
	// does not offer. The error is a *ControllerError naming the controller.
	ErrControllerUnavailable = errors.New("cgroup controller unavailable")
)

// ControllerError says which controller a limit needed and where it looked. It
// matches ErrControllerUnavailable under errors.Is.
type ControllerError struct {
	// Controller is the missing controller, such as "memory", or "memory swap
	// accounting" when the host swaps but cannot limit it.
	Controller string
	// Mode and Root say which hierarchy was looked at.
	Mode Mode
	Root string
	// Hint is an extra remedy, empty when `brig check` is all there is to say.
	Hint string
}

func (e *ControllerError) Error() string {
	hint := e.Hint
	if hint == "" {
		hint = "run `brig check` to see what this host supports"
	}
	return fmt.Sprintf("cgroup controller %q is not available in the %s hierarchy at %s, so its limit cannot be enforced (Hint: %s)",
		e.Controller, e.Mode, e.Root, hint)
}

// Is makes errors.Is(err, ErrControllerUnavailable) true.
func (e *ControllerError) Is(target error) bool { return target == ErrControllerUnavailable }
