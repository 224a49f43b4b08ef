package rendezvous

import (
	"reflect"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// alloc is a member's allocation named name with devices of type typ
// holding ids, and ports.
func alloc(name, typ string, ids []string, ports ...api.PortMapping) *api.AllocationListStub {
	return &api.AllocationListStub{ID: "id-" + name, Name: name, AllocatedResources: &api.AllocatedResources{
		Tasks: map[string]*api.AllocatedTaskResources{"train": {Devices: []*api.AllocatedDeviceResource{
			{Vendor: "nvidia", Type: typ, Name: "H100", DeviceIDs: ids},
		}}},
		Shared: api.AllocatedSharedResources{Ports: ports},
	}}
}

func TestRanks(t *testing.T) {
	rdzv := api.PortMapping{Label: "rendezvous", Value: 24001, HostIP: "10.0.0.1"}
	one := []string{"GPU-a"}
	cases := []struct {
		name    string
		members []MemberAlloc
		want    []Rank
	}{
		{"none", nil, []Rank{}},
		{"group order, then allocation index, not the input's", []MemberAlloc{
			{Group: 1, Alloc: alloc("train.eval[0]", "gpu", one), NodeAddress: "10.0.0.9"},
			{Group: 0, Alloc: alloc("train.worker[10]", "gpu", one), NodeAddress: "10.0.0.3"},
			{Group: 0, Alloc: alloc("train.worker[2]", "gpu", []string{"GPU-b", "GPU-c"}), NodeAddress: "10.0.0.2"},
			{Group: 0, Alloc: alloc("train.worker[0]", "gpu", one, api.PortMapping{Label: "http", Value: 80, HostIP: "10.0.0.1"}, rdzv), NodeAddress: "10.0.0.1"},
		}, []Rank{
			{0, "id-train.worker[0]", "train.worker[0]", "10.0.0.1", 1, 4, "10.0.0.1", 24001},
			{1, "id-train.worker[2]", "train.worker[2]", "10.0.0.2", 2, 4, "10.0.0.1", 24001},
			{2, "id-train.worker[10]", "train.worker[10]", "10.0.0.3", 1, 4, "10.0.0.1", 24001},
			{3, "id-train.eval[0]", "train.eval[0]", "10.0.0.9", 1, 4, "10.0.0.1", 24001},
		}},
		{"the master address is the one the port is reserved on", []MemberAlloc{
			{Group: 0, Alloc: alloc("t.w[0]", "gpu", one, api.PortMapping{Label: "rendezvous", Value: 24001, HostIP: "192.168.1.5"}), NodeAddress: "10.0.0.1"},
			{Group: 0, Alloc: alloc("t.w[1]", "gpu", one), NodeAddress: "10.0.0.2"},
		}, []Rank{
			{0, "id-t.w[0]", "t.w[0]", "10.0.0.1", 1, 2, "192.168.1.5", 24001},
			{1, "id-t.w[1]", "t.w[1]", "10.0.0.2", 1, 2, "192.168.1.5", 24001},
		}},
		{"a port in the group network, or none: the node's address", []MemberAlloc{
			{Group: 0, Alloc: &api.AllocationListStub{ID: "a", Name: "t.w[0]", AllocatedResources: &api.AllocatedResources{Shared: api.AllocatedSharedResources{
				Networks: []*api.NetworkResource{nil, {DynamicPorts: []api.Port{{Label: "rendezvous", Value: 25000}}}}}}}, NodeAddress: "10.0.0.1"},
			{Group: 0, Alloc: &api.AllocationListStub{ID: "b", Name: "t.w[1]"}, NodeAddress: "10.0.0.2"},
		}, []Rank{
			{0, "a", "t.w[0]", "10.0.0.1", 1, 2, "10.0.0.1", 25000},
			{1, "b", "t.w[1]", "10.0.0.2", 1, 2, "10.0.0.1", 25000},
		}},
		{"MIG instances count, MPS shares count their GPU once", []MemberAlloc{
			{Group: 0, Alloc: alloc("t.w[0]", "mig", []string{"MIG-1", "MIG-2"}), NodeAddress: "n1"},
			{Group: 0, Alloc: alloc("t.w[1]", "mps", []string{"GPU-a-mps-0", "GPU-a-mps-1", "GPU-b-mps-0"}), NodeAddress: "n2"},
		}, []Rank{
			{0, "id-t.w[0]", "t.w[0]", "n1", 2, 2, "n1", 0},
			{1, "id-t.w[1]", "t.w[1]", "n2", 2, 2, "n1", 0},
		}},
		{"an unreadable name sorts last", []MemberAlloc{
			{Group: 0, Alloc: alloc("t.w", "gpu", one), NodeAddress: "n1"},
			{Group: 0, Alloc: alloc("t.w[x]", "gpu", one), NodeAddress: "n2"},
			{Group: 0, Alloc: alloc("t.w[1]", "gpu", one), NodeAddress: "n3"},
		}, []Rank{
			{0, "id-t.w[1]", "t.w[1]", "n3", 1, 3, "n3", 0},
			{1, "id-t.w", "t.w", "n1", 1, 3, "n3", 0},
			{2, "id-t.w[x]", "t.w[x]", "n2", 1, 3, "n3", 0},
		}},
	}
	for _, c := range cases {
		got := Ranks(c.members)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Ranks =\n%+v\nwant\n%+v", c.name, got, c.want)
		}
	}
}

func TestHostfile(t *testing.T) {
	got := Hostfile([]Rank{{Address: "10.0.0.1", Slots: 1}, {Address: "10.0.0.2", Slots: 8}})
	if want := "10.0.0.1 slots=1\n10.0.0.2 slots=8\n"; got != want {
		t.Errorf("Hostfile = %q, want %q", got, want)
	}
	if got := Hostfile(nil); got != "" {
		t.Errorf("Hostfile(nil) = %q", got)
	}
}
