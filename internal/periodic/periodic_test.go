package periodic

import (
	"context"
	"testing"
	"time"
)

func TestStream(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	ch := Stream(ctx, time.Millisecond, func() int { n++; return n })
	for want := 1; want <= 3; want++ {
		if got := <-ch; got != want {
			t.Fatalf("value %d, want %d", got, want)
		}
	}
	cancel()
	for range ch {
		// Drains what was in flight; the channel must then close.
	}
}
