package sizing

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/predict"
)

// Forecast is the runtime and wait prediction for what the cluster
// holds now, the one computation behind the APM's
// nomad_gpu_job_predicted_* metrics and `nomad-gpu top`: for every GPU
// task of a pending or running allocation its predicted remaining and total
// run time (predict.Runtime), and for every queued task group its predicted
// wait (predict.Wait) and run time.
//
// The history is Nomad's own allocation history: the run records (RunsOf)
// of the allocations Nomad still holds, the pending and running ones and
// the terminal ones the caller listed (the APM keeps those finished within
// its finished_window; top reads the same window). The sizer's store is not
// read here, so a forecast needs nothing but the Nomad API, and it knows no
// more of a job than Nomad still remembers (until garbage collection, and
// within the window).
//
// The model is predict's, unchanged: per pool, a task's run time is the
// median of its own last runs, else of the pool's runs of the same slice,
// else of the same kind, conditioned on how long it has run; a queued
// group's wait is a list schedule of the pool's slices of its unit. Nothing
// is made up: an estimate with nothing to rest on is not Known, and callers
// show it as unknown.
func Forecast(in ForecastInput, now time.Time) Forecasts {
	h := newForecastHistory(in.Runs)
	var out Forecasts

	// Tasks holding slices: every run not yet ended, once.
	type allocTask struct{ alloc, task string }
	seenTask := map[allocTask]bool{}
	for _, r := range in.Runs {
		if r.Outcome != history.OutcomeRunning || seenTask[allocTask{r.AllocID, r.Key.Task}] {
			continue
		}
		seenTask[allocTask{r.AllocID, r.Key.Task}] = true
		f := TaskForecast{Key: r.Key, AllocID: r.AllocID, Pool: r.Pool, Slice: r.Slice, Started: r.Started, State: TaskPending}
		switch {
		case r.Started.IsZero():
			f.Remaining = h.runtime(r.Pool, r.Key, r.Slice, 0)
			f.Runtime = f.Remaining
		case !r.Finished.IsZero() && !r.Finished.Before(r.Started):
			// Dead in an allocation still running (another task runs on).
			f.State = TaskFinished
			f.Elapsed = r.Finished.Sub(r.Started)
			f.Remaining = predict.Estimate{Seconds: 0, Basis: "task finished", Known: true}
			f.Runtime = predict.Estimate{Seconds: f.Elapsed.Seconds(), Basis: "task finished", Known: true}
		default:
			f.State = TaskRunning
			f.Elapsed = max(now.Sub(r.Started), 0)
			f.Remaining = h.runtime(r.Pool, r.Key, r.Slice, f.Elapsed)
			f.Runtime = f.Remaining
			if f.Runtime.Known {
				f.Runtime.Seconds += f.Elapsed.Seconds()
			}
		}
		out.Tasks = append(out.Tasks, f)
	}
	slices.SortFunc(out.Tasks, func(a, b TaskForecast) int {
		return cmp.Or(cmp.Compare(a.Key.String(), b.Key.String()), cmp.Compare(a.AllocID, b.AllocID))
	})

	// Queued groups: one each (the oldest when given twice), in order.
	type groupKey struct{ ns, job, group string }
	seen := map[groupKey]int{}
	for _, q := range in.Queued {
		k := groupKey{q.Namespace, q.Job, q.Group}
		if i, dup := seen[k]; dup {
			if q.Since.Before(out.Queued[i].Since) {
				out.Queued[i] = WaitForecast{QueuedWork: q}
			}
			continue
		}
		seen[k] = len(out.Queued)
		out.Queued = append(out.Queued, WaitForecast{QueuedWork: q})
	}
	slices.SortFunc(out.Queued, func(a, b WaitForecast) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Job, b.Job), cmp.Compare(a.Group, b.Group))
	})

	// Each pool and unit is its own schedule: asks are counted in units
	// that do not convert (predict.Capacity), so tasks of other units
	// neither take nor free what a queued task needs. Passing Wait only
	// its unit's tasks gives the answer it gives with all of them.
	type poolUnit struct {
		pool string
		unit predict.Unit
	}
	queues := map[poolUnit][]predict.QueuedTask{}
	lastOf := make([]predict.QueuedTask, len(out.Queued))
	for i := range out.Queued {
		w := &out.Queued[i]
		s, err := AskSlice(w.Asks)
		if err != nil {
			w.Wait = predict.Estimate{Basis: err.Error()}
			w.Runtime = w.Wait
			continue
		}
		w.Slice = s
		if w.Pool == "all" || w.Pool == "" {
			w.Wait = predict.Estimate{Basis: "no one node pool to schedule in"}
			w.Runtime = w.Wait
			continue
		}
		key := history.Key{Namespace: w.Namespace, Job: w.Job, Group: w.Group, Task: w.Task}
		w.Runtime = h.runtime(w.Pool, key, s, 0)
		pu := poolUnit{w.Pool, predict.UnitOf(s)}
		n := max(w.Allocs, 1)
		for j := range n {
			t := predict.QueuedTask{
				ID:  fmt.Sprintf("%s/%s/%s#%06d", w.Namespace, w.Job, w.Group, j),
				Key: key, Slice: s, Priority: w.Priority, Created: w.Since, Runtime: w.Runtime,
			}
			queues[pu] = append(queues[pu], t)
			lastOf[i] = t
		}
	}
	running := map[poolUnit][]predict.RunningTask{}
	for _, t := range out.Tasks {
		pu := poolUnit{t.Pool, predict.UnitOf(t.Slice)}
		running[pu] = append(running[pu], predict.RunningTask{Key: t.Key, Slice: t.Slice, Remaining: t.Remaining})
	}
	for i := range out.Queued {
		w := &out.Queued[i]
		if w.Slice.Kind == "" || w.Pool == "all" || w.Pool == "" {
			continue
		}
		pu := poolUnit{w.Pool, predict.UnitOf(w.Slice)}
		last := lastOf[i]
		free := predict.Capacity{pu.unit: in.Free[w.Pool][pu.unit]}
		w.Wait = predict.Wait(last, running[pu], predict.Ahead(last, queues[pu]), free)
	}
	return out
}

// ForecastInput is what Forecast reads: what the APM's cache and top's
// reader both hold.
type ForecastInput struct {
	// Runs are the run records of the GPU tasks of the allocations Nomad
	// holds (RunsOf): pending and running ones, whose tasks are forecast
	// and hold their slices, and terminal ones, the history. Each carries
	// its node's pool; forecasts read the runs of their own pool only.
	Runs []history.Run
	// Free are the free slices of each node pool, per unit: the healthy
	// device instances of schedulable (ready, eligible, not draining)
	// nodes that no pending or running allocation holds.
	Free map[string]predict.Capacity
	// Queued are the task groups waiting to be placed (blocked
	// evaluations' unplaced allocations). Pending allocations are not
	// queued work here: they hold their slices and are among Runs.
	Queued []QueuedWork
}

// QueuedWork is one task group's allocations waiting to be placed.
type QueuedWork struct {
	Namespace, Job, Group string
	// Task is the group's task whose history predicts the group's run
	// time (history.Key's Task): the first, by name, asking for a GPU,
	// MIG instance or MPS share.
	Task string
	// Pool is the node pool the job targets; "all" is not forecast.
	Pool     string
	Priority int
	// Since is when the work started waiting (the blocked evaluation's
	// create time); with Priority it orders the queue.
	Since time.Time
	// Allocs is how many of the group's allocations wait (1 if less).
	Allocs int
	// Asks are the devices one allocation asks for.
	Asks []Ask
}

// Ask is one device request: a jobspec device name, as Nomad parses it
// ("gpu", "nvidia/gpu", "nvidia/gpu/<model>", "nvidia/mig/1g.10gb",
// "nvidia/mps"), and how many.
type Ask struct {
	Name  string
	Count int
}

// Task states of a TaskForecast.
const (
	TaskPending  = "pending"  // not started: its allocation is placed, holds its slice
	TaskRunning  = "running"  // started and not finished
	TaskFinished = "finished" // dead in an allocation that still runs
)

// Forecasts are Forecast's predictions.
type Forecasts struct {
	// Tasks are the GPU tasks of pending and running allocations, by
	// key, then allocation ID.
	Tasks []TaskForecast
	// Queued are the queued task groups, one each, by namespace, job,
	// group.
	Queued []WaitForecast
}

// TaskForecast is one GPU task holding its slice.
type TaskForecast struct {
	Key     history.Key
	AllocID string
	Pool    string
	Slice   history.Slice
	// State is TaskPending, TaskRunning or TaskFinished.
	State string
	// Started is the task's (last) start, zero when not started;
	// Elapsed how long it has run.
	Started time.Time
	Elapsed time.Duration
	// Remaining is the predicted run time left from now; Runtime the
	// predicted whole run time (Elapsed + Remaining), with Remaining's
	// basis. Neither is Known when there was nothing to predict from.
	Remaining, Runtime predict.Estimate
}

// WaitForecast is one queued task group.
type WaitForecast struct {
	QueuedWork
	// Slice is what one allocation asks for; zero when its asks are no
	// one unit (then nothing is Known).
	Slice history.Slice
	// Wait is the predicted time from now until the group's last queued
	// allocation is placed (all of them: the allocations of one group
	// queue one after the other); Runtime the predicted run time of one
	// allocation once started.
	Wait, Runtime predict.Estimate
}

// Basis kinds, what an Estimate rests on in a word: the basis label of the
// APM's prediction metrics (a bounded set, where Estimate.Basis, with its
// run counts and elapsed time, is not).
const (
	BasisJob      = "job"           // the task's own recent runs
	BasisPool     = "pool"          // the pool's runs of the same slice or kind
	BasisElapsed  = "elapsed"       // it has outlived its history, or has none: taken to be half done
	BasisFinished = "finished"      // the task has ended
	BasisFitsNow  = "fits_now"      // a queued ask fits the free slices now
	BasisSchedule = "list_schedule" // a list schedule of the pool
	BasisNone     = "none"          // not Known
	BasisOther    = "other"         // an estimate of a kind this list does not name
)

// BasisKind is the kind of e's basis: one of the Basis constants.
func BasisKind(e predict.Estimate) string {
	if !e.Known {
		return BasisNone
	}
	for _, p := range []struct{ prefix, kind string }{
		{"job p50", BasisJob},
		{"pool p50", BasisPool},
		{"elapsed×2", BasisElapsed},
		{"task finished", BasisFinished},
		{"fits now", BasisFitsNow},
		{"list schedule", BasisSchedule},
	} {
		if strings.HasPrefix(e.Basis, p.prefix) {
			return p.kind
		}
	}
	return BasisOther
}

// JobID names a job in a namespace.
type JobID struct{ Namespace, ID string }

// RunsOf is the run record (RunOf) of every GPU task (GPUTasks) of allocs,
// each with its node's pool (pools: node ID → pool; "" when the node is not
// there) and its job (nil when jobs lacks it). A task given two device
// groups of one unit is one run of their summed count; of two units, one
// run of the first.
func RunsOf(allocs []*api.AllocationListStub, pools map[string]string, jobs map[JobID]*api.JobListStub) []history.Run {
	byID := make(map[string]*api.AllocationListStub, len(allocs))
	for _, a := range allocs {
		if a != nil {
			byID[a.ID] = a
		}
	}
	type allocTask struct{ alloc, task string }
	at := map[allocTask]int{}
	var out []history.Run
	for _, t := range GPUTasks(allocs) {
		a := byID[t.AllocID]
		r := RunOf(a, t, pools[t.NodeID], jobs[JobID{a.Namespace, a.JobID}])
		k := allocTask{t.AllocID, t.Key.Task}
		if i, dup := at[k]; dup {
			if predict.UnitOf(out[i].Slice) == predict.UnitOf(r.Slice) {
				out[i].Slice.Count += r.Slice.Count
			}
			continue
		}
		at[k] = len(out)
		out = append(out, r)
	}
	return out
}

// AskSlice is the slice one allocation's asks come to: nvidia (or
// vendorless) gpu, mig and mps requests, summed when they are of one unit
// (whole GPUs, MPS shares, MIG instances of one profile). Other devices
// are left out. It fails when no ask is for a GPU, a MIG request names no
// profile, or the asks are of more than one unit.
func AskSlice(asks []Ask) (history.Slice, error) {
	var s history.Slice
	for _, a := range asks {
		if a.Count <= 0 {
			continue
		}
		parts := strings.SplitN(a.Name, "/", 3)
		vendor, typ, name := "", parts[0], ""
		if len(parts) > 1 {
			vendor, typ = parts[0], parts[1]
		}
		if len(parts) > 2 {
			name = parts[2]
		}
		if vendor != "" && vendor != "nvidia" {
			continue
		}
		var one history.Slice
		switch typ {
		case history.SliceGPU, history.SliceMPS:
			one = history.Slice{Kind: typ, Count: a.Count}
		case history.SliceMIG:
			if name == "" {
				return history.Slice{}, fmt.Errorf("asks for a MIG instance of any profile (%s)", a.Name)
			}
			one = history.Slice{Kind: typ, Count: a.Count, Profile: name}
		default:
			continue
		}
		switch {
		case s.Kind == "":
			s = one
		case predict.UnitOf(s) == predict.UnitOf(one):
			s.Count += one.Count
		default:
			return history.Slice{}, fmt.Errorf("asks for %s and %s: more than one kind of slice", predict.SliceString(s), predict.SliceString(one))
		}
	}
	if s.Kind == "" {
		return history.Slice{}, fmt.Errorf("asks for no GPU")
	}
	return s, nil
}

// UnitLabel names a unit as the metrics' device label does: nvidia/gpu,
// nvidia/mps, nvidia/mig/<profile>.
func UnitLabel(u predict.Unit) string {
	if u.Profile != "" {
		return "nvidia/" + u.Kind + "/" + u.Profile
	}
	return "nvidia/" + u.Kind
}

// forecastHistory indexes the runs predict.Runtime learns from, by pool:
// each task's, and each slice kind's, of the runs predict.RunSeconds
// accepts (Runtime reads no others). Runtime's first level is the task's
// own runs, of any slice, when there are MinRuns of them; its other levels
// read only the runs of the slice's kind. So passing it the task's own
// runs, or else its kind's, gives the estimate that passing all the pool's
// runs would, without scanning the whole pool for every task.
type forecastHistory struct {
	own    map[string]map[history.Key][]history.Run // pool → key → accepted runs
	byKind map[string]map[string][]history.Run      // pool → kind → accepted runs
}

func newForecastHistory(runs []history.Run) *forecastHistory {
	h := &forecastHistory{own: map[string]map[history.Key][]history.Run{}, byKind: map[string]map[string][]history.Run{}}
	for _, r := range runs {
		if _, ok := predict.RunSeconds(r); !ok {
			continue
		}
		if h.own[r.Pool] == nil {
			h.own[r.Pool] = map[history.Key][]history.Run{}
			h.byKind[r.Pool] = map[string][]history.Run{}
		}
		h.own[r.Pool][r.Key] = append(h.own[r.Pool][r.Key], r)
		h.byKind[r.Pool][r.Slice.Kind] = append(h.byKind[r.Pool][r.Slice.Kind], r)
	}
	return h
}

// runtime is predict.Runtime over the pool's runs.
func (h *forecastHistory) runtime(pool string, k history.Key, s history.Slice, elapsed time.Duration) predict.Estimate {
	if own := h.own[pool][k]; len(own) >= predict.MinRuns {
		return predict.Runtime(k, s, elapsed, own)
	}
	// Fewer own runs than a level needs: the task's own runs of its kind
	// are among these, the others would be skipped anyway.
	return predict.Runtime(k, s, elapsed, h.byKind[pool][s.Kind])
}
