package driver

import (
	"errors"
	"fmt"

	"github.com/nomad-gpu/nomad-gpu/driver/mps"
	"github.com/nomad-gpu/nomad-gpu/driver/supervisor"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// inputError is a start failure that comes from the jobspec or from what
// this node is, so restarting the task here cannot change the outcome.
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }

func badInput(format string, args ...any) error {
	return &inputError{msg: fmt.Sprintf(format, args...)}
}

// startFailure tells Nomad whether a restart may help: bad input, a
// command or working directory the task cannot use, or MPS missing on the
// node fail the same way every time; anything else (a slow log reader, fork
// limits, another user's MPS clients still on the GPU) may not, so the
// restart policy decides.
func startFailure(err error) error {
	var in *inputError
	var se *supervisor.StartError
	permanent := errors.As(err, &in) ||
		errors.As(err, &se) && se.Permanent ||
		errors.Is(err, mps.ErrUnavailable)
	return drivers.NewRecoverableError(err, !permanent)
}
