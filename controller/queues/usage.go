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

// Charged is the use the fair-share order weighs for a queue of decayed
// use hours that holds holding GPU-equivalents now: its decayed use plus
// what it holds over one mean life of the decay (half_life/ln 2, the
// decayed use it would settle at holding that), in GPU-equivalent-hours.
// Decayed use alone lags the order's own admissions, for a run adds to
// it only as it runs: a queue below its share took every GPU that freed
// until its use caught up, then the other did, and the lower weight ran
// 1 to 3 points over its share (Kueue's admission fair sharing charges
// use at admission, its entry penalty, for the same reason).
func Charged(hours, holding float64, halfLife time.Duration) float64 {
	return hours + holding*halfLife.Hours()/math.Ln2
}
