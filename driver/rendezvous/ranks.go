package rendezvous

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// MemberAlloc is one placed member: its allocation (listed with its
// resources), the position of its task group in the job, and its node's
// address (the node's attribute unique.network.ip-address). Alloc is
// never nil.
type MemberAlloc struct {
	Group       int
	Alloc       *api.AllocationListStub
	NodeAddress string
}

// Rank is what one member of a gang is told of itself and its peers.
type Rank struct {
	Rank          int
	AllocID, Name string
	// Address is its node's address; Slots the GPUs it holds (whole GPUs
	// and MIG instances, an MPS share's GPU once), at least 1.
	Address string
	Slots   int
	// WorldSize, MasterAddr and MasterPort are the gang's: its members,
	// and where rank 0 listens on its port labelled rendezvous.
	WorldSize  int
	MasterAddr string
	MasterPort int
}

// Ranks numbers the members: task groups in job order, then allocation
// index (the [i] of the allocation's name). The master port is rank 0's
// rendezvous port; the master address is the address that port is
// reserved on (its host network's), else rank 0's node address.
func Ranks(members []MemberAlloc) []Rank {
	sorted := slices.Clone(members)
	slices.SortStableFunc(sorted, func(a, b MemberAlloc) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(allocIndex(a.Alloc.Name), allocIndex(b.Alloc.Name)))
	})
	out := make([]Rank, len(sorted))
	for i, m := range sorted {
		out[i] = Rank{Rank: i, AllocID: m.Alloc.ID, Name: m.Alloc.Name, Address: m.NodeAddress, Slots: max(1, gpus(m.Alloc)), WorldSize: len(sorted)}
	}
	if len(out) > 0 {
		addr, port := rendezvous(sorted[0].Alloc)
		for i := range out {
			out[i].MasterAddr, out[i].MasterPort = cmp.Or(addr, out[0].Address), port
		}
	}
	return out
}

// Hostfile is Open MPI's hostfile of the ranks: "<address> slots=<GPUs>"
// a line, in rank order.
func Hostfile(ranks []Rank) string {
	var b strings.Builder
	for _, r := range ranks {
		fmt.Fprintf(&b, "%s slots=%d\n", r.Address, r.Slots)
	}
	return b.String()
}

// allocIndex is the i of an allocation name job.group[i]; an unreadable
// name sorts last.
func allocIndex(name string) int {
	open := strings.LastIndexByte(name, '[')
	if open < 0 || !strings.HasSuffix(name, "]") {
		return math.MaxInt
	}
	i, err := strconv.Atoi(name[open+1 : len(name)-1])
	if err != nil || i < 0 {
		return math.MaxInt
	}
	return i
}

// rendezvous is the host address and value of a's port labelled
// rendezvous ("", 0 when it has none).
func rendezvous(a *api.AllocationListStub) (string, int) {
	if a.AllocatedResources == nil {
		return "", 0
	}
	for _, p := range a.AllocatedResources.Shared.Ports {
		if p.Label == contract.GangRendezvousPort {
			return p.HostIP, p.Value
		}
	}
	for _, n := range a.AllocatedResources.Shared.Networks {
		if n == nil {
			continue
		}
		for _, p := range append(slices.Clone(n.ReservedPorts), n.DynamicPorts...) {
			if p.Label == contract.GangRendezvousPort {
				return n.IP, p.Value
			}
		}
	}
	return "", 0
}

// gpus counts a's whole GPUs and MIG instances, and the GPUs of its MPS
// shares once each.
func gpus(a *api.AllocationListStub) int {
	if a.AllocatedResources == nil {
		return 0
	}
	seen := map[string]bool{}
	for _, t := range a.AllocatedResources.Tasks {
		if t == nil {
			continue
		}
		for _, d := range t.Devices {
			if d == nil || d.Vendor != contract.Vendor {
				continue
			}
			for _, id := range d.DeviceIDs {
				if gpu, _, ok := contract.ParseShareID(id); ok && d.Type == contract.SliceMPS {
					id = gpu
				}
				seen[id] = true
			}
		}
	}
	return len(seen)
}

// Of is the rank of the allocation allocID; ok is false when it has none.
func Of(ranks []Rank, allocID string) (r Rank, ok bool) {
	for _, r := range ranks {
		if r.AllocID == allocID {
			return r, true
		}
	}
	return Rank{}, false
}

// Env is the task environment a member of rank r starts with
// (contract.EnvGang*), hostfile the path its hostfile is written to.
func (r Rank) Env(hostfile string) map[string]string {
	return map[string]string{
		contract.EnvGangRank:       strconv.Itoa(r.Rank),
		contract.EnvGangWorldSize:  strconv.Itoa(r.WorldSize),
		contract.EnvGangMasterAddr: r.MasterAddr,
		contract.EnvGangMasterPort: strconv.Itoa(r.MasterPort),
		contract.EnvGangHostfile:   hostfile,
	}
}
