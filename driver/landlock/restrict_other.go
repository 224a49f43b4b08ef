//go:build !linux

package landlock

import (
	"errors"
	"fmt"
	"runtime"
)

var errNotLinux = fmt.Errorf("landlock unavailable: %s is not Linux: %w", runtime.GOOS, errors.ErrUnsupported)

// Status reports that there is no Landlock off Linux.
func Status() (abi int, err error) { return 0, errNotLinux }

// RestrictThread fails off Linux: nothing can be enforced.
func RestrictThread(rules []Rule, _ Options) (skipped []string, err error) {
	for _, r := range rules {
		if err := r.validate(); err != nil {
			return nil, err
		}
	}
	return nil, errNotLinux
}
