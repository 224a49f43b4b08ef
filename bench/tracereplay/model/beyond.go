package model

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/predict"
)

// Beyond (Policy.Beyond, gpu-queue): nodes_needed{beyond=D}, as the
// APM's sizing step takes it (autoscaler/apm NodesNeeded and
// servedWithin): a waiting job that the runtime forecast places on the
// pool's capacity within D is left out of the count, since a node
// ordered now would serve it no sooner. The forecast is the product's
// own, sizing.Forecast, on what the APM would read of the model's state:
//
//   - history: the runs that ended within the APM's finished_window
//     (forecastWindow, wall clock, at most forecastMaxFinished of them),
//     each an allocation of the job's task (namespace default, group g,
//     task t, as the real engine's jobs). A run ended by a preemption is
//     Nomad's preempted allocation, which predict does not learn from;
//     one that completed, or that the controller stopped (a move, a
//     scale-in's move, a gang member stopped with its peer) is a complete
//     allocation, its run time the segment it ran, as Nomad records it;
//   - the pending and running allocations hold their slices, their
//     remaining run time predicted from that history (conditioned on how
//     long they have run), never from the trace's durations;
//   - the free slices per unit of the schedulable nodes;
//   - the waiting jobs as blocked task groups (a job of stock Nomad's
//     members one group of its members waiting), their evaluation's time
//     as their Since. Gangs waiting for the controller's admission are no
//     blocked evaluation, and are not forecast: they always count.
//
// A job whose wait is not known (no history of its kind, an ask larger
// than the pool's capacity of its unit) always counts. The forecast is
// made only at evaluations where nodes_needed without beyond is above 0:
// leaving jobs out never raises it.
type beyondState struct {
	// d is Policy.Beyond in trace time; 0: off.
	d time.Duration
	// window is forecastWindow in trace time.
	window time.Duration
	// hist are the complete runs, in the order their ends were recorded;
	// from is the first that may still be within the window.
	hist []history.Run
	from int
	// keys are each job's task key, made on first use.
	keys []history.Key
	// out counts, per sub-queue, its waiting jobs left out.
	out []int
	// forecasts counts the forecasts made and leftOut the jobs they left
	// out, for the notes; leftAt is when a forecast first left each
	// waiting job out (-1: none since it last waited), and the jobs so
	// left out were placed within d of it (kept) or later (late).
	forecasts, leftOut int
	leftAt             []time.Duration
	kept, late         int
}

// forecastWindow and forecastMaxFinished are the APM's finished_window
// and finished_max_allocs defaults (apm.DefaultFinishedWindow,
// apm.DefaultFinishedMax): the terminal allocations its forecast learns
// from. The window is wall clock.
const (
	forecastWindow      = time.Hour
	forecastMaxFinished = 5000
)

// forecastPool is the node pool the replay's jobs and nodes are in.
const forecastPool = "gpu"

// jobKey is job id's task as the forecast names it.
func (s *sim) jobKey(id int32) history.Key {
	if len(s.bey.keys) < len(s.jobs) {
		s.bey.keys = append(s.bey.keys, make([]history.Key, len(s.jobs)-len(s.bey.keys))...)
	}
	k := &s.bey.keys[id]
	if k.Job == "" {
		*k = history.Key{Namespace: "default", Job: s.recs[id].ID, Group: "g", Task: "t"}
		if s.jobs[id].placeholder {
			k.Job = "placeholder-" + strconv.Itoa(int(id))
		}
	}
	return *k
}

// jobSlice is what job id asks for, as the forecast counts it.
func (s *sim) jobSlice(id int32) history.Slice {
	j := &s.jobs[id]
	gr := &s.groups[j.g]
	return history.Slice{Kind: gr.kind, Count: j.k, Profile: gr.profile}
}

// askName is the device a job of group g asks for.
func (s *sim) askName(g int) string {
	gr := &s.groups[g]
	if gr.profile != "" {
		return "nvidia/" + gr.kind + "/" + gr.profile
	}
	return "nvidia/" + gr.kind
}

// runEnded records job id's last run, just ended (its End set), in the
// forecast's history unless a preemption ended it. Only with beyond.
func (s *sim) runEnded(id int32) {
	if s.bey.d <= 0 || s.jobs[id].placeholder {
		return
	}
	runs := s.recs[id].Runs
	if len(runs) == 0 {
		return
	}
	r := &runs[len(runs)-1]
	if r.Preempted {
		return
	}
	s.bey.hist = append(s.bey.hist, history.Run{
		Key: s.jobKey(id), AllocID: strconv.Itoa(int(id)) + "/" + strconv.Itoa(len(runs)), Slice: s.jobSlice(id),
		Pool: forecastPool, Priority: s.jobs[id].base, Started: epoch.Add(r.Start), Finished: epoch.Add(r.End),
		Outcome: history.OutcomeComplete,
	})
}

// servedInTime fills s.bey.out: per sub-queue of a group counted (counts,
// by group), the waiting jobs the forecast places on the pool within
// beyond.
func (s *sim) servedInTime(counts func(g int) bool) []int {
	b := &s.bey
	if cap(b.out) < len(s.sqs) {
		b.out = make([]int, len(s.sqs))
	}
	b.out = b.out[:len(s.sqs)]
	clear(b.out)
	b.forecasts++
	in := s.forecastInput(counts)
	inTime := servedWithin(in, epoch.Add(s.now), b.d)
	if forecastCheck != nil {
		forecastCheck(in, epoch.Add(s.now), b.d, inTime)
	}
	if len(inTime) == 0 {
		return b.out
	}
	for i := range s.sqs {
		q := &s.sqs[i]
		if q.Len() == 0 || !counts(q.g) {
			continue
		}
		for _, id := range q.ids {
			if inTime[s.recs[id].ID] {
				b.out[i]++
				b.leftOut++
				if len(b.leftAt) < len(s.jobs) {
					for range len(s.jobs) - len(b.leftAt) {
						b.leftAt = append(b.leftAt, -1)
					}
				}
				if b.leftAt[id] < 0 {
					b.leftAt[id] = s.now
				}
			}
		}
	}
	return b.out
}

// beyondPlaced scores the forecast that first left job id out, as it is
// placed: within beyond of it, or later.
func (s *sim) beyondPlaced(id int32) {
	b := &s.bey
	if int(id) >= len(b.leftAt) || b.leftAt[id] < 0 {
		return
	}
	if s.now-b.leftAt[id] <= b.d {
		b.kept++
	} else {
		b.late++
	}
	b.leftAt[id] = -1
}

// beyondNote says what beyond did in the run, and how its forecasts
// held: "" without beyond.
func (s *sim) beyondNote() string {
	b := &s.bey
	if b.d <= 0 {
		return ""
	}
	never := 0
	for _, t := range b.leftAt {
		if t >= 0 {
			never++
		}
	}
	return fmt.Sprintf("nodes_needed beyond %s (trace time): %d forecasts left %d waiting jobs out of the count (a job once an evaluation); of the jobs left out, %d were placed within %s of the first forecast that left them out, %d later, %d not by the horizon",
		b.d, b.forecasts, b.leftOut, b.kept, b.d, b.late, never)
}

// forecastInput is what the APM's forecast reads of the model's state,
// for the groups counts says (the units the query counts; units do not
// convert, so the others change no wait of these).
func (s *sim) forecastInput(counts func(g int) bool) sizing.ForecastInput {
	b := &s.bey
	in := sizing.ForecastInput{Free: map[string]predict.Capacity{}}
	// History: the complete runs that ended within the window, up to now
	// (a stopped task exits a moment after its stop), the newest
	// forecastMaxFinished.
	cut := s.now - b.window
	for b.from < len(b.hist) && b.hist[b.from].Finished.Before(epoch.Add(cut-s.preemptDelay)) {
		b.from++ // ends are recorded at most preemptDelay ahead of time
	}
	lo, hi := epoch.Add(cut), epoch.Add(s.now)
	for i := len(b.hist) - 1; i >= b.from && len(in.Runs) < forecastMaxFinished; i-- {
		if r := b.hist[i]; counts(s.groupOf(r.Slice.Kind, r.Slice.Profile)) && !r.Finished.Before(lo) && !r.Finished.After(hi) {
			in.Runs = append(in.Runs, r)
		}
	}
	// The allocations holding slices, and the free slices of the
	// schedulable nodes.
	free := predict.Capacity{}
	for _, nid := range s.ready {
		n := &s.nodes[nid]
		for _, id := range n.allocs {
			j := &s.jobs[id]
			if !counts(j.g) {
				continue
			}
			r := history.Run{Key: s.jobKey(id), AllocID: strconv.Itoa(int(id)) + "/" + strconv.Itoa(len(s.recs[id].Runs)+1),
				Slice: s.jobSlice(id), Pool: forecastPool, Priority: j.base, Outcome: history.OutcomeRunning}
			if j.state == jobRunning {
				r.Started = epoch.Add(j.since)
			}
			in.Runs = append(in.Runs, r)
		}
		if n.ineligible {
			continue
		}
		for g, f := range n.free {
			if counts(g) && f > 0 {
				free[predict.UnitOf(history.Slice{Kind: s.groups[g].kind, Profile: s.groups[g].profile})] += f
			}
		}
	}
	in.Free[forecastPool] = free
	// The waiting jobs, one blocked group each (stock Nomad's members of
	// one job together).
	groupOf := map[int32]int{} // gang → its entry in in.Queued
	for i := range s.sqs {
		q := &s.sqs[i]
		if q.Len() == 0 || !counts(q.g) {
			continue
		}
		for _, id := range q.ids {
			j := &s.jobs[id]
			since := epoch.Add(j.evalAt)
			if j.gang >= 0 {
				if at, ok := groupOf[j.gang]; ok {
					w := &in.Queued[at]
					w.Allocs++
					if since.Before(w.Since) {
						w.Since = since
					}
					continue
				}
				groupOf[j.gang] = len(in.Queued)
			}
			k := s.jobKey(id)
			in.Queued = append(in.Queued, sizing.QueuedWork{
				Namespace: k.Namespace, Job: k.Job, Group: k.Group, Task: k.Task, Pool: forecastPool,
				Priority: j.prio, Since: since, Allocs: 1, Asks: []sizing.Ask{{Name: s.askName(q.g), Count: q.k}},
			})
		}
	}
	return in
}

// forecastCheck, where a test sets it, sees every forecast's input and
// servedWithin's answer.
var forecastCheck func(in sizing.ForecastInput, now time.Time, d time.Duration, inTime map[string]bool)

// forecastWithin is the APM's rule itself (servedWithin): the jobs
// whose queued group sizing.Forecast places within d. servedWithin gives
// the same answer faster; the tests hold it to this.
func forecastWithin(in sizing.ForecastInput, now time.Time, d time.Duration) map[string]bool {
	out := map[string]bool{}
	for _, w := range sizing.Forecast(in, now).Queued {
		if w.Wait.Known && w.Wait.Duration() <= d {
			out[w.Job] = true
		}
	}
	return out
}

// servedWithin is forecastWithin, sizing.Forecast's waits compared with
// d, for the model's input (one pool, one group a job), made faster
// with the same predictor package and the same answer:
//
//   - predict.Runtime on the same runs as Forecast's history passes it
//     (the task's own where it has predict.MinRuns, else its kind's), a
//     queued job's once per slice where it has too few runs of its own;
//   - the queue of each unit sorted once: the tasks ahead of one
//     (predict.Ahead) are the sorted queue before it;
//   - predict.Wait only where its answer could be d or less: a queued
//     task fits now (wait 0) exactly where the first step of its list
//     schedule places it, which for every task reads only the tasks
//     ahead, so one pass over the sorted queue tells it for all. One that
//     does not can be placed by time d only if what that step left free
//     and what frees by d (the running tasks' slices whose predicted
//     remaining run time is d or less, and the slices of the tasks ahead
//     placed now whose run time is) make its ask: a task placed later
//     gives back no more than it took. Where they do not, its wait is
//     past d, and the schedule is not run.
func servedWithin(in sizing.ForecastInput, now time.Time, d time.Duration) map[string]bool {
	own := map[history.Key][]history.Run{}
	byKind := map[string][]history.Run{}
	for _, r := range in.Runs {
		if _, ok := predict.RunSeconds(r); ok {
			own[r.Key] = append(own[r.Key], r)
			byKind[r.Slice.Kind] = append(byKind[r.Slice.Kind], r)
		}
	}
	runtime := func(k history.Key, sl history.Slice, elapsed time.Duration) predict.Estimate {
		if runs := own[k]; len(runs) >= predict.MinRuns {
			return predict.Runtime(k, sl, elapsed, runs)
		}
		return predict.Runtime(k, sl, elapsed, byKind[sl.Kind])
	}

	// The running tasks, by unit, and the slices of each predicted to
	// free within d.
	running := map[predict.Unit][]predict.RunningTask{}
	freedBy := map[predict.Unit]int{}
	for _, r := range in.Runs {
		if r.Outcome != history.OutcomeRunning {
			continue
		}
		var rem predict.Estimate
		if r.Started.IsZero() {
			rem = runtime(r.Key, r.Slice, 0)
		} else {
			rem = runtime(r.Key, r.Slice, max(now.Sub(r.Started), 0))
		}
		u := predict.UnitOf(r.Slice)
		running[u] = append(running[u], predict.RunningTask{Key: r.Key, Slice: r.Slice, Remaining: rem})
		if rem.Known && max(rem.Seconds, 0) <= d.Seconds() {
			freedBy[u] += r.Slice.Count
		}
	}

	// The queued tasks, by unit; each group's last is the one whose wait
	// is its group's.
	type queued struct {
		t    predict.QueuedTask
		last bool
	}
	queues := map[predict.Unit][]queued{}
	fresh := map[history.Slice]predict.Estimate{} // runtimes of tasks with too few runs of their own
	for _, w := range in.Queued {
		sl, err := sizing.AskSlice(w.Asks)
		if err != nil || w.Pool == "all" || w.Pool == "" {
			continue // not Known
		}
		k := history.Key{Namespace: w.Namespace, Job: w.Job, Group: w.Group, Task: w.Task}
		var rt predict.Estimate
		if len(own[k]) >= predict.MinRuns {
			rt = runtime(k, sl, 0)
		} else if e, ok := fresh[sl]; ok {
			rt = e
		} else {
			rt = runtime(k, sl, 0)
			fresh[sl] = rt
		}
		u := predict.UnitOf(sl)
		n := max(w.Allocs, 1)
		for j := range n {
			queues[u] = append(queues[u], queued{last: j == n-1, t: predict.QueuedTask{
				ID:  fmt.Sprintf("%s/%s/%s#%06d", w.Namespace, w.Job, w.Group, j),
				Key: k, Slice: sl, Priority: w.Priority, Created: w.Since, Runtime: rt,
			}})
		}
	}

	out := map[string]bool{}
	var ahead []predict.QueuedTask
	for u, q := range queues {
		slices.SortFunc(q, func(a, b queued) int {
			switch {
			case predict.Before(a.t, b.t):
				return -1
			case predict.Before(b.t, a.t):
				return 1
			}
			return 0
		})
		free := predict.Capacity{u: in.Free[forecastPool][u]}
		total := free[u]
		for _, r := range running[u] {
			total += r.Slice.Count
		}
		// avail is what the schedule's first step leaves free at a task's
		// turn; freed what frees within d of the slices held now and of
		// those the first step places.
		avail, freed := free[u], freedBy[u]
		ahead = ahead[:0]
		for _, x := range q {
			fitsNow := x.t.Slice.Count <= avail
			switch {
			case !x.last || x.t.Slice.Count > total:
			case fitsNow:
				out[x.t.Key.Job] = true
			case avail+freed >= x.t.Slice.Count:
				if e := predict.Wait(x.t, running[u], ahead, free); e.Known && e.Duration() <= d {
					out[x.t.Key.Job] = true
				}
			}
			if fitsNow {
				// Placed by the first step of the schedule of every task
				// behind it: it takes its slices now and frees them after
				// its run time.
				avail -= x.t.Slice.Count
				if x.t.Runtime.Known && max(x.t.Runtime.Seconds, 0) <= d.Seconds() {
					freed += x.t.Slice.Count
				}
			}
			ahead = append(ahead, x.t)
		}
	}
	return out
}
