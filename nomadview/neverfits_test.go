package nomadview

import (
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

func productLayout(uuid, product string) *api.NodeDeviceResource {
	g := layoutGroup(uuid, 0, "", "whole", false)
	g.Attributes[contract.AttrLayoutProduct] = &api.Attribute{StringVal: &product}
	return g
}

// A queued group whose one allocation asks for more whole GPUs than any
// node of its pool has is said never to fit, naming both counts; one
// that some node could take, one judged against no GPU node (a pool at
// zero) and MIG or MPS asks are not.
func TestNeverFits(t *testing.T) {
	eight := gpuNode("n1", "training", true, group("gpu", "H100", "g1", "g2", "g3", "g4"), group("mps", "GPU-5", "s1", "s2"))
	eight.Datacenter = "dc1"
	for _, u := range []string{"GPU-1", "GPU-2", "GPU-3", "GPU-4", "GPU-5", "GPU-6", "GPU-7", "GPU-8"} {
		eight.NodeResources.Devices = append(eight.NodeResources.Devices, productLayout(u, "H100"))
	}
	four := gpuNode("n2", "hpc", true, group("gpu", "A100", "a1", "a2", "a3", "a4"))
	four.Datacenter = "dc2"
	cpu := &api.NodeListStub{ID: "n3", NodePool: "cpu", Datacenter: "dc1", NodeResources: &api.NodeResources{}}
	s := &Snapshot{Nodes: []*api.NodeListStub{eight, four, cpu}}
	ask := func(pool string, asks ...DeviceAsk) QueuedGroup {
		return QueuedGroup{Pool: pool, Datacenters: []string{"*"}, Asks: asks}
	}
	gpus := func(name string, n int) DeviceAsk { return DeviceAsk{Device: ParseRequest(name), Count: n} }
	cases := []struct {
		name string
		q    QueuedGroup
		want string // "" fits some day
	}{
		{"16 on 8-GPU nodes", ask("training", gpus("nvidia/gpu", 16)), `never fits: asks 16 GPUs on one node, pool "training" nodes have at most 8`},
		{"8 fits once the layouts are whole", ask("training", gpus("nvidia/gpu", 8)), ""},
		{"asks of two tasks add up", ask("hpc", gpus("nvidia/gpu", 3), gpus("gpu", 2)), `asks 5 GPUs on one node, pool "hpc" nodes have at most 4`},
		{"a model the pool lacks", ask("hpc", gpus("nvidia/gpu/H100", 1)), `asks 1 H100 GPUs on one node, pool "hpc" nodes have at most 0`},
		{"pool all: the largest node", ask("all", gpus("nvidia/gpu", 9)), "the cluster's nodes have at most 8"},
		{"pool all: fits", ask("all", gpus("nvidia/gpu", 8)), ""},
		{"datacenters narrow the nodes", QueuedGroup{Pool: "all", Datacenters: []string{"dc2"}, Asks: []DeviceAsk{gpus("nvidia/gpu", 5)}}, "have at most 4"},
		{"a pool without GPU nodes is not judged", ask("cpu", gpus("nvidia/gpu", 1)), ""},
		{"an empty pool is not judged", ask("new", gpus("nvidia/gpu", 64)), ""},
		{"MIG asks are not judged", ask("hpc", gpus("nvidia/mig/1g.10gb", 50)), ""},
		{"other vendors' devices are not judged", ask("hpc", gpus("acme/gpu", 50)), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := s.NeverFits(c.q)
			if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}
