package main

import (
	"flag"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/model"
)

func TestZZWaits(t *testing.T) {
	rr, err := tracereplay.ReadRealRun(os.Getenv("ZZ_REAL"))
	if err != nil {
		t.Fatal(err)
	}
	var p tracereplay.Params
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	p.Register(fs)
	fs.Parse(rr.Flags)
	setup, err := p.Load()
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rr.Results {
		if r.Config.Name != os.Getenv("ZZ_CFG") {
			continue
		}
		lat := rr.Latencies[i]
		if d, ok := tracereplay.PlaceableBoot(r); ok {
			lat.Boot = d
		}
		if d, ok := tracereplay.CommitToExit(r); ok {
			lat.CommitExit = d
		}
		if d := r.Distortion; d != nil && d.StartP95 > d.StartP50 {
			lat.StartP95 = lat.Start + d.StartP95 - d.StartP50
			lat.StartP99 = lat.Start + max(d.StartP95, d.StartP99) - d.StartP50
		}
		if v := os.Getenv("ZZ_LAYOUT"); v != "" {
			lat.Layout, _ = time.ParseDuration(v)
		}
		if v := os.Getenv("ZZ_START"); v != "" {
			lat.Start, _ = time.ParseDuration(v)
		}
		t.Logf("lat %+v", lat)
		m, err := model.Run(setup.Trace, model.Options{Cluster: setup.Cluster, Config: r.Config, Policy: setup.Policy, Latencies: lat,
			Compression: setup.Compression, Horizon: setup.Horizon, Seed: setup.Seed})
		if err != nil {
			t.Fatal(err)
		}
		if os.Getenv("ZZ_TL") != "" {
			for i := 0; i < len(r.Timeline) && r.Timeline[i].At < 15*time.Minute; i++ {
				t.Logf("real  %v", r.Timeline[i])
			}
			for i := 0; i < len(m.Timeline) && m.Timeline[i].At < 15*time.Minute; i++ {
				t.Logf("model %v", m.Timeline[i])
			}
		}
		rw, mw := figures.Waits(r), figures.Waits(m)
		slices.Sort(rw)
		slices.Sort(mw)
		t.Logf("n real %d model %d", len(rw), len(mw))
		for q := 0.30; q <= 0.701; q += 0.025 {
			t.Logf("q%.3f real %8s model %8s", q, rw[int(q*float64(len(rw)))].Round(time.Second), mw[int(q*float64(len(mw)))].Round(time.Second))
		}
		// per job, by ID
		byID := map[string]tracereplay.JobRecord{}
		for _, j := range m.Jobs {
			byID[j.ID] = j
		}
		for _, j := range r.Jobs {
			mj := byID[j.ID]
			if len(j.Runs) == 0 || len(mj.Runs) == 0 {
				continue
			}
			rwt, mwt := j.Runs[0].Start-j.Submitted, mj.Runs[0].Start-mj.Submitted
			if os.Getenv("ZZ_JOBS") != "" {
				t.Logf("%s arr %8s slice %v real %8s model %8s", j.ID, j.Arrival.Round(time.Second), j.Slice, rwt.Round(time.Second), mwt.Round(time.Second))
			}
		}
	}
}
