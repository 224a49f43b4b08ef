// Package rendezvous is how a member of a gang (docs/design/gangs.md)
// learns its peers before its task starts: its rank, the world size, rank
// 0's address and port, and a hostfile of every member. Training launchers
// (torchrun, mpirun) need all of it before they start, and a member
// started before its peers are placed would only hang in its first
// collective call. The gpu driver, starting a member, reads the job and
// its allocations from Nomad until every member is placed and no earlier
// run of the gang is still stopping (its last checkpoint is what the gang
// restores), then numbers the members. Every member reads the same
// allocations, so every member computes the same numbering.
//
// The rules are pure (a job, its allocations); the driver does the
// reading. Node plugins link nothing of the controller: the controller
// decides when a gang is placed, this package only what its members are
// told.
package rendezvous

import (
	"errors"
	"fmt"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// Group is one task group of a gang and its members, in job order.
type Group struct {
	Name    string
	Members int
}

// Groups are the job's groups that declare members (group meta
// nomad_gpu_gang_members), in job order. A value that is no count ≥ 1 is
// an error naming the group and the key; the controller refuses such a
// gang, so a member meets it only when the job was changed under it.
func Groups(job *api.Job) ([]Group, error) {
	var out []Group
	for _, g := range job.TaskGroups {
		v, ok := g.Meta[contract.MetaGangMembers]
		if !ok {
			continue
		}
		name := ""
		if g.Name != nil {
			name = *g.Name
		}
		n, err := contract.GangMembers(v)
		if err != nil {
			return nil, fmt.Errorf("group %q meta.%s: %w", name, contract.MetaGangMembers, err)
		}
		out = append(out, Group{name, n})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("job %q: no group declares meta.%s; allowed: one or more that do", deref(job.ID), contract.MetaGangMembers)
	}
	return out, nil
}

// Gathered is what a member sees of its gang at one reading.
type Gathered struct {
	// Members are the gang's live allocations on nodes (NodeAddress not yet
	// filled); Whole says they are all there and nothing else runs.
	Members []MemberAlloc
	// Want is the gang's world size: its groups' members summed.
	Want int
	// Stopping are allocations of an earlier run of the gang that have
	// been told to stop but whose tasks still run (and may still commit a
	// checkpoint).
	Stopping []string
}

// Whole says every member is placed and no earlier run is stopping.
func (g Gathered) Whole() bool { return len(g.Members) == g.Want && len(g.Stopping) == 0 }

// String says what the gang waits for, for the member's task events.
func (g Gathered) String() string {
	s := fmt.Sprintf("%d of %d members placed", len(g.Members), g.Want)
	if len(g.Stopping) > 0 {
		s += fmt.Sprintf(", %d allocations of its previous run still stopping (%s first)", len(g.Stopping), short(g.Stopping[0]))
	}
	return s
}

// ErrNotMember is Gather's answer when self is no live member: Nomad has
// told it to stop (the controller rolled the gang back, or the job was
// stopped), so it must not start.
var ErrNotMember = errors.New("this allocation is no longer a live member of its gang (told to stop: the gang was rolled back or stopped)")

// Gather sorts the job's allocations (listed with their resources) into
// the gang's live members and the stopping rest, for the allocation self.
// A live member is one Nomad wants running, placed on a node, and not
// finished; an allocation of a group that is not the gang's is left out.
func Gather(groups []Group, allocs []*api.AllocationListStub, self string) (Gathered, error) {
	g := Gathered{}
	index := map[string]int{}
	for i, gr := range groups {
		index[gr.Name] = i
		g.Want += gr.Members
	}
	selfLive := false
	for _, a := range allocs {
		if a == nil {
			continue
		}
		gi, ok := index[a.TaskGroup]
		if !ok || terminal(a.ClientStatus) {
			continue
		}
		if a.DesiredStatus != api.AllocDesiredStatusRun {
			if a.ClientStatus == api.AllocClientStatusRunning {
				g.Stopping = append(g.Stopping, a.ID)
			}
			continue
		}
		if a.NodeID == "" {
			continue
		}
		selfLive = selfLive || a.ID == self
		g.Members = append(g.Members, MemberAlloc{Group: gi, Alloc: a})
	}
	if !selfLive {
		return Gathered{}, ErrNotMember
	}
	return g, nil
}

func terminal(clientStatus string) bool {
	switch clientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return true
	}
	return false
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
