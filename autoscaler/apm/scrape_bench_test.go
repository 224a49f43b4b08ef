package apm

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// syntheticCluster is a 1,000-node cluster of 8 GPUs a node:
//
//	pool gpu  700 nodes, 8 whole H100s
//	pool mig  200 nodes, 4 GPUs as 7 × 1g.10gb MIG instances, 4 whole
//	pool mps  100 nodes, 8 GPUs as 4 MPS shares each
//
// over 4 datacenters and 2 classes, about 60 % of the devices held by
// ~3,400 running allocations (and 50 pending), every instance reporting
// utilisation, 200 blocked groups across the pools and priorities, and
// 2,000 allocations finished in the last hour.
func syntheticCluster() *Snapshot {
	rng := rand.New(rand.NewPCG(1, 2))
	s := &Snapshot{Now: t0, Util: map[string][]InstanceUtil{}}
	mig := DeviceSpec{Vendor: "nvidia", Type: "mig", Name: "1g.10gb"}
	run := 0
	for i := range 1000 {
		n := Node{ID: fmt.Sprintf("node-%04d", i), Datacenter: fmt.Sprintf("dc%d", i%4+1), Class: []string{"a100", "h100"}[i%2],
			Status: "ready", Eligible: i%50 != 0}
		hold := func(spec DeviceSpec, ids []string) {
			if len(ids) == 0 {
				return
			}
			n.Used = append(n.Used, UsedDevices{spec, ids})
			run++
			prio := []int{80, 50, 50, 20}[run%4]
			r := AllocRun{ID: fmt.Sprintf("run-%d", run), NodeID: n.ID, Pool: n.Pool, Datacenter: n.Datacenter, Priority: prio, Status: "running",
				Created: t0.Add(-time.Duration(rng.IntN(7200)) * time.Second)}
			r.Started = r.Created.Add(time.Duration(rng.IntN(120)) * time.Second)
			if run%70 == 0 {
				r.Status, r.Started = "pending", time.Time{}
				s.Work = append(s.Work, Work{Source: FromPendingAlloc, Allocs: 1, Since: r.Created, Priority: prio, Pool: n.Pool,
					Asks: []DeviceAsk{{Device: spec, Count: len(ids)}}, Datacenters: []string{n.Datacenter}, ClassRules: []ClassRule{{"=", n.Class}}})
			}
			s.Runs = append(s.Runs, r)
		}
		util := func(spec DeviceSpec, id string) {
			s.Util[n.ID] = append(s.Util[n.ID], InstanceUtil{spec, id, float64(rng.IntN(101))})
		}
		switch {
		case i < 700:
			n.Pool = "gpu"
			g := wholeGPUs(n.ID, 8)
			for j := range g.Instances {
				g.Instances[j].GPU = nomadview.PhysicalGPU{PCIBusID: fmt.Sprintf("%s-pci-%d", n.ID, j)}
				util(h100, g.Instances[j].ID)
			}
			n.Devices = []DeviceGroup{g}
			held := rng.IntN(9)
			for a := 0; a < held; {
				k := min(held-a, 1+rng.IntN(4))
				hold(h100, ids(n.ID, a, a+k))
				a += k
			}
		case i < 900:
			n.Pool = "mig"
			m := DeviceGroup{DeviceSpec: mig, MemoryBytes: 10 * gib}
			for gpu := range 4 {
				for k := range 7 {
					id := fmt.Sprintf("%s-mig-%d-%d", n.ID, gpu, k)
					m.Instances = append(m.Instances, DeviceInstance{ID: id, Healthy: true, GPU: nomadview.PhysicalGPU{PCIBusID: fmt.Sprintf("%s-pci-%d", n.ID, gpu)}})
					util(mig, id)
					if rng.IntN(2) == 0 {
						hold(mig, []string{id})
					}
				}
			}
			w := wholeGPUs(n.ID, 4)
			for j := range w.Instances {
				w.Instances[j].GPU = nomadview.PhysicalGPU{PCIBusID: fmt.Sprintf("%s-pci-%d", n.ID, 4+j)}
				util(h100, w.Instances[j].ID)
			}
			n.Devices = []DeviceGroup{m, w}
			hold(h100, ids(n.ID, 0, rng.IntN(5)))
		default:
			n.Pool = "mps"
			for gpu := range 8 {
				uuid := fmt.Sprintf("GPU-%s-%d", n.ID, gpu)
				spec := DeviceSpec{Vendor: "nvidia", Type: "mps", Name: uuid}
				g := slicedGroup("nvidia", "mps", uuid, uuid+"-mps", uuid, 4, 20*gib)
				for _, in := range g.Instances {
					util(spec, in.ID)
				}
				n.Devices = append(n.Devices, g)
				hold(spec, ids(uuid+"-mps", 0, rng.IntN(5)))
			}
		}
		s.Nodes = append(s.Nodes, n)
	}
	// Finished in the last hour.
	for i := range 2000 {
		n := &s.Nodes[rng.IntN(len(s.Nodes))]
		fin := t0.Add(-time.Duration(rng.IntN(3600)) * time.Second)
		start := fin.Add(-time.Duration(1+rng.IntN(7200)) * time.Second)
		s.Runs = append(s.Runs, AllocRun{ID: fmt.Sprintf("done-%d", i), NodeID: n.ID, Pool: n.Pool, Datacenter: n.Datacenter,
			Priority: []int{90, 50, 10}[i%3], Status: []string{"complete", "complete", "complete", "failed", "lost"}[i%5],
			Created: start.Add(-time.Duration(rng.IntN(600)) * time.Second), Started: start, Finished: fin})
	}
	// Queue: 200 blocked groups.
	asks := [][]DeviceAsk{
		{ask("nvidia/gpu", 8)}, {ask("nvidia/gpu", 4)}, {ask("nvidia/gpu", 1)}, {ask("nvidia/mig/1g.10gb", 1)},
		{ask("nvidia/mig/3g.40gb", 1)}, {ask("nvidia/mps", 2)}, {ask("gpu", 2), ask("nvidia/mig/1g.10gb", 1)},
	}
	pools := []string{"gpu", "gpu", "mig", "mig", "mig", "mps", "mig"}
	for i := range 200 {
		k := i % len(asks)
		w := Work{Source: FromBlockedEval, JobID: fmt.Sprintf("q-%d", i), Allocs: 1 + rng.IntN(20), Asks: asks[k], Pool: pools[k],
			Since: t0.Add(-time.Duration(rng.IntN(3600)) * time.Second), Datacenters: []string{"dc*"}, Priority: []int{90, 60, 30}[i%3],
			CapacityBlocked: i%10 != 0}
		if i%4 == 0 {
			w.ClassRules = []ClassRule{{"regexp", "^h"}}
		}
		s.Work = append(s.Work, w)
	}
	return s
}

// BenchmarkClusterScrape: one scrape of the cluster figures of a
// 1,000-node, 8,000-GPU cluster (syntheticCluster): the figures computed
// from the snapshot and the text exposition, through the promhttp handler
// (text, and gzip as Prometheus asks). Reported, not asserted.
//
//	go test ./autoscaler/apm -run '^$' -bench BenchmarkClusterScrape -benchmem
func BenchmarkClusterScrape(b *testing.B) {
	s := syntheticCluster()
	in := scrapeInput{snap: s, opt: FigureOptions{Tiers: DefaultTiers, Window: time.Hour},
		lists: []listState{{"nodes", true}, {"blocked_evaluations", true}, {"allocations", true}, {"finished_allocations", true}},
		calls: map[string]uint64{EndpointNodes: 10, EndpointEvals: 10, EndpointAllocs: 10, EndpointFinished: 10}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(fixedCollector(in))
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	allocs := 0
	for i := range s.Work {
		allocs += s.Work[i].Allocs
	}
	b.Logf("%d nodes, %d device instances, %d runs, %d queued allocations in %d work items",
		len(s.Nodes), countInstances(s), len(s.Runs), allocs, len(s.Work))
	for _, enc := range []string{"text", "gzip"} {
		b.Run(enc, func(b *testing.B) {
			b.ReportAllocs()
			var size, series int
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, MetricsPath, nil)
				if enc == "gzip" {
					req.Header.Set("Accept-Encoding", "gzip")
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("%d: %s", rec.Code, rec.Body)
				}
				size = rec.Body.Len()
				if enc == "text" && series == 0 {
					for _, l := range strings.Split(rec.Body.String(), "\n") {
						if l != "" && l[0] != '#' {
							series++
						}
					}
				}
			}
			b.ReportMetric(float64(size), "body-bytes")
			if series > 0 {
				b.ReportMetric(float64(series), "series")
			}
		})
	}
}

// BenchmarkClusterFigures: ComputeFigures alone on syntheticCluster.
func BenchmarkClusterFigures(b *testing.B) {
	s := syntheticCluster()
	b.ReportAllocs()
	for b.Loop() {
		ComputeFigures(s, FigureOptions{})
	}
}

func countInstances(s *Snapshot) int {
	n := 0
	for i := range s.Nodes {
		for _, g := range s.Nodes[i].Devices {
			n += len(g.Instances)
		}
	}
	return n
}
