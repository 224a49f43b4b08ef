package sizing

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/internal/quantile"
)

// Thresholds are the rules' figures. A task's demand is its utilisation
// times its slice (in shares, GPUs or MIG compute slices), so samples taken
// at one size say what another size would see.
type Thresholds struct {
	MinSamples  int           // samples at the current size before any rule on utilisation speaks
	MinSpan     time.Duration // and the time they must cover
	Saturated   float64       // p95 utilisation (%) at or above which a slice is starved: grow ×2
	Idle        float64       // p95 utilisation (%) at or below which a slice is idle: shrink
	Target      float64       // utilisation (%) a shrunk slice should run at, at p95
	MemHeadroom float64       // peak memory may use at most this share of a smaller slice's limit
	FailedRuns  int           // runs of the last five ended by timeout that make it grow (one killed for memory does)
}

// DefaultThresholds are the rules the sizer uses unless configured.
var DefaultThresholds = Thresholds{MinSamples: 10, MinSpan: 10 * time.Minute, Saturated: 90, Idle: 40, Target: 70, MemHeadroom: 0.8, FailedRuns: 2}

// Offer is what the job's pool can give one request of the task's kind:
// the most instances one node device group holds (MPS shares per GPU, GPUs
// per node, MIG instances of a profile) and, for MIG, the profiles offered.
type Offer struct {
	MaxCount int
	Profiles []string
}

// Change is what a recommendation does to the slice.
type Change string

const (
	Keep   Change = "keep"
	Grow   Change = "grow"
	Shrink Change = "shrink"
)

// Recommendation is the slice a task should have, and why.
type Recommendation struct {
	Key         history.Key
	Current     history.Slice
	Recommended history.Slice
	Change      Change
	Evidence    []string // the figures the rules read, in words
	Reason      string   // the rule that decided
}

// Usage summarises the samples taken at the current slice.
type Usage struct {
	Samples               int
	Span                  time.Duration
	MeanUtil, P95Util     float64
	PeakMem, MemLimit     uint64
	TimedOut, OutOfMemory int // of the last five finished runs
	Runs                  int
}

// Summarise reads the samples at slice cur and the last five finished runs.
func Summarise(cur history.Slice, samples []history.Sample, runs []history.Run) Usage {
	var u Usage
	var utils []float64
	var first, last time.Time
	for _, s := range samples {
		if s.Slice != cur {
			continue
		}
		utils = append(utils, s.UtilPct)
		u.PeakMem = max(u.PeakMem, s.MemBytes)
		u.MemLimit = max(u.MemLimit, s.MemLimitBytes)
		if first.IsZero() || s.Time.Before(first) {
			first = s.Time
		}
		if s.Time.After(last) {
			last = s.Time
		}
	}
	u.Samples = len(utils)
	u.Span = last.Sub(first)
	if len(utils) > 0 {
		var sum float64
		for _, x := range utils {
			sum += x
		}
		u.MeanUtil = sum / float64(len(utils))
		u.P95Util = quantile.Of(utils, 0.95)
	}
	finished := slices.Clone(runs)
	finished = slices.DeleteFunc(finished, func(r history.Run) bool { return r.Finished.IsZero() || r.Slice != cur })
	sort.Slice(finished, func(i, j int) bool { return finished[i].Finished.After(finished[j].Finished) })
	if len(finished) > 5 {
		finished = finished[:5]
	}
	u.Runs = len(finished)
	for _, r := range finished {
		switch r.Outcome {
		case history.OutcomeTimeout:
			u.TimedOut++
		case history.OutcomeOOM, history.OutcomeKilled:
			u.OutOfMemory++
		}
	}
	return u
}

// Recommend applies the rules to a task's usage at its current slice:
//
//   - grow ×2 (MIG: the next larger profile offered) when p95 utilisation
//     is at or above Saturated, when peak memory reached the limit, when
//     FailedRuns of the last five runs timed out, or when one of them was
//     killed for memory (OOM, or the GPU-memory watchdog);
//   - shrink, when p95 utilisation is at or below Idle, to the smallest
//     slice whose p95 utilisation would be at most Target and whose memory
//     limit holds the peak memory with MemHeadroom to spare;
//   - else keep.
//
// The result is clamped to the policy's bounds and to the offer. Too few
// samples (MinSamples over MinSpan) keep the slice unless runs failed.
func Recommend(k history.Key, p Policy, cur history.Slice, u Usage, offer Offer, th Thresholds) Recommendation {
	r := Recommendation{Key: k, Current: cur, Recommended: cur, Change: Keep}
	unit := unitName(cur)
	size := float64(sizeOf(cur))
	if u.Samples > 0 {
		r.Evidence = append(r.Evidence, fmt.Sprintf("p95 utilisation %.0f %% (mean %.0f %%) of %s over %s (%d samples)",
			u.P95Util, u.MeanUtil, describe(cur), u.Span.Round(time.Second), u.Samples))
	}
	if u.MemLimit > 0 {
		r.Evidence = append(r.Evidence, fmt.Sprintf("peak GPU memory %s of %s", bytesIEC(u.PeakMem), bytesIEC(u.MemLimit)))
	}
	if u.TimedOut > 0 {
		r.Evidence = append(r.Evidence, fmt.Sprintf("%d of the last %d runs timed out", u.TimedOut, u.Runs))
	}
	if u.OutOfMemory > 0 {
		r.Evidence = append(r.Evidence, fmt.Sprintf("%d of the last %d runs were killed for GPU memory", u.OutOfMemory, u.Runs))
	}
	enough := u.Samples >= th.MinSamples && u.Span >= th.MinSpan
	memFull := u.MemLimit > 0 && float64(u.PeakMem) >= 0.95*float64(u.MemLimit)
	var want history.Slice
	switch {
	case u.TimedOut >= th.FailedRuns || u.OutOfMemory >= 1:
		want, r.Reason = larger(cur, offer), "runs failed on this slice"
	case enough && u.P95Util >= th.Saturated:
		want, r.Reason = larger(cur, offer), fmt.Sprintf("p95 utilisation at or above %.0f %%: starved", th.Saturated)
	case enough && memFull:
		want, r.Reason = larger(cur, offer), "GPU memory at its limit"
	case enough && u.P95Util <= th.Idle:
		demand := u.P95Util / 100 * size
		need := max(1, int(math.Ceil(demand*100/th.Target)))
		if cur.Kind != history.SliceMIG && u.MemLimit > 0 && size > 0 {
			perUnit := float64(u.MemLimit) / size
			need = max(need, int(math.Ceil(float64(u.PeakMem)/th.MemHeadroom/perUnit)))
		}
		want, r.Reason = smaller(cur, need, u, offer, th), fmt.Sprintf("p95 utilisation at or below %.0f %%: idle", th.Idle)
	case !enough:
		r.Reason = fmt.Sprintf("not enough history at %s yet (%d samples over %s; want %d over %s)",
			describe(cur), u.Samples, u.Span.Round(time.Second), th.MinSamples, th.MinSpan)
		return r
	default:
		r.Reason = "utilisation within bounds"
		return r
	}
	want = clamp(want, p, offer)
	switch c := compare(want, cur); {
	case c > 0:
		r.Change = Grow
	case c < 0:
		r.Change = Shrink
	default:
		r.Reason += fmt.Sprintf("; kept at %s by the bounds or what the pool offers", describe(cur))
		return r
	}
	r.Recommended = want
	r.Evidence = append(r.Evidence, fmt.Sprintf("→ %s (%s %s)", describe(want), r.Change, unit))
	return r
}

// Summary is the recommendation in one line, e.g. "p95 utilisation 97 % of
// 2 MPS shares over 6m0s (38 samples) → 4 MPS shares (grow shares)".
func (r Recommendation) Summary() string {
	if r.Change == Keep {
		return fmt.Sprintf("keep %s: %s", describe(r.Current), r.Reason)
	}
	return strings.Join(r.Evidence, "; ")
}

func sizeOf(s history.Slice) int {
	if s.Kind == history.SliceMIG {
		n, _, err := migSlices(s.Profile)
		if err != nil {
			return 1
		}
		return n * max(1, s.Count)
	}
	return s.Count
}

func unitName(s history.Slice) string {
	switch s.Kind {
	case history.SliceMPS:
		return "shares"
	case history.SliceMIG:
		return "MIG profile"
	}
	return "GPUs"
}

func describe(s history.Slice) string {
	switch s.Kind {
	case history.SliceMPS:
		if s.Count == 1 {
			return "1 MPS share"
		}
		return fmt.Sprintf("%d MPS shares", s.Count)
	case history.SliceMIG:
		return fmt.Sprintf("%d× MIG %s", max(1, s.Count), s.Profile)
	}
	if s.Count == 1 {
		return "1 GPU"
	}
	return fmt.Sprintf("%d GPUs", s.Count)
}

// profilesBySize are the offered profiles, smallest first.
func profilesBySize(offer Offer) []string {
	ps := slices.Clone(offer.Profiles)
	slices.SortFunc(ps, func(a, b string) int {
		sa, ma, _ := migSlices(a)
		sb, mb, _ := migSlices(b)
		if sa != sb {
			return sa - sb
		}
		return ma - mb
	})
	return ps
}

func larger(cur history.Slice, offer Offer) history.Slice {
	out := cur
	if cur.Kind == history.SliceMIG {
		n := sizeOf(history.Slice{Kind: history.SliceMIG, Profile: cur.Profile})
		for _, p := range profilesBySize(offer) {
			if s, _, _ := migSlices(p); s > n {
				out.Profile = p
				return out
			}
		}
		return out
	}
	out.Count = max(1, cur.Count*2)
	return out
}

func smaller(cur history.Slice, need int, u Usage, offer Offer, th Thresholds) history.Slice {
	out := cur
	if cur.Kind == history.SliceMIG {
		for _, p := range profilesBySize(offer) {
			s, memGB, _ := migSlices(p)
			if s >= need && float64(u.PeakMem) <= th.MemHeadroom*float64(uint64(memGB)<<30) {
				out.Profile = p
				return out
			}
		}
		return out
	}
	out.Count = min(cur.Count, need)
	return out
}

func clamp(s history.Slice, p Policy, offer Offer) history.Slice {
	if s.Kind == history.SliceMIG {
		n := sizeOf(history.Slice{Kind: history.SliceMIG, Profile: s.Profile})
		if p.Max.Profile != "" {
			if mx, _, _ := migSlices(p.Max.Profile); n > mx {
				s.Profile = p.Max.Profile
			}
		}
		if p.Min.Profile != "" {
			if mn, _, _ := migSlices(p.Min.Profile); n < mn {
				s.Profile = p.Min.Profile
			}
		}
		if len(offer.Profiles) > 0 && !slices.Contains(offer.Profiles, s.Profile) {
			return history.Slice{} // compares equal to nothing offered: see compare
		}
		return s
	}
	if p.Max.Count > 0 {
		s.Count = min(s.Count, p.Max.Count)
	}
	if offer.MaxCount > 0 {
		s.Count = min(s.Count, offer.MaxCount)
	}
	if p.Min.Count > 0 {
		s.Count = max(s.Count, p.Min.Count)
	}
	return s
}

// compare orders slices of one kind by size; a slice the pool cannot give
// (zero) compares equal, so nothing changes.
func compare(a, b history.Slice) int {
	if a.Kind == "" {
		return 0
	}
	return sizeOf(a) - sizeOf(b)
}

func bytesIEC(b uint64) string {
	const gib = 1 << 30
	if b >= gib {
		return fmt.Sprintf("%.1f GiB", float64(b)/gib)
	}
	return fmt.Sprintf("%d MiB", b>>20)
}
