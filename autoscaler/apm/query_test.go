package apm

import (
	"strings"
	"testing"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

func TestParseQuery(t *testing.T) {
	gpu := DefaultDevice
	cases := []struct {
		in   string
		want Query
	}{
		{"gpus_queued", Query{Metric: MetricGPUsQueued, Filter: Filter{Device: gpu}}},
		{"gpus_queued{}", Query{Metric: MetricGPUsQueued, Filter: Filter{Device: gpu}}},
		{"  allocs_queued { } ", Query{Metric: MetricAllocsQueued, Filter: Filter{Device: gpu}}},
		{"gpus_queued{node_pool=gpu,datacenter=dc1,node_class=a100,device=nvidia/gpu}",
			Query{Metric: MetricGPUsQueued, Filter: Filter{NodePool: "gpu", Datacenter: "dc1", NodeClass: "a100", Device: gpu}}},
		{"gpus_queued{pool=gpu, class=a100 , device = nvidia/mig/1g.10gb}",
			Query{Metric: MetricGPUsQueued, Filter: Filter{NodePool: "gpu", NodeClass: "a100", Device: DeviceSpec{Vendor: "nvidia", Type: "mig", Name: "1g.10gb"}}}},
		{"wait_max_seconds{device=gpu,state=blocked}",
			Query{Metric: MetricWaitMax, Filter: Filter{Device: DeviceSpec{Type: "gpu"}}, State: StateBlocked}},
		{"wait_mean_seconds{state=pending}", Query{Metric: MetricWaitMean, Filter: Filter{Device: gpu}, State: StatePending}},
		{"allocs_queued{state=all}", Query{Metric: MetricAllocsQueued, Filter: Filter{Device: gpu}, State: StateAll}},
		{"gpu_alloc_pct{device=nvidia/mps}", Query{Metric: MetricAllocPct, Filter: Filter{Device: DeviceSpec{Vendor: "nvidia", Type: "mps"}}}},
		{"gpu_util_pct{datacenter=eu-west-1a}", Query{Metric: MetricUtilPct, Filter: Filter{Datacenter: "eu-west-1a", Device: gpu}}},
		{"nodes_needed{node_pool=gpu,gpus_per_node=8}", Query{Metric: MetricNodesNeeded, Filter: Filter{NodePool: "gpu", Device: gpu}, GPUsPerNode: 8}},
		{"gpus_queued{pool=frac,device=any}", Query{Metric: MetricGPUsQueued, Filter: Filter{NodePool: "frac", Device: AnyDevice}}},
		{"nodes_needed{device = any,gpus_per_node=4}", Query{Metric: MetricNodesNeeded, Filter: Filter{Device: AnyDevice}, GPUsPerNode: 4}},
		{"nodes_ready{node_pool=gpu,class=gpu-burst}", Query{Metric: MetricNodesReady, Filter: Filter{NodePool: "gpu", NodeClass: "gpu-burst", Device: gpu}}},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseQuery(c.in)
			if err != nil {
				t.Fatalf("ParseQuery: %v", err)
			}
			if got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
			// String() round-trips.
			again, err := ParseQuery(got.String())
			if err != nil || again != got {
				t.Fatalf("round trip of %q: %+v, %v", got.String(), again, err)
			}
		})
	}
}

func TestParseQueryErrors(t *testing.T) {
	cases := []struct {
		in   string
		want []string // substrings of the error
	}{
		{"", []string{"empty query", "gpus_queued", "nodes_needed"}},
		{"   ", []string{"empty query"}},
		{"gpus", []string{`unknown metric "gpus"`, "allowed: gpus_queued, allocs_queued"}},
		{"GPUS_QUEUED", []string{`unknown metric "GPUS_QUEUED"`}},
		{"gpus_queued pool=gpu", []string{"parameters go in braces"}},
		{"gpus_queued{pool=gpu", []string{`missing closing "}"`}},
		{"gpus_queued{pool=gpu}x", []string{`missing closing "}"`}},
		{"gpus_queued{{pool=gpu}}", []string{"unexpected brace"}},
		{"gpus_queued}", []string{"is not a metric name"}},
		{"gpus_queued{pool}", []string{`parameter "pool" has no "="`, "node_pool (or pool)"}},
		{"gpus_queued{zone=a}", []string{`unknown parameter "zone"`, "allowed: node_pool (or pool), datacenter"}},
		{"gpus_queued{pool=a,node_pool=b}", []string{`parameter "node_pool" given twice`}},
		{"gpus_queued{pool=a,pool=b}", []string{"given twice"}},
		{"gpus_queued{pool=}", []string{`parameter "pool" has an empty value`}},
		{"gpus_queued{pool=a,,class=b}", []string{"empty parameter #2"}},
		{"gpus_queued{pool=a,}", []string{"empty parameter #2"}},
		{`gpus_queued{pool="gpu"}`, []string{`value "\"gpu\"" has the character '"'`}},
		{"gpus_queued{pool=a b}", []string{"has the character ' '"}},
		{"gpus_queued{pool=a=b}", []string{"has the character '='"}},
		{"gpus_queued{device=nvidia//gpu}", []string{"parameter device", "empty part"}},
		{"gpus_queued{device=a/b/c/d}", []string{"parameter device", "4 parts"}},
		{"gpus_queued{device=any/x}", []string{"parameter device", `device "any/x"`, `"any" stands alone`, "want any, type, vendor/type"}},
		{"gpus_queued{device=nvidia/any}", []string{`"any" stands alone`}},
		{"gpus_queued{device=nvidia/mig/any}", []string{`"any" stands alone`}},
		{"gpus_queued{device=any/}", []string{"empty part", "want any, type"}},
		{"gpus_queued{state=queued}", []string{"parameter state", "not one of all, blocked, pending"}},
		{"gpu_alloc_pct{state=blocked}", []string{"state applies only to", "gpu_alloc_pct"}},
		{"gpus_queued{gpus_per_node=8}", []string{"gpus_per_node applies only to nodes_needed"}},
		{"nodes_needed{gpus_per_node=0}", []string{"gpus_per_node", "not a positive integer"}},
		{"nodes_needed{gpus_per_node=eight}", []string{"not a positive integer"}},
		{"nodes_ready{gpus_per_node=8}", []string{"gpus_per_node applies only to nodes_needed, not nodes_ready"}},
		{"nodes_ready{state=blocked}", []string{"parameter state applies only to"}},
		{"nodes_needed{gpus_per_node=-1}", []string{"not a positive integer"}},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			_, err := ParseQuery(c.in)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), "query ") {
				t.Errorf("error %q does not quote the query", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestDeviceCompatible(t *testing.T) {
	spec := func(s string) DeviceSpec { return nomadview.ParseRequest(s) }
	cases := []struct {
		filter, dev string
		want        bool
	}{
		{"nvidia/gpu", "gpu", true},
		{"nvidia/gpu", "nvidia/gpu", true},
		{"nvidia/gpu", "nvidia/gpu/H100", true},
		{"nvidia/gpu", "amd/gpu", false},
		{"nvidia/gpu", "nvidia/mig/1g.10gb", false},
		{"nvidia/mig/1g.10gb", "nvidia/mig", true},
		{"nvidia/mig/1g.10gb", "mig", true},
		{"nvidia/mig/1g.10gb", "nvidia/mig/2g.20gb", false},
		{"gpu", "nvidia/gpu/A100", true},
		{"nvidia/mps", "nvidia/mps/H100", true},
		{"nvidia/mps", "nvidia/gpu", false},
	}
	for _, c := range cases {
		f, err := ParseDeviceSpec(c.filter)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Compatible(spec(c.dev)); got != c.want {
			t.Errorf("%s vs %s: got %v", c.filter, c.dev, got)
		}
	}
}

func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"gpus_queued", "nodes_needed{pool=gpu,gpus_per_node=8}", "gpus_queued{device=nvidia/mig/1g.10gb,state=blocked}", "x{", "{}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := ParseQuery(s)
		if err != nil {
			return
		}
		again, err := ParseQuery(q.String())
		if err != nil || again != q {
			t.Fatalf("%q parsed to %+v, whose String %q parses to %+v, %v", s, q, q.String(), again, err)
		}
	})
}
