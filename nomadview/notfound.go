package nomadview

import (
	"errors"
	"net/http"

	"github.com/hashicorp/nomad/api"
)

// ErrNotFound is what IsNotFound matches: errors.Is(err, ErrNotFound)
// holds for a NotFoundError.
var ErrNotFound = errors.New("not found in Nomad")

// NotFoundError wraps a Nomad API error that answered 404.
type NotFoundError struct{ Err error }

func (e *NotFoundError) Error() string        { return e.Err.Error() }
func (e *NotFoundError) Unwrap() error        { return e.Err }
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// NotFound wraps err in a NotFoundError when Nomad answered it with 404,
// so errors.Is(err, ErrNotFound) holds; other errors are returned as they
// are.
func NotFound(err error) error {
	if err != nil && StatusCode(err) == http.StatusNotFound {
		return &NotFoundError{Err: err}
	}
	return err
}

// IsNotFound says whether err is Nomad's answer that what was asked for
// does not exist: an api.UnexpectedResponseError with status 404 (read from
// its typed status code, never from its text), a NotFoundError, or
// api.ErrVariablePathNotFound.
func IsNotFound(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrNotFound), errors.Is(err, api.ErrVariablePathNotFound):
		return true
	}
	return StatusCode(err) == http.StatusNotFound
}

// StatusCode is the HTTP status of a Nomad API error, 0 when err carries
// none. The api package returns UnexpectedResponseError by value or by
// pointer depending on the call.
func StatusCode(err error) int {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) && ue.HasStatusCode() {
		return ue.StatusCode()
	}
	var uep *api.UnexpectedResponseError
	if errors.As(err, &uep) && uep != nil && uep.HasStatusCode() {
		return uep.StatusCode()
	}
	return 0
}
