package controller

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/gang"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Reservations (docs/design/gangs.md, reservations). When the gang at the
// head of the queue was refused by Nomad's plan, the leader keeps for it
// the nodes expected to free soonest (gang.Choose, on the sizer's runtime
// forecasts) with a placeholder job of its own: 1-GPU allocations pinned
// to those nodes, one above the gang's priority, so that each GPU that
// frees there goes to the placeholder before the queue (measured: at the
// gang's own priority the older queue goes first). Once the placeholder
// holds every GPU the members need, the leader hands them over: it
// registers the gang with its members ten above the placeholder and
// pinned to the reserved nodes (handover), when its plan preempts the
// placeholder's allocations and nothing else (checked), so the GPUs pass
// from one to the other in one plan, with no window for the queue.
// (Measured: stopping the placeholder and scaling the gang at once lost a
// member's node to a small job submitted in between; unpinned, a raised
// plan preferred lower work on another node as victims.) Once every
// member is placed the placeholder is stopped and the raise and pin are
// undone in place (restore). This
// needs Nomad's preemption on for batch jobs; where a raised plan does
// not place the gang, the leader stops the placeholder and admits it
// anyway, racing the queue. One reservation at a time, held MaxHold at
// most, for a gang or for a job that is no gang (reservejob.go),
// whichever heads the queue.

// ReserveConfig bounds reservations.
type ReserveConfig struct {
	// MaxHold is the longest a reservation holds; its gang is not kept
	// again for as long.
	MaxHold time.Duration
}

// DefaultReserveConfig is what the controller's flags default to.
func DefaultReserveConfig() ReserveConfig { return ReserveConfig{MaxHold: time.Hour} }

// reservation is the one the leader holds.
type reservation struct {
	gang JobKey
	// placeholder is its job; gpus the GPUs it holds when full.
	placeholder JobKey
	gpus        int
	nodes       []string
	due, since  time.Time
	// counted is when its idle GPU-time was last counted.
	counted time.Time
	// admitted: the gang was admitted on it; the placeholder goes once
	// every member is placed.
	admitted bool
	// priority is the placeholder's; members the gang's.
	priority, members int
	// admittedAt is when the gang was admitted on it.
	admittedAt time.Time
	// single is what a reservation for a job that is no gang keeps
	// (reservejob.go); nil for a gang's.
	single *singleJob
	// backfilled are the jobs raised onto its GPUs (backfill.go); tried
	// the ones whose plan was refused, with the GPUs the placeholder held
	// then.
	backfilled map[JobKey]backfilled
	tried      map[JobKey]int
}

// maxJobPriority is Nomad's highest job priority (job_max_priority's
// default): a gang whose placeholder is within ten of it is not raised.
const maxJobPriority = 100

// reserver is the reservation module's state, the gang module's.
type reserver struct {
	cfg ReserveConfig
	cur *reservation
	// resting are the gangs whose reservation expired, until when they
	// are not kept again.
	resting map[JobKey]time.Time
	// idle counts GPU-seconds held idle by placeholders.
	idle func(gpuSeconds float64)
	// ends are the predicted ends of the snapshot's allocations, by ID
	// (forecastEnds), runtimes the predicted run times of its queued
	// groups (queuedRuntimes); tests give their own.
	ends     func(snap *nomadview.Snapshot, now time.Time) map[string]time.Time
	runtimes func(snap *nomadview.Snapshot, now time.Time) map[groupKey]time.Duration
}

// reserve runs the module on the waiting gangs (queue order). planned says
// it asked Nomad for a plan this tick.
func (g *Gangs) reserve(ctx context.Context, now time.Time, snap *nomadview.Snapshot, free string, waiting []waitingGang, n gangNomad) (out []Decision, planned bool) {
	r := g.reserver
	maps.DeleteFunc(r.resting, func(_ JobKey, until time.Time) bool { return now.After(until) })
	if d := g.dropOrphan(ctx, snap, n); d != nil {
		out = append(out, *d)
	}
	switch {
	case r.cur != nil && r.cur.single != nil:
		return append(out, g.holdJobReservation(ctx, now, snap, n)...), false
	case r.cur != nil:
		return g.holdReservation(ctx, now, snap, free, waiting, n)
	}
	var head *waitingGang
	for _, w := range waiting {
		if _, refused := g.refused[w.k]; !refused {
			continue
		}
		if _, ok := r.resting[w.k]; ok {
			continue
		}
		head = &w
		break
	}
	if b, ok := g.blockedHead(snap); ok && (head == nil || b.before(snap, *head)) {
		return append(out, g.startJobReservation(ctx, now, snap, b, n)...), false
	}
	if head != nil {
		return append(out, g.startReservation(ctx, now, snap, *head, n)...), false
	}
	return out, false
}

// dropOrphan stops one placeholder a tick that no reservation of this
// leader holds: a dead leader's.
func (g *Gangs) dropOrphan(ctx context.Context, snap *nomadview.Snapshot, n gangNomad) *Decision {
	for k, j := range snap.Jobs {
		gangID := j.Meta[contract.MetaReservationFor]
		if gangID == "" || j.Stop || (g.reserver.cur != nil && g.reserver.cur.placeholder == k) {
			continue
		}
		if err := n.deregister(ctx, k); err != nil {
			g.log.Warn("reservation: a placeholder no reservation holds not stopped; tried on the next tick", "job", k.ID, "error", err)
			return nil
		}
		return &Decision{Kind: "reservation-ended", Job: JobKey{Namespace: k.Namespace, ID: gangID}, Reason: "its placeholder " + k.ID + " held by no reservation of this leader (a leader before it died): stopped"}
	}
	return nil
}

// startReservation keeps nodes for w, the head of the queue.
func (g *Gangs) startReservation(ctx context.Context, now time.Time, snap *nomadview.Snapshot, w waitingGang, n gangNomad) []Decision {
	device, per, ok := memberAsk(w.job, w.spec)
	if !ok {
		return nil
	}
	members := w.spec.Members()
	res, ok := g.chooseIn(ctx, now, snap, w, members, per, n)
	if !ok {
		return nil
	}
	ph := placeholderJob(w.k, w.job, res.Nodes, members*per, device)
	if _, _, err := n.register(ctx, ph, 0); err != nil {
		g.log.Warn("reservation: placeholder not registered; tried on the next tick", "namespace", w.k.Namespace, "job", w.k.ID, "error", err)
		return nil
	}
	g.reserver.cur = &reservation{gang: w.k, placeholder: JobKey{Namespace: w.k.Namespace, ID: *ph.ID}, gpus: members * per,
		nodes: res.Nodes, due: res.Due, since: now, counted: now, priority: *ph.Priority, members: members,
		backfilled: map[JobKey]backfilled{}, tried: map[JobKey]int{}}
	return []Decision{{Kind: "reserved", Job: w.k, Reason: fmt.Sprintf("nodes %s kept for its %d members of %d GPUs; expected free in %s; held by job %s, priority %d",
		strings.Join(nodeNames(snap, res.Nodes), ", "), members, per, res.Due.Sub(now).Round(time.Second), *ph.ID, *ph.Priority)}}
}

// chooseIn is the reservation for the gang in the domain whose nodes
// are expected to free soonest (gang.Choose in each; its locality is
// then kept by the handover's pin to the chosen nodes); false when no
// domain has one or its nodes are not all read yet.
func (g *Gangs) chooseIn(ctx context.Context, now time.Time, snap *nomadview.Snapshot, w waitingGang, members, per int, n gangNomad) (gang.Reservation, bool) {
	doms, complete := g.domains(ctx, snap, w.job, w.spec, n)
	if !complete {
		return gang.Reservation{}, false
	}
	ends := g.reserver.ends(snap, now)
	all := snap.JobNodes(w.job)
	var best gang.Reservation
	found := false
	for _, d := range doms {
		nodes := all
		if d.Pins != nil {
			nodes = slices.DeleteFunc(slices.Clone(all), func(n *api.NodeListStub) bool { return !slices.Contains(d.Nodes, n.ID) })
		}
		if res, ok := gang.Choose(outlook(snap, nodes, ends), members, per, now); ok && (!found || res.Due.Before(best.Due)) {
			best, found = res, true
		}
	}
	return best, found
}

// holdReservation counts the reservation's idle GPUs, ends it when its
// gang no longer waits or it held too long, backfills its GPUs while it
// fills, and admits the gang once the placeholder (with movable
// backfilled jobs) holds every GPU.
func (g *Gangs) holdReservation(ctx context.Context, now time.Time, snap *nomadview.Snapshot, free string, waiting []waitingGang, n gangNomad) ([]Decision, bool) {
	r, c := g.reserver, g.reserver.cur
	held := placeholderRunning(snap, c.placeholder)
	r.idle(float64(held) * now.Sub(c.counted).Seconds())
	c.counted = now
	i := slices.IndexFunc(waiting, func(w waitingGang) bool { return w.k == c.gang })
	switch {
	case c.admitted && i >= 0 && now.Sub(c.admittedAt) > g.cfg.AdmitTimeout:
		return g.endReservation(ctx, n, "reservation-ended", "its gang, admitted on it, waits again (rolled back or requeued)"), false
	case c.admitted:
		return g.admittedOnReservation(ctx, snap, n), false
	case i < 0:
		return g.endReservation(ctx, n, "reservation-ended", "its gang no longer waits (admitted, stopped or gone)"), false
	case now.Sub(c.since) > r.cfg.MaxHold:
		r.resting[c.gang] = now.Add(r.cfg.MaxHold)
		return g.endReservation(ctx, n, "reservation-expired", fmt.Sprintf("held %s, the most a reservation holds; not kept again for as long", r.cfg.MaxHold)), false
	case held+movableHeld(snap, c) < c.gpus:
		if job := snap.Jobs[c.placeholder]; job == nil || job.Stop {
			ph := placeholderJob(c.gang, waiting[i].job, c.nodes, c.gpus, mustAsk(waiting[i]))
			if _, _, err := n.register(ctx, ph, 0); err != nil {
				g.log.Warn("reservation: placeholder not registered again; tried on the next tick", "job", c.gang.ID, "error", err)
			}
			return nil, false
		}
		return g.backfill(ctx, now, snap, held, n), false
	}
	// Full: the placeholder's GPUs pass to the gang, raised above it so
	// that its plan preempts the placeholder and nothing else.
	w := waiting[i]
	if out, ok := g.admitRaised(ctx, now, w, c, n); ok {
		return out, true
	}
	// Its raised plan would not: stop the placeholder and race the queue.
	if err := n.deregister(ctx, c.placeholder); err != nil {
		g.log.Warn("reservation: placeholder not stopped; tried on the next tick", "job", c.placeholder.ID, "error", err)
		return nil, true
	}
	out := g.admit(ctx, now, snap, free, w.k, w.job, w.spec, n, nil)
	if slices.ContainsFunc(out, func(d Decision) bool { return d.Kind == "gang-admitted" }) {
		c.admitted, c.admittedAt = true, now
		return append(out, g.admittedOn(now, c)), true
	}
	return out, true // the placeholder is registered again on the next tick
}

func (g *Gangs) admittedOn(now time.Time, c *reservation) Decision {
	return Decision{Kind: "reservation-ended", Job: c.gang, Reason: fmt.Sprintf("admitted on the %d GPUs kept for it, after %s", c.gpus, now.Sub(c.since).Round(time.Second))}
}

// admitRaised admits the gang registered with its members, raised ten
// above the placeholder and its own priority kept in its meta, when
// Nomad's plan of that places every member preempting the placeholder's
// allocations and nothing else; ok is false when it does not.
func (g *Gangs) admitRaised(ctx context.Context, now time.Time, w waitingGang, c *reservation, n gangNomad) ([]Decision, bool) {
	own := 50
	if w.job.Priority != nil {
		own = *w.job.Priority
	}
	if c.priority+10 > maxJobPriority {
		return nil, false
	}
	prio := max(own, c.priority+10)
	raised := handover(withCounts(w.job, membersOf(w.spec)), own, prio, c.nodes)
	plan, why := handoverPlan(ctx, raised, c, true, n)
	if why != "" {
		return nil, false
	}
	resp, _, err := n.register(ctx, raised, plan.JobModifyIndex)
	if err != nil {
		g.log.Warn("reservation: the gang not registered raised; tried on the next tick", "job", w.k.ID, "error", err)
		return nil, true
	}
	g.admitted[w.k], g.admittedAt[w.k], g.wrote[w.k] = now, resp.JobModifyIndex, resp.JobModifyIndex
	delete(g.waiting, w.k)
	delete(g.refused, w.k)
	c.admitted, c.admittedAt = true, now
	return []Decision{
		{Kind: "gang-admitted", Job: w.k, Reason: fmt.Sprintf("on its reservation, at priority %d (its own %d) over the placeholder's %d: Nomad's plan places all %d members", prio, own, c.priority, w.spec.Members())},
		g.admittedOn(now, c),
	}, true
}

// restorePriority gives a gang admitted on its reservation its own
// priority back, and takes its pin off, once every member is placed.
func (g *Gangs) restorePriority(ctx context.Context, k JobKey, job *api.Job, st GangStatus, n gangNomad) []Decision {
	if st.Placed < st.Wanted {
		return nil
	}
	return g.restore(ctx, k, job, "every member is placed on its reservation", n)
}

// restore registers job at its own priority without its handover's pin
// (unreserved), guarded by its modify index: an update in place (its
// meta, which tasks see, stays as it was, so nothing is replaced).
func (g *Gangs) restore(ctx context.Context, k JobKey, job *api.Job, why string, n gangNomad) []Decision {
	back := unreserved(job)
	if back == job {
		return nil
	}
	index := uint64(0)
	if job.JobModifyIndex != nil {
		index = *job.JobModifyIndex
	}
	if _, _, err := n.register(ctx, back, index); err != nil {
		g.log.Warn("reservation: own priority not restored; tried on the next tick", "job", k.ID, "error", err)
		return nil
	}
	return []Decision{{Kind: "restored", Job: k, Reason: fmt.Sprintf("priority %d, its own, and its pin to the reserved nodes taken off, now that %s", *back.Priority, why)}}
}

// handover is a copy of job for its reservation's handover: at prio,
// its own priority kept in meta, pinned to the reserved nodes (a
// constraint on ${node.unique.id}, its pattern kept in meta) so that
// Nomad places it there, preempting the placeholder, and nowhere else.
func handover(job *api.Job, own, prio int, nodes []string) *api.Job {
	cp := *job
	cp.Priority = &prio
	pin := nodesPattern(nodes)
	cp.Meta = maps.Clone(job.Meta)
	if cp.Meta == nil {
		cp.Meta = map[string]string{}
	}
	cp.Meta[contract.MetaReservationOwnPriority] = strconv.Itoa(own)
	cp.Meta[contract.MetaReservationPin] = pin
	cp.Constraints = append(slices.Clone(job.Constraints), nodesConstraint(pin))
	return &cp
}

// unreserved is job without its handover: the constraint its pin added
// taken off and its own priority (meta) back; job itself when it carries
// no such constraint. The constraint, not the meta (which stays), says a
// handover is in force: a priority changed by hand after it is kept.
func unreserved(job *api.Job) *api.Job {
	pin := nodesConstraint(job.Meta[contract.MetaReservationPin])
	if !slices.ContainsFunc(job.Constraints, func(c *api.Constraint) bool { return c != nil && *c == *pin }) {
		return job
	}
	cp := *job
	if own, err := strconv.Atoi(job.Meta[contract.MetaReservationOwnPriority]); err == nil {
		cp.Priority = &own
	}
	cp.Constraints = slices.DeleteFunc(slices.Clone(job.Constraints), func(c *api.Constraint) bool { return c != nil && *c == *pin })
	return &cp
}

// handoverPlan is Nomad's plan of a handover (or backfill) copy, and why
// it cannot take the reservation's GPUs in one plan ("" when it can: it
// places everything, preempting the placeholder's allocations only, and,
// with movable, those of jobs backfilled as movable).
func handoverPlan(ctx context.Context, raised *api.Job, c *reservation, movable bool, n gangNomad) (*api.JobPlanResponse, string) {
	if *raised.Priority > maxJobPriority {
		return nil, fmt.Sprintf("a raise to %d passes Nomad's highest priority", *raised.Priority)
	}
	plan, err := n.plan(ctx, raised)
	if err != nil {
		return nil, "Nomad's plan failed: " + err.Error()
	}
	if ok, why := gang.Admit(plan); !ok {
		return nil, "its raised plan does not place it: " + why
	}
	if plan.Annotations != nil {
		for _, a := range plan.Annotations.PreemptedAllocs {
			if a == nil {
				continue
			}
			k := JobKey{Namespace: a.Namespace, ID: a.JobID}
			if k != c.placeholder && !(movable && c.backfilled[k].movable) {
				return nil, "its raised plan would preempt other work"
			}
		}
	}
	return plan, ""
}

// admittedOnReservation stops the placeholder once every member of the
// gang admitted on it is placed (restorePriority gives the gang its own
// priority back).
func (g *Gangs) admittedOnReservation(ctx context.Context, snap *nomadview.Snapshot, n gangNomad) []Decision {
	c := g.reserver.cur
	placed := 0
	for _, a := range snap.Allocs {
		if a.JobID == c.gang.ID && a.Namespace == c.gang.Namespace && a.DesiredStatus == api.AllocDesiredStatusRun && a.NodeID != "" {
			placed++
		}
	}
	if placed < c.members && snap.Jobs[c.gang] != nil {
		return nil
	}
	if err := n.deregister(ctx, c.placeholder); err != nil {
		g.log.Warn("reservation: placeholder not stopped; tried on the next tick", "job", c.placeholder.ID, "error", err)
		return nil
	}
	g.reserver.cur = nil
	return nil
}

// endReservation stops the placeholder and drops the reservation.
func (g *Gangs) endReservation(ctx context.Context, n gangNomad, kind, why string) []Decision {
	c := g.reserver.cur
	if err := n.deregister(ctx, c.placeholder); err != nil {
		g.log.Warn("reservation: placeholder not stopped; tried on the next tick", "job", c.placeholder.ID, "error", err)
		return nil
	}
	g.reserver.cur = nil
	return []Decision{{Kind: kind, Job: c.gang, Reason: why}}
}

// placeholderRunning counts the placeholder's running allocations.
func placeholderRunning(snap *nomadview.Snapshot, k JobKey) int {
	n := 0
	for _, a := range snap.Allocs {
		if a.JobID == k.ID && a.Namespace == k.Namespace && a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun {
			n++
		}
	}
	return n
}

// memberAsk is the whole-GPU request of the gang's members and its count,
// when every member group asks the same number of whole GPUs: what a
// placeholder can keep, one GPU an allocation.
func memberAsk(job *api.Job, spec gang.Spec) (*api.RequestedDevice, int, bool) {
	var ask *api.RequestedDevice
	per := 0
	for _, sg := range spec.Groups {
		tg := groupNamed(job, sg.Name)
		if tg == nil {
			return nil, 0, false
		}
		last, n := wholeGPUAsk(tg)
		if n == 0 || (per != 0 && n != per) {
			return nil, 0, false
		}
		ask, per = last, n
	}
	return ask, per, ask != nil
}

// wholeGPUAsk is how many whole GPUs one allocation of group tg asks
// for, over its tasks, and the last such device request.
func wholeGPUAsk(tg *api.TaskGroup) (*api.RequestedDevice, int) {
	var ask *api.RequestedDevice
	n := 0
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if d != nil && d.Count != nil && nomadview.ParseRequest(d.Name).Type == contract.SliceGPU {
				ask, n = d, n+int(*d.Count)
			}
		}
	}
	return ask, n
}

func mustAsk(w waitingGang) *api.RequestedDevice {
	d, _, _ := memberAsk(w.job, w.spec)
	return d
}

// forecastEnds are the sizer's predicted ends of the snapshot's
// allocations (their last GPU task's), by allocation ID; one without a
// prediction is missing.
func forecastEnds(snap *nomadview.Snapshot, now time.Time) map[string]time.Time {
	ends := map[string]time.Time{}
	for _, t := range sizing.ForecastOf(snap, now).Tasks {
		if t.Remaining.Known {
			if at := now.Add(time.Duration(t.Remaining.Seconds * float64(time.Second))); at.After(ends[t.AllocID]) {
				ends[t.AllocID] = at
			}
		}
	}
	return ends
}

// outlook is each schedulable node of nodes with whole GPUs: how many it
// has, how many are free, and when each of its allocations holding whole
// GPUs is predicted to end (ends; zero when unknown).
func outlook(snap *nomadview.Snapshot, nodes []*api.NodeListStub, ends map[string]time.Time) []gang.NodeOutlook {
	held := snap.HeldIDs()
	var out []gang.NodeOutlook
	for _, n := range nodes {
		if n == nil || !nomadview.Schedulable(n) || n.NodeResources == nil {
			continue
		}
		o := gang.NodeOutlook{ID: n.ID}
		for _, d := range n.NodeResources.Devices {
			if d == nil || d.Vendor != contract.Vendor || d.Type != contract.SliceGPU {
				continue
			}
			for _, in := range d.Instances {
				if in != nil && in.Healthy {
					o.GPUs++
					if !held[n.ID][in.ID] {
						o.Free++
					}
				}
			}
		}
		if o.GPUs > 0 {
			out = append(out, o)
		}
	}
	byNode := map[string]int{}
	for i, o := range out {
		byNode[o.ID] = i
	}
	for node, hs := range snap.HeldSlices() {
		i, ok := byNode[node]
		if !ok {
			continue
		}
		for _, h := range hs {
			if h.Device.Type == contract.SliceGPU && len(h.IDs) > 0 {
				out[i].Releases = append(out[i].Releases, gang.Release{GPUs: len(h.IDs), At: ends[h.Alloc.ID]})
			}
		}
	}
	return out
}

// nodesPattern is the ${node.unique.id} pattern of exactly nodes.
func nodesPattern(nodes []string) string {
	quoted := make([]string, len(nodes))
	for i, n := range nodes {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return "^(" + strings.Join(quoted, "|") + ")$"
}

// nodesConstraint keeps allocations to the nodes pattern matches.
func nodesConstraint(pattern string) *api.Constraint {
	return &api.Constraint{LTarget: "${node.unique.id}", Operand: "regexp", RTarget: pattern}
}

// nodeNames are the names of the nodes of ids (the ID where not listed).
func nodeNames(snap *nomadview.Snapshot, ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id
		if n := snap.Node(id); n != nil {
			out[i] = n.Name
		}
	}
	return out
}

// placeholderJob is the job that keeps gpus GPUs of nodes for gang k:
// 1-GPU allocations of device's kind, pinned to the nodes, one above the
// gang's priority, sleeping.
func placeholderJob(k JobKey, gangJob *api.Job, nodes []string, gpus int, device *api.RequestedDevice) *api.Job {
	id := contract.ReservationJobPrefix + k.ID
	prio := 50
	if gangJob.Priority != nil {
		prio = *gangJob.Priority
	}
	prio = min(prio+1, 100)
	one, zero, cpu, mem, disk, logFiles, logMB, no := uint64(1), 0, 10, 16, 10, 1, 1, false
	kill, batch, fail, name := time.Second, api.JobTypeBatch, "fail", "hold"
	return &api.Job{ID: &id, Name: &id, Namespace: &k.Namespace, Type: &batch, Priority: &prio,
		NodePool: gangJob.NodePool, Datacenters: gangJob.Datacenters,
		Meta:        map[string]string{contract.MetaReservationFor: k.ID},
		Constraints: []*api.Constraint{nodesConstraint(nodesPattern(nodes))},
		TaskGroups: []*api.TaskGroup{{Name: &name, Count: &gpus,
			RestartPolicy:    &api.RestartPolicy{Attempts: &zero, Mode: &fail},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: &zero, Unlimited: &no},
			EphemeralDisk:    &api.EphemeralDisk{SizeMB: &disk},
			Tasks: []*api.Task{{Name: name, Driver: contract.DriverName, KillTimeout: &kill,
				LogConfig: &api.LogConfig{MaxFiles: &logFiles, MaxFileSizeMB: &logMB},
				Config:    map[string]any{"command": "/bin/sh", "args": []string{"-c", "exec sleep 86400"}},
				Resources: &api.Resources{CPU: &cpu, MemoryMB: &mem, Devices: []*api.RequestedDevice{
					{Name: device.Name, Count: &one, Constraints: device.Constraints, Affinities: device.Affinities}}},
			}},
		}},
	}
}

// reservationHolds is why held job k, which Nomad's plan did not place,
// waits for the current reservation (another job's): its placeholder
// holds GPUs on a node where, with the node's free GPUs, they would make
// room for one member of k. "" when no reservation holds such GPUs: k
// waits for capacity.
func (g *Gangs) reservationHolds(snap *nomadview.Snapshot, k JobKey, job *api.Job, spec gang.Spec) string {
	if g.reserver == nil || g.reserver.cur == nil || g.reserver.cur.gang == k {
		return ""
	}
	cur := g.reserver.cur
	held, total := map[string]int{}, 0
	for nodeID, hs := range snap.HeldSlices() {
		for _, h := range hs {
			if h.Alloc.JobID == cur.placeholder.ID && h.Alloc.Namespace == cur.placeholder.Namespace {
				held[nodeID] += len(h.IDs)
				total += len(h.IDs)
			}
		}
	}
	ask := 0.0 // the most one member asks
	for _, sg := range spec.Groups {
		if tg := groupNamed(job, sg.Name); tg != nil {
			ask = max(ask, nomadview.GroupGPUEquivalents(tg, 1))
		}
	}
	free := snap.FreeGPUs()
	for node, n := range held {
		if float64(free[node]+n) >= ask-1e-9 {
			return fmt.Sprintf("the reservation for %s/%s, due by %s, holds GPUs it would fit on (%d on %d of its nodes)",
				cur.gang.Namespace, cur.gang.ID, cur.due.UTC().Format(time.RFC3339), total, len(held))
		}
	}
	return ""
}
