package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/gang"
	"github.com/nomad-gpu/nomad-gpu/controller/queues"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// Gang admission (docs/design/gangs.md). A gang job waits at count 0;
// the leader plans it with every group at its members, and when Nomad's
// own plan places every member it scales the groups up. Admitted, the
// gang must have every member running within AdmitTimeout, or be rolled
// back to 0 and tried again after a back-off: no member holds GPUs idle
// for long while another waits.

// GangConfig bounds the gang module.
type GangConfig struct {
	// AdmitTimeout is the longest an admitted gang may have a member
	// not running while another holds GPUs.
	AdmitTimeout time.Duration
	// RetryMin and RetryMax bound the back-off after a rollback: it
	// starts at RetryMin and doubles up to RetryMax.
	RetryMin, RetryMax time.Duration
	// KeepEvery is how often a waiting gang is evaluated again. Nomad
	// takes a batch job at count 0 for dead and garbage-collects it once
	// it and its newest evaluation are older than the servers'
	// job_gc_threshold (4h by default): a fresh evaluation keeps it.
	KeepEvery time.Duration
	// Reserve bounds reservations for the gang at the head of the queue;
	// nil: none.
	Reserve *ReserveConfig
}

// DefaultGangConfig is what the controller's flags default to.
func DefaultGangConfig() GangConfig {
	return GangConfig{AdmitTimeout: 30 * time.Second, RetryMin: time.Minute, RetryMax: time.Hour, KeepEvery: time.Hour}
}

// gangNomad is what the gang module asks of Nomad.
type gangNomad interface {
	// plan is Nomad's plan of job, which is not registered as it is.
	plan(ctx context.Context, job *api.Job) (*api.JobPlanResponse, error)
	// scale sets one group's count; index, when not 0, must be the job's
	// modify index still. It returns the job's modify index after it.
	scale(ctx context.Context, k JobKey, group string, count int, index uint64, why string) (uint64, error)
	// evaluate asks Nomad for a new evaluation of the job.
	evaluate(ctx context.Context, k JobKey) error
	// register registers a job (a placeholder; a gang raised or
	// restored); index, when not 0, must be the job's modify index still.
	register(ctx context.Context, job *api.Job, index uint64) (*api.JobRegisterResponse, *api.WriteMeta, error)
	deregister(ctx context.Context, k JobKey) error
	// node reads a node's details (its meta and attributes).
	node(ctx context.Context, id string) (*api.Node, error)
	// allocations lists a job's allocations (a dependency's runs).
	allocations(ctx context.Context, k JobKey) ([]*api.AllocationListStub, error)
}

// Gangs is the gang module's state. Only the leader's loop uses it.
type Gangs struct {
	cfg GangConfig
	log hclog.Logger
	// admitted is when this leader admitted each gang, or first saw it
	// admitted (a gang another leader admitted gets AdmitTimeout from
	// then).
	admitted map[JobKey]time.Time
	// admittedAt is the job's modify index after this leader's admission
	// of each gang: allocations created before it are an earlier run's
	// (0 where another leader admitted it).
	admittedAt map[JobKey]uint64
	// wrote is the job's modify index after this leader's last write to
	// each gang (admission, roll-back, raise): a read of the job older
	// than it predates the write, for the read model lags Nomad by a
	// tick or two, and is taken as what was written (read as it was,
	// an admitted gang looks as if it waited and was admitted twice).
	wrote map[JobKey]uint64
	// ranWhole notes the admitted gangs seen with every member running:
	// a gang whose run ended after that is no failed admission, and its
	// back-off starts again from RetryMin.
	ranWhole map[JobKey]bool
	// retry is when a rolled-back gang may be planned again, and its
	// next back-off.
	retry map[JobKey]gangRetry
	// waiting is the last reason logged for each waiting gang.
	waiting map[JobKey]string
	// refused is, for each gang Nomad's plan did not place, the free
	// capacity it was planned on: it is planned again once that changed,
	// or replanEvery after, not every tick (a plan runs the scheduler on
	// the servers).
	refused map[JobKey]gangPlan
	// kept is when this leader last evaluated each waiting gang again.
	kept map[JobKey]time.Time
	// census is what the last Step saw; statuses the same gang by gang,
	// in the queue's order.
	census   GangCensus
	statuses []GangStatus
	// since is when each gang reached its state.
	since map[JobKey]gangSince
	// reserver keeps nodes for the head of the queue; nil when off.
	reserver *reserver
	// nodes are the node details read for localities, by node ID;
	// nodeReads counts this tick's reads (nodeReadsPerTick), nodeVersion
	// every read (new details may make new domains: a refused gang is
	// planned again).
	nodes       map[string]nodeDetail
	nodeReads   int
	nodeVersion uint64
	// queues, when set (UseQueues), are the team queues admissions go
	// by; reclaimed the jobs the gate took back whose allocations may
	// hold GPUs still.
	queues    *QueueBook
	reclaimed map[JobKey]reclaim
	// position is each waiting job's place in the queues' order at the
	// last Step (1 first).
	position map[JobKey]int
}

type gangSince struct {
	state string
	at    time.Time
}

// GangCensus counts the gangs a Step saw, and their members.
type GangCensus struct {
	// Waiting gangs are at count 0; Placing ones admitted with a member
	// not running; Running ones have every member running.
	Waiting, Placing, Running int
	// Wanted counts every gang's members, Placed those holding GPUs
	// (running or not), MembersRunning those running.
	Wanted, Placed, MembersRunning int
}

// Census is what the last Step saw.
func (g *Gangs) Census() GangCensus { return g.census }

// Statuses are what the last Step saw of each gang, in the queue's order.
func (g *Gangs) Statuses() []GangStatus { return g.statuses }

// note records the gangs' statuses of a Step, once its decisions are made:
// a waiting or invalid gang's reason is the one last decided.
func (g *Gangs) note(now time.Time, rows []GangStatus) {
	g.statuses = g.statuses[:0:0]
	for _, st := range rows {
		k := JobKey{Namespace: st.Namespace, ID: st.Job}
		if st.State == "waiting" || st.State == "invalid" {
			st.Reason = g.waiting[k]
			st.Kind = WaitKind(st.State, st.Reason)
		}
		s, ok := g.since[k]
		if !ok || s.state != st.State {
			s = gangSince{st.State, now}
			g.since[k] = s
		}
		st.Since = s.at
		if st.State == "waiting" {
			st.Position = g.position[k]
		}
		g.statuses = append(g.statuses, st)
	}
}

type gangPlan struct {
	free string
	at   time.Time
	// tried of domains were refused on free, with the node details read
	// as of nodeVersion.
	tried, domains int
	nodeVersion    uint64
}

// replanEvery is the longest a refused gang waits for another plan while
// the free capacity stays as it was (other gangs and jobs leaving the
// queue change what fits too).
const replanEvery = time.Minute

type gangRetry struct {
	at   time.Time
	wait time.Duration
}

// NewGangs is the module with its bounds.
func NewGangs(cfg GangConfig, log hclog.Logger) *Gangs {
	g := &Gangs{cfg: cfg, log: log, admitted: map[JobKey]time.Time{}, admittedAt: map[JobKey]uint64{}, wrote: map[JobKey]uint64{}, ranWhole: map[JobKey]bool{},
		retry: map[JobKey]gangRetry{}, waiting: map[JobKey]string{}, refused: map[JobKey]gangPlan{}, kept: map[JobKey]time.Time{},
		since: map[JobKey]gangSince{}, nodes: map[string]nodeDetail{}}
	if cfg.Reserve != nil {
		g.reserver = &reserver{cfg: *cfg.Reserve, resting: map[JobKey]time.Time{}, idle: func(float64) {}, ends: forecastEnds, runtimes: queuedRuntimes}
	}
	return g
}

// CountIdle hands count the GPU-seconds reservations hold idle, as they
// pass.
func (g *Gangs) CountIdle(count func(gpuSeconds float64)) {
	if g.reserver != nil {
		g.reserver.idle = count
	}
}

// Step admits a waiting gang that fits, the first in priority then age,
// and rolls back the admitted ones whose members do not all run in time.
// It plans one gang a tick at most, so that it asks Nomad the same
// whatever the queue's length, and admits one: the next one's plan must
// see the members Nomad places for it. Of the gangs due a plan, the one
// whose last plan is oldest goes first (one never planned before any),
// then priority and age: a gang refused while the cluster changes every
// tick does not keep the others from theirs. It returns what it decided.
func (g *Gangs) Step(ctx context.Context, now time.Time, snap *nomadview.Snapshot, specs JobSpecs, n gangNomad) []Decision {
	var out []Decision
	seen := map[JobKey]bool{}
	free := fmt.Sprint(snap.FreeSlices())
	var due, waiting []waitingGang
	var rows []GangStatus
	var runs []heldRun
	deps := map[queues.Dep]queues.DepRun{}
	never := map[string]string{} // neverFits' answers by shape
	kept := false
	g.census = GangCensus{}
	g.forgetNodes(snap)
	for _, k := range gangJobs(snap) {
		seen[k] = true
		job, err := specs(ctx, k)
		if err != nil {
			g.log.Debug("gang: cannot read its job; tried on the next tick", "namespace", k.Namespace, "job", k.ID, "error", err)
			continue
		}
		spec, ok, err := gang.ParseSpec(waitingCopy(job))
		switch {
		case !ok:
			continue
		case err != nil:
			out = append(out, g.refuse(k, err)...)
			rows = append(rows, GangStatus{Namespace: k.Namespace, Job: k.ID, State: "invalid", Wanted: spec.Members()})
			continue
		}
		job = g.asWritten(k, job, spec)
		row := g.count(snap, k, job, spec)
		if g.queues != nil {
			row.Queue = g.queues.queueOf(k.Namespace, jobPoolOf(job))
		}
		if admitted(job, spec) {
			rows = append(rows, row)
			out = append(out, g.check(ctx, now, snap, k, job, spec, n)...)
			out = append(out, g.restorePriority(ctx, k, job, row, n)...)
			if at, ok := g.admitted[k]; ok && g.queues != nil {
				runs = append(runs, g.run(snap, k, job, spec, at))
			}
			continue
		}
		g.forgetRun(k)
		if !kept {
			kept = g.keep(ctx, now, k, time.Unix(0, snap.Jobs[k].SubmitTime), n)
		}
		why := neverFits(snap, job, spec, never)
		if why == "" {
			why = g.noLocality(ctx, snap, job, spec, n)
		}
		held := ""
		if why == "" {
			if held, err = g.dependency(ctx, snap, k, job, deps, n); err != nil {
				why = err.Error()
			}
		}
		if why != "" {
			out = append(out, g.refuse(k, errors.New(why))...)
			row.State = "invalid"
			rows = append(rows, row)
			continue
		}
		rows = append(rows, row)
		if held != "" {
			out = append(out, g.wait(k, held)...)
			continue
		}
		waiting = append(waiting, waitingGang{k, job, spec})
		if g.due(now, free, k) {
			due = append(due, waitingGang{k, job, spec})
		}
	}
	g.forget(seen)
	planned := false
	if g.reserver != nil {
		var ds []Decision
		ds, planned = g.reserve(ctx, now, snap, free, waiting, n)
		out = append(out, ds...)
		out = append(out, g.restoreJobs(ctx, snap, specs, n)...)
	}
	if g.queues != nil {
		g.forgetReclaimed(now, snap)
		if planned {
			due = nil
		}
		out = append(out, g.admitQueued(ctx, now, snap, free, due, waiting, runs, n)...)
	} else if len(due) > 0 && !planned {
		slices.SortStableFunc(due, func(a, b waitingGang) int { return g.refused[a.k].at.Compare(g.refused[b.k].at) })
		w := due[0]
		out = append(out, g.admit(ctx, now, snap, free, w.k, w.job, w.spec, n, nil)...)
	}
	g.note(now, rows)
	return out
}

// waitingGang is a gang due a plan.
type waitingGang struct {
	k    JobKey
	job  *api.Job
	spec gang.Spec
}

// due says whether a waiting gang may be planned: not within its back-off,
// and, refused before, not on the free capacity it was refused on within
// replanEvery.
func (g *Gangs) due(now time.Time, free string, k JobKey) bool {
	if r, ok := g.retry[k]; ok && now.Before(r.at) {
		return false
	}
	p, ok := g.refused[k]
	return !ok || p.free != free || p.nodeVersion != g.nodeVersion || p.tried < p.domains || now.Sub(p.at) >= replanEvery
}

// count adds a gang to the census and says what it is doing (its
// reason and since are filled in later, by note).
func (g *Gangs) count(snap *nomadview.Snapshot, k JobKey, job *api.Job, spec gang.Spec) GangStatus {
	c := &g.census
	st := GangStatus{Namespace: k.Namespace, Job: k.ID, State: "waiting", Wanted: spec.Members()}
	c.Wanted += st.Wanted
	if !admitted(job, spec) {
		c.Waiting++
		return st
	}
	all := true
	for _, m := range gangMembers(snap, k, spec, g.admittedAt[k]) {
		if m.Placed || m.Running {
			st.Placed++
		}
		if m.Running {
			st.Running++
		}
		all = all && (m.Running || m.Done)
	}
	c.Placed, c.MembersRunning = c.Placed+st.Placed, c.MembersRunning+st.Running
	if st.State = "placing"; all {
		st.State = "running"
		c.Running++
	} else {
		c.Placing++
	}
	return st
}

// asWritten is the gang's job as this leader last wrote it where the
// read predates that write: its members while admitted, none once rolled
// back; the job as read otherwise.
func (g *Gangs) asWritten(k JobKey, job *api.Job, spec gang.Spec) *api.Job {
	if w, ok := g.wrote[k]; !ok || job.JobModifyIndex == nil || *job.JobModifyIndex >= w {
		return job
	}
	if _, ok := g.admitted[k]; ok {
		return withCounts(job, membersOf(spec))
	}
	return waitingCopy(job)
}

// forget drops the state of gangs no longer listed.
func (g *Gangs) forget(seen map[JobKey]bool) {
	maps.DeleteFunc(g.admitted, func(k JobKey, _ time.Time) bool { return !seen[k] })
	maps.DeleteFunc(g.admittedAt, func(k JobKey, _ uint64) bool { return !seen[k] })
	maps.DeleteFunc(g.wrote, func(k JobKey, _ uint64) bool { return !seen[k] })
	maps.DeleteFunc(g.ranWhole, func(k JobKey, _ bool) bool { return !seen[k] })
	maps.DeleteFunc(g.retry, func(k JobKey, _ gangRetry) bool { return !seen[k] })
	maps.DeleteFunc(g.waiting, func(k JobKey, _ string) bool { return !seen[k] })
	maps.DeleteFunc(g.refused, func(k JobKey, _ gangPlan) bool { return !seen[k] })
	maps.DeleteFunc(g.kept, func(k JobKey, _ time.Time) bool { return !seen[k] })
	maps.DeleteFunc(g.since, func(k JobKey, _ gangSince) bool { return !seen[k] })
}

// keep evaluates a waiting gang again once KeepEvery has passed since it
// was submitted or last kept, so that Nomad does not garbage-collect it
// as a dead batch job while it waits. It says whether it asked Nomad: a
// tick keeps one gang at most (a new leader finds every old gang due).
func (g *Gangs) keep(ctx context.Context, now time.Time, k JobKey, submitted time.Time, n gangNomad) bool {
	last := submitted
	if t, ok := g.kept[k]; ok && t.After(last) {
		last = t
	}
	if now.Sub(last) < g.cfg.KeepEvery {
		return false
	}
	if err := n.evaluate(ctx, k); err != nil {
		g.log.Warn("gang: evaluating a waiting gang again failed; tried on the next tick", "namespace", k.Namespace, "job", k.ID, "error", err)
		return true
	}
	g.kept[k] = now
	g.log.Debug("gang: evaluated a waiting gang again so that Nomad keeps it", "namespace", k.Namespace, "job", k.ID)
	return true
}

// gangJobs are the listed batch jobs whose meta says gang, by priority
// (highest first), then submission (oldest first).
func gangJobs(snap *nomadview.Snapshot) []JobKey {
	var stubs []*api.JobListStub
	for _, j := range snap.Jobs {
		if j != nil && j.Type == api.JobTypeBatch && j.Meta[contract.MetaGang] == "true" && !j.Stop {
			stubs = append(stubs, j)
		}
	}
	sort.Slice(stubs, func(a, b int) bool {
		if stubs[a].Priority != stubs[b].Priority {
			return stubs[a].Priority > stubs[b].Priority
		}
		if stubs[a].SubmitTime != stubs[b].SubmitTime {
			return stubs[a].SubmitTime < stubs[b].SubmitTime
		}
		return stubs[a].ID < stubs[b].ID
	})
	out := make([]JobKey, len(stubs))
	for i, j := range stubs {
		out[i] = JobKey{Namespace: j.Namespace, ID: j.ID}
	}
	return out
}

// waitingCopy is job with every gang group at count 0, as it is
// submitted: the spec's rules are those of a waiting gang, and an
// admitted one keeps them.
func waitingCopy(job *api.Job) *api.Job {
	return withCounts(job, func(tg *api.TaskGroup) (int, bool) {
		_, ok := tg.Meta[contract.MetaGangMembers]
		return 0, ok
	})
}

// withCounts is a copy of job whose groups have the count count gives
// them, where it gives one; job is not modified.
func withCounts(job *api.Job, count func(*api.TaskGroup) (int, bool)) *api.Job {
	cp := *job
	cp.TaskGroups = make([]*api.TaskGroup, len(job.TaskGroups))
	for i, tg := range job.TaskGroups {
		t := *tg
		if n, ok := count(tg); ok {
			t.Count = &n
		}
		cp.TaskGroups[i] = &t
	}
	return &cp
}

// membersOf gives each of spec's groups its members (withCounts).
func membersOf(spec gang.Spec) func(*api.TaskGroup) (int, bool) {
	return func(tg *api.TaskGroup) (int, bool) {
		for _, sg := range spec.Groups {
			if tg.Name != nil && *tg.Name == sg.Name {
				return sg.Members, true
			}
		}
		return 0, false
	}
}

// admitted says whether every group of the gang has its members.
func admitted(job *api.Job, spec gang.Spec) bool {
	for _, sg := range spec.Groups {
		tg := groupNamed(job, sg.Name)
		if tg == nil || tg.Count == nil || *tg.Count != sg.Members {
			return false
		}
	}
	return len(spec.Groups) > 0
}

func groupNamed(job *api.Job, name string) *api.TaskGroup {
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && *tg.Name == name {
			return tg
		}
	}
	return nil
}

// admit plans a waiting gang with every member, in the next of its
// domains, and when every one fits admits it there. free is the
// cluster's free capacity now.
func (g *Gangs) admit(ctx context.Context, now time.Time, snap *nomadview.Snapshot, free string, k JobKey, job *api.Job, spec gang.Spec, n gangNomad,
	guard func(*api.JobPlanResponse) string) []Decision {
	doms, _ := g.domains(ctx, snap, job, spec, n)
	if len(doms) == 0 {
		return g.wait(k, "no node of the job's pool has its locality read yet")
	}
	i := 0
	if p, ok := g.refused[k]; ok && p.free == free && p.nodeVersion == g.nodeVersion && p.tried < p.domains {
		i = p.tried
	}
	d := doms[min(i, len(doms)-1)]
	where := ""
	if d.Pins != nil {
		where = " in " + d.String()
	}
	base := unreserved(job) // a handover of a run rolled back before its restore
	pinned := gang.Pin(base, d)
	plan, err := n.plan(ctx, withCounts(pinned, membersOf(spec)))
	why := ""
	if err != nil {
		why = planRefused(spec) + "Nomad's plan failed: " + err.Error()
	} else if ok, refused := gang.Admit(plan); !ok {
		why = planRefused(spec) + refused
		if held := g.reservationHolds(snap, k, job, spec); held != "" {
			why = "reservation: " + held
		}
	} else if guard != nil {
		why = guard(plan)
	}
	if why != "" {
		g.refused[k] = gangPlan{free: free, at: now, tried: i + 1, domains: len(doms), nodeVersion: g.nodeVersion}
		return g.wait(k, why+where)
	}
	delete(g.refused, k)
	reason := fmt.Sprintf("Nomad's plan places all %d members%s", spec.Members(), where)
	rewrite := base != job || job.Meta[contract.MetaGangPinned] != pinned.Meta[contract.MetaGangPinned]
	index, err := g.scaleUp(ctx, k, rewrite, pinned, spec, plan.JobModifyIndex, "gang admitted: "+reason, n)
	if err != nil {
		g.log.Warn("gang: admitting failed; its members are rolled back if they do not all run", "namespace", k.Namespace, "job", k.ID, "error", err)
	}
	g.admitted[k], g.admittedAt[k], g.wrote[k] = now, index, index
	delete(g.waiting, k)
	return []Decision{{Kind: "gang-admitted", Job: k, Reason: reason}}
}

// planRefused begins the reason of a held job Nomad's plan did not place
// (the kinds nomad-gpu queue shows): a gang does not fit whole; a job of
// one member waits for capacity.
func planRefused(spec gang.Spec) string {
	if spec.Members() > 1 {
		return "gang does not fit: "
	}
	return "capacity: "
}

// scaleUp gives the gang its members, guarded by the plan's index: a
// scale of each group, or, when the job must change besides (rewrite:
// its pins), a registration of the pinned copy. It returns the job's
// modify index after it (the plan's when nothing was written).
func (g *Gangs) scaleUp(ctx context.Context, k JobKey, rewrite bool, pinned *api.Job, spec gang.Spec, guard uint64, why string, n gangNomad) (uint64, error) {
	if rewrite {
		resp, _, err := n.register(ctx, withCounts(pinned, membersOf(spec)), guard)
		if err != nil {
			return guard, err
		}
		return resp.JobModifyIndex, nil
	}
	index := guard
	for _, sg := range spec.Groups {
		after, err := n.scale(ctx, k, sg.Name, sg.Members, guard, why)
		if err != nil {
			return index, fmt.Errorf("group %q: %w", sg.Name, err)
		}
		index, guard = after, 0 // the first scale changed it
	}
	return index, nil
}

// forgetNodes resets the tick's node reads and drops the details of
// nodes no longer listed.
func (g *Gangs) forgetNodes(snap *nomadview.Snapshot) {
	g.nodeReads = 0
	if len(g.nodes) == 0 {
		return
	}
	listed := make(map[string]bool, len(snap.Nodes))
	for _, n := range snap.Nodes {
		if n != nil {
			listed[n.ID] = true
		}
	}
	maps.DeleteFunc(g.nodes, func(id string, _ nodeDetail) bool { return !listed[id] })
}

// neverFits says which member group of a waiting gang no node of its
// pool could ever take, and why; "" when every one could.
func neverFits(snap *nomadview.Snapshot, job *api.Job, spec gang.Spec, seen map[string]string) string {
	for _, sg := range spec.Groups {
		tg := groupNamed(job, sg.Name)
		if tg == nil {
			continue
		}
		// One answer per shape a tick: thousands of held jobs ask the
		// same of the same nodes (the rule reads the group's devices, the
		// job's pool and datacenters).
		shape := fmt.Sprint(jobPoolOf(job), job.Datacenters, deviceShape(tg))
		why, ok := seen[shape]
		if !ok {
			why = snap.GroupNeverFits(job, tg)
			seen[shape] = why
		}
		if why != "" {
			return fmt.Sprintf("group %q: a member %s", sg.Name, why)
		}
	}
	return ""
}

// deviceShape is what group tg's tasks ask of devices, for neverFits.
func deviceShape(tg *api.TaskGroup) string {
	var b strings.Builder
	for _, t := range tg.Tasks {
		if t == nil || t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if d != nil && d.Count != nil {
				fmt.Fprintf(&b, "%s=%d;", d.Name, *d.Count)
			} else if d != nil {
				fmt.Fprintf(&b, "%s;", d.Name)
			}
		}
	}
	return b.String()
}

// wait notes why a gang waits, as a decision when the reason changed.
func (g *Gangs) wait(k JobKey, why string) []Decision {
	if g.waiting[k] == why {
		return nil
	}
	g.waiting[k] = why
	return []Decision{{Kind: "gang-waiting", Job: k, Reason: why}}
}

// refuse reports a gang whose spec breaks a rule, once per reason.
func (g *Gangs) refuse(k JobKey, err error) []Decision {
	why := "not admitted: " + strings.ReplaceAll(err.Error(), "\n", "; ")
	if g.waiting[k] == why {
		return nil
	}
	g.waiting[k] = why
	return []Decision{{Kind: "gang-invalid", Job: k, Reason: why}}
}

// check rolls an admitted gang back to 0 when a member does not run
// within AdmitTimeout while another holds GPUs.
func (g *Gangs) check(ctx context.Context, now time.Time, snap *nomadview.Snapshot, k JobKey, job *api.Job, spec gang.Spec, n gangNomad) []Decision {
	at, ok := g.admitted[k]
	if !ok {
		at = now
		g.admitted[k] = at
	}
	members := gangMembers(snap, k, spec, g.admittedAt[k])
	if !slices.ContainsFunc(members, func(m gang.Member) bool { return !m.Running && !m.Done }) {
		g.ranWhole[k] = true
	}
	back, restart, why := gang.Rollback(members, at, now, g.cfg.AdmitTimeout)
	if !back {
		return nil
	}
	kind, verb := "gang-rolled-back", "gang rolled back: "
	if restart {
		kind, verb = "gang-requeued", "gang requeued: "
	}
	r := g.retry[k]
	if g.ranWhole[k] {
		r.wait = 0 // it ran: no failed admission to back off from
	}
	if !g.scaleDown(ctx, k, spec, verb+why, n) {
		return nil
	}
	r.wait = min(max(g.cfg.RetryMin, 2*r.wait), g.cfg.RetryMax)
	r.at = now.Add(r.wait)
	g.retry[k] = r
	return []Decision{{Kind: kind, Job: k, Reason: fmt.Sprintf("%s; planned again in %s", why, r.wait)}}
}

// forgetRun drops what is known of a gang's admitted run.
func (g *Gangs) forgetRun(k JobKey) {
	delete(g.admitted, k)
	delete(g.admittedAt, k)
	delete(g.ranWhole, k)
}

// gangMembers are the members the gang wants, each with what its newest
// allocation of the read model shows; allocations created before index
// (the admission's) are an earlier run's and left out.
func gangMembers(snap *nomadview.Snapshot, k JobKey, spec gang.Spec, index uint64) []gang.Member {
	byName := map[string]*api.AllocationListStub{}
	for _, list := range [][]*api.AllocationListStub{snap.Allocs, snap.Finished} {
		for _, a := range list {
			if a.JobID != k.ID || a.Namespace != k.Namespace || a.CreateIndex < index {
				continue
			}
			if b := byName[a.Name]; b == nil || a.CreateIndex > b.CreateIndex {
				byName[a.Name] = a
			}
		}
	}
	var out []gang.Member
	for _, sg := range spec.Groups {
		for i := range sg.Members {
			name := fmt.Sprintf("%s.%s[%d]", k.ID, sg.Name, i)
			m := gang.Member{Name: name}
			if a := byName[name]; a != nil {
				// Completed on its own: one a rollback stopped is complete
				// too, but desired to stop.
				m.Done = a.ClientStatus == api.AllocClientStatusComplete && a.DesiredStatus == api.AllocDesiredStatusRun
				m.Running = a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun
				m.Placed = m.Running || a.ClientStatus == api.AllocClientStatusPending
				m.Ended = ended(a)
			}
			out = append(out, m)
		}
	}
	return out
}

// ended says why a member's allocation ended before it was done: it
// failed or was lost on its node, or Nomad stops it (preempted, drained,
// moved, stopped by hand); "" otherwise. A stop the controller's own
// rollback asked for is no member's end: the gang is at 0 then, no longer
// admitted, and its allocations are older than the next admission.
func ended(a *api.AllocationListStub) string {
	switch {
	case a.ClientStatus == api.AllocClientStatusFailed:
		return "failed"
	case a.ClientStatus == api.AllocClientStatusLost:
		return "was lost with its node"
	case a.DesiredStatus == api.AllocDesiredStatusEvict:
		return "was preempted"
	case a.DesiredStatus == api.AllocDesiredStatusStop:
		return "was stopped (drained, moved or stopped by hand)"
	}
	return ""
}

// nomadGangs is gangNomad on Nomad's API.
type nomadGangs struct{ c *api.Client }

func (n nomadGangs) plan(ctx context.Context, job *api.Job) (*api.JobPlanResponse, error) {
	ns := ""
	if job.Namespace != nil {
		ns = *job.Namespace
	}
	resp, _, err := n.c.Jobs().Plan(job, false, (&api.WriteOptions{Namespace: ns}).WithContext(ctx))
	return resp, err
}

func (n nomadGangs) register(ctx context.Context, job *api.Job, index uint64) (*api.JobRegisterResponse, *api.WriteMeta, error) {
	q := (&api.WriteOptions{Namespace: *job.Namespace}).WithContext(ctx)
	if index != 0 {
		return n.c.Jobs().EnforceRegister(job, index, q)
	}
	return n.c.Jobs().Register(job, q)
}

func (n nomadGangs) deregister(ctx context.Context, k JobKey) error {
	_, _, err := n.c.Jobs().Deregister(k.ID, true, (&api.WriteOptions{Namespace: k.Namespace}).WithContext(ctx))
	if nomadview.IsNotFound(err) {
		return nil
	}
	return err
}

func (n nomadGangs) node(ctx context.Context, id string) (*api.Node, error) {
	node, _, err := n.c.Nodes().Info(id, (&api.QueryOptions{}).WithContext(ctx))
	return node, err
}

func (n nomadGangs) allocations(ctx context.Context, k JobKey) ([]*api.AllocationListStub, error) {
	list, _, err := n.c.Jobs().Allocations(k.ID, false, (&api.QueryOptions{Namespace: k.Namespace}).WithContext(ctx))
	return list, err
}

func (n nomadGangs) evaluate(ctx context.Context, k JobKey) error {
	_, _, err := n.c.Jobs().EvaluateWithOpts(k.ID, api.EvalOptions{}, (&api.WriteOptions{Namespace: k.Namespace}).WithContext(ctx))
	return err
}

func (n nomadGangs) scale(ctx context.Context, k JobKey, group string, count int, index uint64, why string) (uint64, error) {
	c := int64(count)
	req := &api.ScalingRequest{Count: &c, Target: map[string]string{"Job": k.ID, "Group": group},
		Message: "nomad-gpu controller: " + why, JobModifyIndex: index}
	resp, _, err := n.c.Jobs().ScaleWithRequest(k.ID, req, (&api.WriteOptions{Namespace: k.Namespace}).WithContext(ctx))
	if err != nil {
		return 0, err
	}
	return resp.JobModifyIndex, nil
}
