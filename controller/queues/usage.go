package queues

import (
	"math"
	"time"
)

// Usage is a queue's decayed use, Slurm's fair-share usage: the
// GPU-equivalent-hours it held, each hour counting half as much every
// half-life since, as of At.
type Usage struct {
	Hours float64
	At    time.Time
}

// Advance is u carried to now, the queue having held rate
// GPU-equivalents since u.At: U·2^(−Δ/h) + rate·(h/ln 2)·(1 − 2^(−Δ/h)),
// exact for use held constant over Δ (the controller sees use between
// two ticks as constant). A zero u starts at now.
func (u Usage) Advance(now time.Time, rate float64, halfLife time.Duration) Usage {
	if u.At.IsZero() || !now.After(u.At) {
		if u.At.IsZero() {
			u.At = now
		}
		return u
	}
	h := halfLife.Hours()
	keep := math.Exp2(-now.Sub(u.At).Hours() / h)
	return Usage{Hours: u.Hours*keep + rate*h/math.Ln2*(1-keep), At: now}
}
