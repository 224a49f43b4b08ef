//go:build !unix

package sim

import "sync"

var writeMu sync.Mutex

// lockFile only serializes writers of this process where flock is missing.
func lockFile(string) (func(), error) {
	writeMu.Lock()
	return writeMu.Unlock, nil
}
