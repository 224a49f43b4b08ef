// Package periodic runs the plugins' streams that Nomad reads at its own
// pace: one value at once, then one per interval, until the reader goes.
package periodic

import (
	"context"
	"time"
)

// Stream sends next() on the returned channel at once and then every
// interval, until ctx ends; it closes the channel then. A value waits for
// the reader: a slow one delays the next sample instead of piling them up.
func Stream[T any](ctx context.Context, interval time.Duration, next func() T) <-chan T {
	out := make(chan T, 1)
	go func() {
		defer close(out)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case out <- next():
			case <-ctx.Done():
				return
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
