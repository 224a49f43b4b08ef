package model

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller/queues"
)

// Team queues (Features.Queues; the controller's gate, controller/
// queuegate.go). Every job of the trace that is no gang is held at its
// arrival, outside Nomad's queue, and admitted by the controller's round
// in the queues' one order (queues.Order: priority, then its queue's
// fair-share standing over its charged use, queues.Charged, then age
// since it was last held) when its queue's quota allows it (queues.Quota:
// within its nominal, or on what the cohort lends and the other queues'
// waiting work does not claim) and it fits. The quotas and the order are
// the controller's own code. A queue whose job within its nominal does
// not fit takes back the runs of borrowing queues, the newest admitted
// first; a queue at its nominal takes back its own runs 10 below a
// waiting job (the controller's yield); each is stopped checkpointed (a
// run Reclaimed) and held again. Gangs keep their own admission, outside
// the quotas (the controller's gate takes them too), and count toward
// their team's use.

// queueState is the team queues' state.
type queueState struct {
	cfg queues.Config
	// of is each job's queue (an index of cfg.Queues), -1 for none.
	of []int16
	// held is what each queue holds (pending and running), in units;
	// usage its decayed use, advanced at every change of held.
	held  []int
	usage []queues.Usage
	// waiting are the held jobs waiting for admission, in no order.
	waiting []int32
	// gated marks the jobs the round admitted (and may take back);
	// since is when each held job was last held, at its arrival or when
	// it was taken back: its age in the order, as Nomad's SubmitTime,
	// which the controller's scale to 0 sets anew.
	gated []bool
	since []time.Duration
	// version is what the last round saw: the capacity's versions and
	// the arrivals; a round on the same is skipped.
	version, arrivals uint64
}

// initQueues builds the queues of the cluster's teams: each queue's
// nominal its weight's share of the fixed cluster's GPUs, all in one
// cohort lending all of it.
func (s *sim) initQueues() {
	names, shares := s.cl.Queues()
	total := float64(s.o.Config.StartNodes(s.cl) * s.cl.GPUsPerNode)
	q := &queueState{cfg: queues.Config{HalfLife: s.scaleHalfLife(), Cohorts: []string{"cluster"}}}
	index := map[string]int16{}
	for i, name := range names {
		nominal := shares[i] * total
		q.cfg.Queues = append(q.cfg.Queues, queues.Queue{Name: name, Namespaces: []string{name}, Nominal: nominal,
			BorrowingLimit: queues.Unlimited, LendingLimit: nominal, Weight: shares[i], Cohort: "cluster"})
		index[name] = int16(i)
	}
	q.of = make([]int16, len(s.jobs))
	for id := range s.jobs {
		first := id
		if g := s.jobs[id].gang; g >= 0 {
			first = int(s.gangs[g].members[0])
		}
		q.of[id] = -1
		if i, ok := index[s.cl.QueueOf(s.recs[first].Team)]; ok {
			q.of[id] = i
		}
	}
	q.held, q.usage, q.gated, q.since = make([]int, len(names)), make([]queues.Usage, len(names)), make([]bool, len(s.jobs)), make([]time.Duration, len(s.jobs))
	for i := range q.usage {
		q.usage[i].At = epoch
	}
	s.qs = q
}

// scaleHalfLife is Policy.QueueHalfLife in trace time (at least the
// queue file's least, a minute).
func (s *sim) scaleHalfLife() time.Duration {
	h := time.Duration(float64(s.o.Policy.QueueHalfLife) * s.o.Compression)
	return max(h, time.Minute)
}

// holdJob holds an arrived job for the round's admission.
func (s *sim) holdJob(id int32) {
	s.jobs[id].state = jobHeld
	s.qs.since[id] = s.now
	s.qs.waiting = append(s.qs.waiting, id)
	s.qs.arrivals++
	s.dirty = true
}

// queueHeld adds a placed job's units to (or, with sign -1, takes them
// from) its queue's, its use advanced to now first.
func (s *sim) queueHeld(id int32, sign int) {
	q := s.qs
	if q == nil || q.of[id] < 0 {
		return
	}
	i := q.of[id]
	q.usage[i] = q.usage[i].Advance(epoch.Add(s.now), s.gpus(q.held[i]), q.cfg.HalfLife)
	q.held[i] += sign * s.jobs[id].units
}

func (s *sim) gpus(units int) float64 { return float64(units) / float64(s.unitsPerGPU) }

// admitHeld is the controller's round: the held jobs in the queues'
// order, each admitted where its quota allows and it fits, or, within
// its queue's nominal and not fitting, placed on what it takes back from
// borrowers. True when it placed one.
func (s *sim) admitHeld() bool {
	q := s.qs
	version := q.arrivals
	for _, v := range s.capVer {
		version += v
	}
	if version == q.version {
		return false
	}
	q.version = version
	use, standing := s.queueStandings()
	claim, asks := make([]float64, len(q.cfg.Queues)), make([]float64, len(q.cfg.Queues))
	for _, id := range q.waiting {
		if i := q.of[id]; i >= 0 {
			asks[i] += s.gpus(s.jobs[id].units)
		}
	}
	for i, x := range q.cfg.Queues {
		claim[i] = min(asks[i], max(0, x.Nominal-use[x.Name]))
	}
	placed, tried, order := false, map[int32]bool{}, s.heldOrder(standing)
	for n := 0; n < len(order); n++ {
		id := order[n]
		if tried[id] {
			continue
		}
		tried[id] = true
		i, gpus := q.of[id], s.gpus(s.jobs[id].units)
		v := queues.Verdict{Admission: queues.WithinNominal}
		if i >= 0 {
			v = s.queueVerdict(i, gpus, use, claim)
		}
		if !s.admitOne(id, i, v, use) {
			continue
		}
		placed = true
		q.gated[id] = true
		q.waiting = slices.DeleteFunc(q.waiting, func(x int32) bool { return x == id })
		if i >= 0 {
			claim[i] = max(0, claim[i]-gpus)
			// The controller admits one a tick, each in the order of the
			// standings its admissions moved (queues.Charged): the round
			// goes on from the top of the new order.
			use, standing = s.queueStandings()
			order, n = s.heldOrder(standing), -1
		}
	}
	return placed
}

// admitOne places held job id of queue i (-1: none) by the gate's
// verdict v: where it fits, or by preempting work ten below it, which
// the gate refuses where that work is another queue's within its nominal
// (queueGate.sparesNominal); within its nominal and not fitting, on what
// it takes back from borrowers; waiting for its quota, on its own
// queue's lower runs (Gangs.yield). False when it stays held.
func (s *sim) admitOne(id int32, i int16, v queues.Verdict, use map[string]float64) bool {
	if v.Admission == queues.Waits {
		return i >= 0 && s.yieldFor(id, i, use)
	}
	q := s.qs
	s.spare = func(v int32) bool {
		r := q.of[v]
		return r >= 0 && r != i && use[q.cfg.Queues[r].Name] <= q.cfg.Queues[r].Nominal+1e-9
	}
	ok := s.tryPlace(id) || s.f.Preemption && s.tryPreempt(id)
	s.spare = nil
	if !ok && v.Admission == queues.WithinNominal && v.Reclaim > 0 {
		ok = s.reclaimFor(id, i, use)
	}
	return ok
}

// queueStandings are each queue's use now (GPU-equivalents) and fair-share
// standing, its decayed use advanced to now.
func (s *sim) queueStandings() (map[string]float64, map[string]float64) {
	q := s.qs
	use, hours, active := map[string]float64{}, map[string]float64{}, map[string]bool{}
	for _, id := range q.waiting {
		if i := q.of[id]; i >= 0 {
			active[q.cfg.Queues[i].Name] = true
		}
	}
	for i, x := range q.cfg.Queues {
		q.usage[i] = q.usage[i].Advance(epoch.Add(s.now), s.gpus(q.held[i]), q.cfg.HalfLife)
		use[x.Name], hours[x.Name] = s.gpus(q.held[i]), queues.Charged(q.usage[i].Hours, s.gpus(q.held[i]), q.cfg.HalfLife)
		active[x.Name] = active[x.Name] || q.held[i] > 0
	}
	return use, queues.Standings(q.cfg, hours, active)
}

// heldOrder is the waiting held jobs in the queues' one order.
func (s *sim) heldOrder(standing map[string]float64) []int32 {
	q := s.qs
	ws := make([]queues.Waiting, len(q.waiting))
	for n, id := range q.waiting {
		j := &s.jobs[id]
		// Namespace orders the jobs of one age by trace order (IDs
		// compare as strings), as the broker's order does.
		w := queues.Waiting{Namespace: fmt.Sprintf("%09d", id), ID: strconv.Itoa(n), Priority: j.base, Submitted: epoch.Add(q.since[id])}
		if i := q.of[id]; i >= 0 {
			w.Queue = q.cfg.Queues[i].Name
		}
		ws[n] = w
	}
	order := queues.Order(ws, standing)
	out := make([]int32, len(order))
	for n, w := range order {
		at, _ := strconv.Atoi(w.ID)
		out[n] = q.waiting[at]
	}
	return out
}

// queueVerdict is the controller's verdict (queueGate.verdict) for gpus
// more of queue i: the other queues' claims are not lent.
func (s *sim) queueVerdict(i int16, gpus float64, use map[string]float64, claim []float64) queues.Verdict {
	q := s.qs
	with := make(map[string]float64, len(use))
	for n, x := range q.cfg.Queues {
		with[x.Name] = use[x.Name]
		if int16(n) != i {
			with[x.Name] += claim[n]
		}
	}
	return queues.NewQuota(q.cfg, with).Admit(q.cfg.Queues[i].Name, gpus)
}

// reclaimFor takes back, for held job id of queue i, the newest runs the
// round admitted of the queues that borrow, on the first node where that
// makes room for it (makeRoom). False when no node could: nothing is
// stopped then.
func (s *sim) reclaimFor(id int32, i int16, use map[string]float64) bool {
	q := s.qs
	borrowed := map[int16]float64{}
	for n, x := range q.cfg.Queues {
		borrowed[int16(n)] = use[x.Name] - x.Nominal
	}
	victims := s.gatedRuns(id, func(v int32) bool { return q.of[v] != i })
	slices.SortFunc(victims, func(a, b int32) int {
		return cmp.Or(cmp.Compare(s.jobs[b].placedAt, s.jobs[a].placedAt), cmp.Compare(b, a))
	})
	return s.makeRoom(id, victims, 0, func(v int32) bool {
		if borrowed[q.of[v]] <= 1e-9 {
			return false
		}
		borrowed[q.of[v]] -= s.gpus(s.jobs[v].units)
		return true
	})
}

// yieldFor is the controller's yield (Gangs.yield): held job id of queue
// i waits for its queue's quota, so the queue's runs at least preemptGap
// below it are taken back for it, the lowest priority first, then the
// newest, on the first node where they make room for it and bring the
// queue within its nominal with it (makeRoom). False when no node could:
// nothing is stopped then.
func (s *sim) yieldFor(id int32, i int16, use map[string]float64) bool {
	q, j := s.qs, &s.jobs[id]
	x := q.cfg.Queues[i]
	need := use[x.Name] + s.gpus(j.units) - x.Nominal
	victims := s.gatedRuns(id, func(v int32) bool { return q.of[v] == i && s.jobs[v].base <= j.base-preemptGap })
	slices.SortFunc(victims, func(a, b int32) int {
		return cmp.Or(cmp.Compare(s.jobs[a].base, s.jobs[b].base), cmp.Compare(s.jobs[b].placedAt, s.jobs[a].placedAt), cmp.Compare(b, a))
	})
	return s.makeRoom(id, victims, need, func(int32) bool { return true })
}

// gatedRuns are the runs the round admitted, no gang, pending or
// running on id's kind of device, that keep says may be taken for id.
func (s *sim) gatedRuns(id int32, keep func(int32) bool) []int32 {
	q, g := s.qs, s.jobs[id].g
	var out []int32
	for v := range s.jobs[:s.nTrace] {
		vj := &s.jobs[v]
		if q.gated[v] && q.of[v] >= 0 && vj.gang < 0 && (vj.state == jobRunning || vj.state == jobPending) && vj.g == g && keep(int32(v)) {
			out = append(out, int32(v))
		}
	}
	return out
}

// makeRoom takes back victims, in order, each that take accepts, on the
// first node where they make room for held job id and add up to need
// GPU-equivalents: each is stopped checkpointed and held again, and id
// placed there once their devices are free (their stop before its
// start). False when no node could: nothing is stopped then.
func (s *sim) makeRoom(id int32, victims []int32, need float64, take func(int32) bool) bool {
	j := &s.jobs[id]
	chosen := map[int32][]int32{} // by node
	for _, v := range victims {
		if !take(v) {
			continue
		}
		nid := s.jobs[v].node
		chosen[nid] = append(chosen[nid], v)
		freed, taken := 0, 0.0
		for _, c := range chosen[nid] {
			freed += s.jobs[c].k
			taken += s.gpus(s.jobs[c].units)
		}
		if s.nodes[nid].free[j.g]+freed >= j.k && taken >= need-1e-9 {
			for _, c := range chosen[nid] {
				s.reclaimRun(c)
			}
			s.place(id, nid, s.startDelay(j.g)+s.preemptDelay)
			return true
		}
	}
	return false
}

// reclaimRun stops a borrowed run for its lender: checkpointed, as the
// controller's scale to 0 stops it, and held again.
func (s *sim) reclaimRun(id int32) {
	running := s.jobs[id].state == jobRunning
	s.stopRun(id, true)
	if running {
		run := s.lastRun(id)
		run.Moved, run.Reclaimed = false, true
	}
	s.qs.gated[id] = false
	s.holdJob(id)
}

// heldWaiting counts the held jobs waiting, for the timeline's queue.
func (s *sim) heldWaiting() int {
	if s.qs == nil {
		return 0
	}
	return len(s.qs.waiting)
}
