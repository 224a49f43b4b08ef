package driver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/driver/checkpoint"
	"github.com/nomad-gpu/nomad-gpu/driver/rendezvous"
	"github.com/nomad-gpu/nomad-gpu/internal/atomicfile"
)

// gangPoll is how often a waiting member reads its gang again.
const gangPoll = 500 * time.Millisecond

// gangHostfile is the hostfile's name in the task's local/ directory.
const gangHostfile = "gang-hostfile"

// joinGang holds a gang member's start until every member of its gang is
// placed and no earlier run of the gang is still stopping (at most the
// plugin config's gang.wait), then hands the
// task its rank, the world size, rank 0's address and port and a hostfile
// (package rendezvous). A task that is no gang member passes at once.
func (d *Driver) joinGang(rt *runtimeState, t *task, p *startPlan) error {
	if p.cfg.Env["NOMAD_META_"+contract.MetaGang] != "true" {
		return nil
	}
	wait := d.config().Gang.Wait
	deadline := time.Now().Add(wait)
	addrs := map[string]string{}
	said := ""
	for {
		v, err := d.readGang(rt, t, addrs)
		switch {
		case errors.Is(err, rendezvous.ErrNotMember):
			return fmt.Errorf("gang: %w", err)
		case err != nil:
			d.logger.Warn("gang: its members cannot be read; trying again", "task", t.id, "error", err)
		case v.ranks != nil:
			return d.startAsRank(t, p, v)
		case v.gathered.String() != said:
			said = v.gathered.String()
			d.emit(t, "gang: waiting for its members: "+said, nil)
		}
		if time.Now().After(deadline) {
			why := said
			if err != nil {
				why = err.Error()
			}
			return fmt.Errorf("gang: still waiting after %s, the plugin's gang.wait (%s); the controller (nomad-gpu controller, gangs on) admits a gang whole and rolls back a partial one", wait, why)
		}
		select {
		case <-d.ctx.Done():
			return d.ctx.Err()
		case <-time.After(gangPoll):
		}
	}
}

// gangView is one reading of a member's gang.
type gangView struct {
	job      *api.Job
	groups   []rendezvous.Group
	gathered rendezvous.Gathered
	// ranks are the members numbered, once the gang is whole; nil before.
	ranks []rendezvous.Rank
}

// readGang reads the gang once. addrs caches node addresses by node ID.
func (d *Driver) readGang(rt *runtimeState, t *task, addrs map[string]string) (gangView, error) {
	ctx, cancel := context.WithTimeout(d.ctx, stopReasonTimeout)
	defer cancel()
	var v gangView
	job, allocs, err := rt.nomad.Gang(ctx, t.cfg.Namespace, t.cfg.JobID)
	if err != nil {
		return v, err
	}
	v.job = job
	if v.groups, err = rendezvous.Groups(job); err != nil {
		return v, err
	}
	if v.gathered, err = rendezvous.Gather(v.groups, allocs, t.cfg.AllocID); err != nil || !v.gathered.Whole() {
		return v, err
	}
	members := v.gathered.Members
	for i, m := range members {
		addr, ok := addrs[m.Alloc.NodeID]
		if !ok {
			if addr, err = rt.nomad.NodeAddress(ctx, m.Alloc.NodeID); err != nil {
				return v, err
			}
			addrs[m.Alloc.NodeID] = addr
		}
		members[i].NodeAddress = addr
	}
	v.ranks = rendezvous.Ranks(members)
	return v, nil
}

// startAsRank writes the hostfile into the task's local/ directory, adds
// the member's rendezvous variables to its environment, and notes its
// gang's checkpoint keys for the restore.
func (d *Driver) startAsRank(t *task, p *startPlan, v gangView) error {
	self, ok := rendezvous.Of(v.ranks, t.cfg.AllocID)
	if !ok {
		return fmt.Errorf("gang: allocation %s is not among its gang's members", t.cfg.AllocID)
	}
	local := p.cfg.Env["NOMAD_TASK_DIR"]
	if local == "" {
		local = filepath.Join(dirsOf(p.cfg).task, "local")
	}
	hostfile := filepath.Join(local, gangHostfile)
	// Replaced, never written through: the task may have left a link there.
	if err := atomicfile.Replace(hostfile, []byte(rendezvous.Hostfile(v.ranks)), 0o644); err != nil {
		return fmt.Errorf("gang: writing the hostfile: %w", err)
	}
	p.gangEnv = self.Env(hostfile)
	p.gangKeys = gangKeys(t.cfg.Namespace, v.job, v.groups)
	d.emit(t, fmt.Sprintf("gang: rank %d of %d; master %s:%d", self.Rank, self.WorldSize, self.MasterAddr, self.MasterPort),
		map[string]string{"rank": fmt.Sprint(self.Rank), "world_size": fmt.Sprint(self.WorldSize)})
	return nil
}

// gangKeys are the checkpoint keys of every member of the gang: each gang
// group's members times its tasks that checkpoint on this driver.
func gangKeys(namespace string, job *api.Job, groups []rendezvous.Group) []checkpoint.Key {
	var keys []checkpoint.Key
	for _, g := range groups {
		for _, tg := range job.TaskGroups {
			if tg.Name == nil || *tg.Name != g.Name {
				continue
			}
			for _, task := range tg.Tasks {
				if task.Driver != contract.DriverName {
					continue
				}
				if _, ok := task.Config[contract.DriverCheckpointBlock]; !ok {
					continue
				}
				for i := range g.Members {
					keys = append(keys, checkpoint.Key{Namespace: namespace, Job: *job.ID, Group: g.Name, Task: task.Name, AllocIndex: i})
				}
			}
		}
	}
	return keys
}

// gangRestore is the rule a gang member's checkpoints restore by: the
// newest step every member committed, or none when they have none in
// common (the gang then starts afresh, every member alike). what says
// which, for the task's events. A gang of one member (a team queue's
// held job) has no peer to line up with, and its commits need name no
// step: it restores its newest generation, as any task ("" for what).
func gangRestore(store *checkpoint.Store, keys []checkpoint.Key) (rule checkpoint.RestoreRule, step *int64, what string, err error) {
	if len(keys) == 1 {
		return checkpoint.RestoreNewest, nil, "", nil
	}
	steps, err := store.CommittedSteps(keys)
	if err != nil {
		return nil, nil, "", fmt.Errorf("reading the gang's checkpoints: %w", err)
	}
	s, ok := checkpoint.ConsistentStep(steps)
	if !ok {
		return checkpoint.RestoreNone, nil, fmt.Sprintf("gang: no checkpoint step committed by all %d members; the gang starts afresh", len(keys)), nil
	}
	return checkpoint.RestoreStep(s), &s, fmt.Sprintf("gang: restoring step %d, the newest committed by all %d members", s, len(keys)), nil
}
