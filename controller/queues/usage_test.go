package queues

import (
	"math"
	"testing"
	"time"
)

// Decayed use on hand-computed cases: U·2^(−Δ/h) + r·(h/ln 2)·(1 − 2^(−Δ/h)).
func TestUsageAdvance(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name string
		from Usage
		rate float64
		d, h time.Duration
		want float64
	}{
		{"2 GPUs for one half-life of an hour: 2·(1/ln 2)·(1/2)", Usage{At: t0}, 2, time.Hour, time.Hour, 1 / math.Ln2},
		{"4 GPU-hours, idle two half-lives: a quarter", Usage{Hours: 4, At: t0}, 0, 2 * time.Hour, time.Hour, 1},
		{"1 GPU for a minute of a week's half-life: about a minute", Usage{At: t0}, 1, time.Minute, DefaultHalfLife,
			(DefaultHalfLife.Hours() / math.Ln2) * (1 - math.Exp2(-1.0/60/DefaultHalfLife.Hours()))},
		{"held for ever: rate·h/ln 2", Usage{At: t0}, 3, 100 * time.Hour, time.Hour, 3 / math.Ln2},
		{"no time passed", Usage{Hours: 5, At: t0}, 8, 0, time.Hour, 5},
	} {
		got := tc.from.Advance(t0.Add(tc.d), tc.rate, tc.h)
		if math.Abs(got.Hours-tc.want) > 1e-9 || !got.At.Equal(t0.Add(tc.d)) {
			t.Errorf("%s: %+v, want %g hours at %s", tc.name, got, tc.want, t0.Add(tc.d))
		}
	}
	// A zero Usage starts where it is first advanced.
	if u := (Usage{}).Advance(t0, 5, time.Hour); u.Hours != 0 || !u.At.Equal(t0) {
		t.Errorf("zero usage advanced: %+v", u)
	}
	// Steps of a constant rate add up to one step.
	step, whole := Usage{Hours: 2, At: t0}, Usage{Hours: 2, At: t0}.Advance(t0.Add(90*time.Minute), 1.5, 45*time.Minute)
	for i := 1; i <= 9; i++ {
		step = step.Advance(t0.Add(time.Duration(i)*10*time.Minute), 1.5, 45*time.Minute)
	}
	if math.Abs(step.Hours-whole.Hours) > 1e-9 {
		t.Errorf("nine steps %g, one step %g", step.Hours, whole.Hours)
	}
}

// Charged use on hand-computed cases: U + n·h/ln 2.
func TestCharged(t *testing.T) {
	for _, tc := range []struct {
		name           string
		hours, holding float64
		h              time.Duration
		want           float64
	}{
		{"nothing held: its decayed use", 3, 0, time.Hour, 3},
		{"2 held at a half-life of an hour: 2/ln 2 more", 1, 2, time.Hour, 1 + 2/math.Ln2},
		{"held for ever, it settles at twice its decayed use", 3 / math.Ln2, 3, time.Hour, 6 / math.Ln2},
	} {
		if got := Charged(tc.hours, tc.holding, tc.h); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %g, want %g", tc.name, got, tc.want)
		}
	}
}
