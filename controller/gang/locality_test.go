package gang

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// Domains group the nodes by datacenter (when they span several) and by
// the locality's value, and order them tightest fit first, then the
// roomiest of those that do not fit.
func TestDomains(t *testing.T) {
	rack := func(dc, v string, free int) Place {
		return Place{Datacenter: dc, Value: v, Known: true, FreeGPUs: free}
	}
	for _, tc := range []struct {
		name     string
		places   []Place
		locality string
		need     int
		want     []string // String() and free GPUs of each, in order
	}{
		{"one datacenter, no locality: no pin", []Place{rack("dc1", "", 4), rack("dc1", "", 4)}, "", 8, []string{"=8"}},
		{"two datacenters: pinned to one", []Place{rack("dc1", "", 4), rack("dc2", "", 8), rack("dc2", "", 2)}, "", 4,
			[]string{"${node.datacenter}=dc1=4", "${node.datacenter}=dc2=10"}},
		{"racks: tightest fit first, then the roomiest", []Place{rack("dc1", "a", 8), rack("dc1", "b", 4), rack("dc1", "b", 1), rack("dc1", "c", 2), rack("dc1", "d", 3)}, "${meta.rack}", 4,
			[]string{"${meta.rack}=b=5", "${meta.rack}=a=8", "${meta.rack}=d=3", "${meta.rack}=c=2"}},
		{"nodes without the attribute are no domain's", []Place{rack("dc1", "a", 8), {Datacenter: "dc1", FreeGPUs: 8}}, "${meta.rack}", 4, []string{"${meta.rack}=a=8"}},
		{"no node has it", []Place{{Datacenter: "dc1", FreeGPUs: 8}}, "${meta.rack}", 4, nil},
		{"racks across datacenters", []Place{rack("dc1", "a", 4), rack("dc2", "a", 4)}, "${meta.rack}", 4,
			[]string{"${meta.rack}=a, ${node.datacenter}=dc1=4", "${meta.rack}=a, ${node.datacenter}=dc2=4"}},
		{"the locality is the datacenter", []Place{rack("dc1", "dc1", 4), rack("dc2", "dc2", 6)}, "${node.datacenter}", 4,
			[]string{"${node.datacenter}=dc1=4", "${node.datacenter}=dc2=6"}},
	} {
		var got []string
		for _, d := range Domains(tc.places, tc.locality, tc.need) {
			got = append(got, fmt.Sprintf("%s=%d", d, d.FreeGPUs))
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// Pin adds one constraint per pin and records them; Unpin takes off
// exactly those, keeping the user's own; a job pinned again drops the
// earlier pins first.
func TestPinUnpin(t *testing.T) {
	own := &api.Constraint{LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "linux"}
	userRack := &api.Constraint{LTarget: "${meta.rack}", Operand: "=", RTarget: "a"}
	job := &api.Job{ID: new("train"), Meta: map[string]string{"nomad_gpu_gang": "true"}, Constraints: []*api.Constraint{own}}
	a := Pin(job, Domain{Pins: map[string]string{"${meta.rack}": "a", DatacenterAttr: "dc1"}})
	if len(job.Constraints) != 1 || len(job.Meta) != 1 {
		t.Fatalf("Pin modified the job: %+v", job)
	}
	if len(a.Constraints) != 3 || a.Meta[contract.MetaGangPinned] != `{"${meta.rack}":"a","${node.datacenter}":"dc1"}` {
		t.Fatalf("pinned: constraints %v, meta %v", a.Constraints, a.Meta)
	}
	b := Pin(a, Domain{Pins: map[string]string{"${meta.rack}": "b"}})
	if len(b.Constraints) != 2 || *b.Constraints[1] != (api.Constraint{LTarget: "${meta.rack}", Operand: "=", RTarget: "b"}) {
		t.Errorf("pinned again: constraints %v", b.Constraints)
	}
	if u := Unpin(b); len(u.Constraints) != 1 || *u.Constraints[0] != *own || len(u.Meta) != 1 {
		t.Errorf("unpinned: constraints %v, meta %v", u.Constraints, u.Meta)
	}
	// A constraint the user wrote that equals a pin stays: only one is
	// taken off per pin recorded.
	withUsers := *a
	withUsers.Constraints = append([]*api.Constraint{userRack}, a.Constraints...)
	if u := Unpin(&withUsers); len(u.Constraints) != 2 || *u.Constraints[1] != *own {
		t.Errorf("unpinned with the user's own rack constraint: %v", u.Constraints)
	}
	if u := Unpin(job); u != job {
		t.Error("a job never pinned is copied")
	}
}
