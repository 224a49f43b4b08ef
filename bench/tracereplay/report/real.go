package report

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/figures"
	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay/model"
)

// FromReal runs the model on each configuration of a real run, with the
// latencies that run measured in it (a node's boot as the scheduler saw
// it, where the run started nodes: PlaceableBoot; a preempted task's
// commit to exit, where it preempted with checkpoints: CommitToExit), and
// writes the report of both to
// dir. The real run's record is written beside the report first, so the
// report can be made again from it alone (`bench-trace -real`).
func FromReal(dir, title string, setup tracereplay.Setup, rr tracereplay.RealRun) error {
	var modelled []tracereplay.Result
	var lats []tracereplay.Latencies
	for i, r := range rr.Results {
		lat := rr.Latencies[i]
		if d, ok := tracereplay.PlaceableBoot(r); ok {
			lat.Boot = d
		}
		if d, ok := tracereplay.CommitToExit(r); ok {
			lat.CommitExit = d
		}
		if d := r.Distortion; d != nil && d.StartP95 > d.StartP50 {
			// Start is the median scheduling latency plus the median
			// start (placement to running): the tail is the start's.
			lat.StartP95 = lat.Start + d.StartP95 - d.StartP50
			lat.StartP99 = lat.Start + max(d.StartP95, d.StartP99) - d.StartP50
		}
		m, err := model.Run(setup.Trace, model.Options{
			Cluster: setup.Cluster, Config: r.Config, Policy: setup.Policy, Latencies: lat,
			Compression: setup.Compression, Horizon: setup.Horizon, Seed: setup.Seed,
		})
		if err != nil {
			return fmt.Errorf("model %s: %w", r.Config.Name, err)
		}
		if r.Config.Queues {
			if m.QueueAlone, err = AloneWaits(setup, r.Config, lat); err != nil {
				return fmt.Errorf("model %s: %w", r.Config.Name, err)
			}
		}
		modelled = append(modelled, m)
		lats = append(lats, lat)
	}
	if err := tracereplay.WriteRealRun(filepath.Join(dir, tracereplay.RealRunFile), rr); err != nil {
		return err
	}
	return Write(dir, Run{
		Title: title, Trace: setup.Trace, Seed: setup.Seed, Attribution: setup.Attribution,
		Real: rr.Results, Model: modelled, Started: rr.Started, Elapsed: rr.Elapsed,
		Prices: figures.Prices{Reserved: setup.PriceReserved, OnDemand: setup.PriceOnDemand, Spot: setup.PriceSpot}, Notes: setup.Notes,
		Latencies: lats,
	})
}

// AloneWaits is each team queue's mean wait with its jobs alone on a
// cluster of its nominal quota (Cluster.AloneConfigs of cfg), the model
// at latencies lat (tracereplay.Result.QueueAlone).
func AloneWaits(setup tracereplay.Setup, cfg tracereplay.Config, lat tracereplay.Latencies) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, alone := range setup.Cluster.AloneConfigs(cfg) {
		r, err := model.Run(setup.Trace, model.Options{
			Cluster: setup.Cluster, Config: alone, Policy: setup.Policy, Latencies: lat,
			Compression: setup.Compression, Horizon: setup.Horizon, Seed: setup.Seed,
		})
		if err != nil {
			return nil, fmt.Errorf("queue %s alone: %w", alone.Alone, err)
		}
		out[alone.Alone] = figures.DistOf(figures.Waits(r)).Mean
	}
	return out, nil
}
