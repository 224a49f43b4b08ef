package sizing

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

func TestParsePolicy(t *testing.T) {
	cases := []struct {
		name    string
		meta    map[string]string
		want    Policy
		wantErr string
	}{
		{"default", nil, Policy{Mode: ModeOff, Interval: DefaultInterval}, ""},
		{"auto with bounds", map[string]string{MetaMode: "auto", MetaMin: "2", MetaMax: "8", MetaInterval: "5m"},
			Policy{Mode: ModeAuto, Min: Bound{Count: 2}, Max: Bound{Count: 8}, Interval: 5 * time.Minute}, ""},
		{"mig bounds", map[string]string{MetaMode: "recommend", MetaMin: "1g.10gb", MetaMax: "3g.40gb"},
			Policy{Mode: ModeRecommend, Min: Bound{Profile: "1g.10gb"}, Max: Bound{Profile: "3g.40gb"}, Interval: DefaultInterval}, ""},
		{"deadline", map[string]string{MetaDeadline: "2026-12-24T18:00:00Z"},
			Policy{Mode: ModeOff, Interval: DefaultInterval, Deadline: time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)}, ""},
		{"bad mode", map[string]string{MetaMode: "on"}, Policy{}, "meta nomad_gpu_sizing: \"on\" is not a sizing mode; want off, recommend or auto"},
		{"zero min", map[string]string{MetaMin: "0"}, Policy{}, "meta nomad_gpu_sizing_min: 0 is not a count of 1 or more"},
		{"bad max", map[string]string{MetaMax: "lots"}, Policy{}, "meta nomad_gpu_sizing_max: \"lots\" is neither a count"},
		{"min above max", map[string]string{MetaMin: "8", MetaMax: "2"}, Policy{}, "meta nomad_gpu_sizing_min: 8 is more than nomad_gpu_sizing_max 2"},
		{"bad interval", map[string]string{MetaInterval: "soon"}, Policy{}, "meta nomad_gpu_sizing_interval: \"soon\" is not a duration"},
		{"bad deadline", map[string]string{MetaDeadline: "tomorrow"}, Policy{}, "meta nomad_gpu_deadline: \"tomorrow\" is not an RFC 3339 time"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParsePolicy(c.meta)
			if c.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one starting %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestMergeMeta(t *testing.T) {
	m := MergeMeta(map[string]string{MetaMode: "auto", "a": "job"}, map[string]string{"a": "group"}, map[string]string{MetaMode: "recommend"})
	if m[MetaMode] != "recommend" || m["a"] != "group" {
		t.Fatalf("merged %v: want the task's mode and the group's a", m)
	}
}

func samples(cur history.Slice, n int, every time.Duration, util float64, mem, limit uint64) []history.Sample {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var out []history.Sample
	for i := 0; i < n; i++ {
		out = append(out, history.Sample{Time: t0.Add(time.Duration(i) * every), Slice: cur, UtilPct: util, MemBytes: mem, MemLimitBytes: limit})
	}
	return out
}

func TestRecommend(t *testing.T) {
	const gib = 1 << 30
	mps2 := history.Slice{Kind: history.SliceMPS, Count: 2}
	mps8 := history.Slice{Kind: history.SliceMPS, Count: 8}
	gpu4 := history.Slice{Kind: history.SliceGPU, Count: 4}
	mig1 := history.Slice{Kind: history.SliceMIG, Count: 1, Profile: "1g.10gb"}
	mig3 := history.Slice{Kind: history.SliceMIG, Count: 1, Profile: "3g.40gb"}
	migOffer := Offer{Profiles: []string{"7g.80gb", "1g.10gb", "3g.40gb", "2g.20gb"}}
	auto := Policy{Mode: ModeAuto, Interval: time.Hour}
	timeouts := func(cur history.Slice, n int) []history.Run {
		var rs []history.Run
		for i := 0; i < n; i++ {
			rs = append(rs, history.Run{Slice: cur, Finished: time.Unix(int64(1000+i), 0), Outcome: history.OutcomeTimeout})
		}
		return rs
	}
	// ran is the last runs at cur, newest first, ended as outcomes say.
	ran := func(cur history.Slice, outcomes ...history.Outcome) []history.Run {
		var rs []history.Run
		for i, o := range outcomes {
			rs = append(rs, history.Run{Slice: cur, Finished: time.Unix(int64(2000-i), 0), Outcome: o})
		}
		return rs
	}
	ok := history.OutcomeComplete
	cases := []struct {
		name    string
		policy  Policy
		cur     history.Slice
		samples []history.Sample
		runs    []history.Run
		offer   Offer
		want    history.Slice
		change  Change
		reason  string
	}{
		{"saturated 2 shares grow to 4", auto, mps2, samples(mps2, 40, 10*time.Second, 99, gib, 10*gib), nil, Offer{MaxCount: 8}, history.Slice{Kind: "mps", Count: 4}, Grow, "starved"},
		{"grow capped by max", Policy{Mode: ModeAuto, Max: Bound{Count: 3}}, mps2, samples(mps2, 40, 10*time.Second, 99, gib, 10*gib), nil, Offer{MaxCount: 8}, history.Slice{Kind: "mps", Count: 3}, Grow, "starved"},
		{"grow capped by offer", auto, mps2, samples(mps2, 40, 10*time.Second, 99, gib, 10*gib), nil, Offer{MaxCount: 2}, mps2, Keep, "kept at 2 MPS shares"},
		{"idle 8 shares shrink to what p95 needs at 70%", auto, mps8, samples(mps8, 40, 10*time.Second, 20, gib, 40*gib), nil, Offer{MaxCount: 8}, history.Slice{Kind: "mps", Count: 3}, Shrink, "idle"},
		{"shrink held by memory", auto, mps8, samples(mps8, 40, 10*time.Second, 20, 30*gib, 40*gib), nil, Offer{MaxCount: 8}, history.Slice{Kind: "mps", Count: 8}, Keep, "kept"},
		{"shrink held by min", Policy{Mode: ModeAuto, Min: Bound{Count: 6}}, mps8, samples(mps8, 40, 10*time.Second, 20, gib, 40*gib), nil, Offer{MaxCount: 8}, history.Slice{Kind: "mps", Count: 6}, Shrink, "idle"},
		{"whole GPUs idle", auto, gpu4, samples(gpu4, 40, 10*time.Second, 25, gib, 0), nil, Offer{MaxCount: 8}, history.Slice{Kind: "gpu", Count: 2}, Shrink, "idle"},
		{"not enough history", auto, mps2, samples(mps2, 5, 10*time.Second, 99, gib, 10*gib), nil, Offer{MaxCount: 8}, mps2, Keep, "not enough history"},
		{"timeouts grow without samples", auto, mps2, nil, timeouts(mps2, 3), Offer{MaxCount: 8}, history.Slice{Kind: "mps", Count: 4}, Grow, "runs failed"},
		// One run of the last five killed for memory grows the slice; one
		// timeout does not (it takes FailedRuns), nor does an OOM older
		// than the last five.
		{"one OOM grows", auto, mps2, nil, ran(mps2, ok, history.OutcomeOOM, ok, ok, ok), Offer{MaxCount: 8}, history.Slice{Kind: "mps", Count: 4}, Grow, "1 of the last 5 runs were killed for GPU memory"},
		{"one GPU memory kill grows", auto, mps2, nil, ran(mps2, ok, ok, ok, ok, history.OutcomeKilled), Offer{MaxCount: 8}, history.Slice{Kind: "mps", Count: 4}, Grow, "runs failed"},
		{"one timeout keeps", auto, mps2, nil, ran(mps2, ok, history.OutcomeTimeout, ok, ok, ok), Offer{MaxCount: 8}, mps2, Keep, "not enough history"},
		{"FailedRuns timeouts grow", auto, mps2, nil, ran(mps2, history.OutcomeTimeout, ok, ok, history.OutcomeTimeout, ok), Offer{MaxCount: 8}, history.Slice{Kind: "mps", Count: 4}, Grow, "2 of the last 5 runs timed out"},
		{"OOM before the last five keeps", auto, mps2, nil, ran(mps2, ok, ok, ok, ok, ok, history.OutcomeOOM), Offer{MaxCount: 8}, mps2, Keep, "not enough history"},
		{"memory full grows", auto, mps2, samples(mps2, 40, 10*time.Second, 60, 10*gib, 10*gib), nil, Offer{MaxCount: 8}, history.Slice{Kind: "mps", Count: 4}, Grow, "memory"},
		{"busy but not starved keeps", auto, mps2, samples(mps2, 40, 10*time.Second, 70, gib, 10*gib), nil, Offer{MaxCount: 8}, mps2, Keep, "within bounds"},
		{"mig starved next profile", auto, mig1, samples(mig1, 40, 10*time.Second, 97, gib, 10*gib), nil, migOffer, history.Slice{Kind: "mig", Count: 1, Profile: "2g.20gb"}, Grow, "starved"},
		{"mig idle smallest that fits", auto, mig3, samples(mig3, 40, 10*time.Second, 15, 5*gib, 40*gib), nil, migOffer, history.Slice{Kind: "mig", Count: 1, Profile: "1g.10gb"}, Shrink, "idle"},
		{"mig idle memory needs 2g", auto, mig3, samples(mig3, 40, 10*time.Second, 15, 12*gib, 40*gib), nil, migOffer, history.Slice{Kind: "mig", Count: 1, Profile: "2g.20gb"}, Shrink, "idle"},
		{"mig max bound", Policy{Mode: ModeAuto, Max: Bound{Profile: "1g.10gb"}}, mig1, samples(mig1, 40, 10*time.Second, 97, gib, 10*gib), nil, migOffer, mig1, Keep, "kept"},
		{"samples at other sizes ignored", auto, mps2, samples(mps8, 40, 10*time.Second, 99, gib, 10*gib), nil, Offer{MaxCount: 8}, mps2, Keep, "not enough history"},
	}
	th := DefaultThresholds
	th.MinSpan = time.Minute
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := history.Key{Namespace: "default", Job: "train", Group: "g", Task: "t"}
			r := Recommend(k, c.policy, c.cur, Summarise(c.cur, c.samples, c.runs), c.offer, th)
			if r.Recommended != c.want || r.Change != c.change || !strings.Contains(r.Summary()+" "+r.Reason, c.reason) {
				t.Fatalf("got %+v %s (%s: %s); want %+v %s with %q", r.Recommended, r.Change, r.Reason, r.Summary(), c.want, c.change, c.reason)
			}
		})
	}
}

func TestRecommendEvidence(t *testing.T) {
	mps2 := history.Slice{Kind: history.SliceMPS, Count: 2}
	th := DefaultThresholds
	th.MinSpan = time.Minute
	r := Recommend(history.Key{}, Policy{Mode: ModeAuto}, mps2, Summarise(mps2, samples(mps2, 37, 10*time.Second, 97, 1<<30, 10<<30), nil), Offer{MaxCount: 8}, th)
	want := "p95 utilisation 97 % (mean 97 %) of 2 MPS shares over 6m0s (37 samples); peak GPU memory 1.0 GiB of 10.0 GiB; → 4 MPS shares (grow shares)"
	if r.Summary() != want {
		t.Fatalf("summary\n %s\nwant\n %s", r.Summary(), want)
	}
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	grow := Recommendation{Change: Grow}
	cases := []struct {
		name        string
		policy      Policy
		r           Recommendation
		checkpoints bool
		last        time.Time
		apply       bool
		hold        string
	}{
		{"auto applies", Policy{Mode: ModeAuto, Interval: time.Hour}, grow, true, time.Time{}, true, ""},
		{"keep does nothing", Policy{Mode: ModeAuto}, Recommendation{Change: Keep}, true, time.Time{}, false, ""},
		{"recommend never applies", Policy{Mode: ModeRecommend}, grow, true, time.Time{}, false, "recommended only"},
		{"no checkpoint never restarts", Policy{Mode: ModeAuto}, grow, false, time.Time{}, false, "never restarted"},
		{"within interval", Policy{Mode: ModeAuto, Interval: time.Hour}, grow, true, now.Add(-10 * time.Minute), false, "last resized 10m0s ago"},
		{"after interval", Policy{Mode: ModeAuto, Interval: time.Hour}, grow, true, now.Add(-2 * time.Hour), true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.policy, c.r, c.checkpoints, c.last, now)
			if d.Apply != c.apply || !strings.Contains(d.Hold, c.hold) || (c.hold == "" && d.Hold != "") {
				t.Fatalf("got %+v, want apply %v hold %q", d, c.apply, c.hold)
			}
		})
	}
}

func TestResize(t *testing.T) {
	two := uint64(2)
	job := &api.Job{ID: ptr("train"), TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Tasks: []*api.Task{{
		Name: "t", Driver: "gpu", Config: map[string]any{"checkpoint": []any{map[string]any{}}},
		Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/mps", Count: &two}}},
	}}}}}
	task := job.TaskGroups[0].Tasks[0]
	if !Checkpoints(task) {
		t.Fatal("a gpu task with a checkpoint block checkpoints")
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if err := Resize(job, "g", "t", history.Slice{Kind: history.SliceMPS, Count: 4}, "starved", now); err != nil {
		t.Fatal(err)
	}
	if c := *task.Resources.Devices[0].Count; c != 4 {
		t.Fatalf("count %d after resize, want 4", c)
	}
	if got := LastResize(task.Meta); !got.Equal(now) {
		t.Fatalf("last resize %v from %q, want %v", got, task.Meta[MetaLastResize], now)
	}
	if want := "2026-12-01T12:00:00Z 2 MPS shares → 4 MPS shares: starved"; task.Meta[MetaLastResize] != want {
		t.Fatalf("meta %q, want %q", task.Meta[MetaLastResize], want)
	}
	if err := Resize(job, "g", "t", history.Slice{Kind: history.SliceGPU, Count: 1}, "", now); err == nil || !strings.Contains(err.Error(), "keeps the kind") {
		t.Fatalf("resize to another kind: %v", err)
	}
	if err := Resize(job, "g", "nope", history.Slice{Kind: history.SliceMPS, Count: 1}, "", now); err == nil {
		t.Fatal("resize of a missing task succeeded")
	}
}

func TestRequestSlice(t *testing.T) {
	n := func(v uint64) *uint64 { return &v }
	cases := []struct {
		devices []*api.RequestedDevice
		want    history.Slice
		wantErr string
	}{
		{[]*api.RequestedDevice{{Name: "nvidia/gpu", Count: n(2)}}, history.Slice{Kind: "gpu", Count: 2}, ""},
		{[]*api.RequestedDevice{{Name: "gpu"}}, history.Slice{Kind: "gpu", Count: 1}, ""},
		{[]*api.RequestedDevice{{Name: "nvidia/gpu/NVIDIA H100 80GB HBM3", Count: n(1)}}, history.Slice{Kind: "gpu", Count: 1}, ""},
		{[]*api.RequestedDevice{{Name: "nvidia/mig/1g.10gb", Count: n(1)}}, history.Slice{Kind: "mig", Count: 1, Profile: "1g.10gb"}, ""},
		{[]*api.RequestedDevice{{Name: "nvidia/mps", Count: n(3)}, {Name: "fpga"}}, history.Slice{Kind: "mps", Count: 3}, ""},
		{[]*api.RequestedDevice{{Name: "amd/gpu"}}, history.Slice{}, "asks for no GPU device"},
		{[]*api.RequestedDevice{{Name: "nvidia/gpu"}, {Name: "nvidia/mps"}}, history.Slice{}, "more than one GPU device"},
	}
	for _, c := range cases {
		_, got, err := RequestSlice(&api.Task{Name: "t", Resources: &api.Resources{Devices: c.devices}})
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%v: error %v, want %q", c.devices, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%v: got %+v %v, want %+v", c.devices[0].Name, got, err, c.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
