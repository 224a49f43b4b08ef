package topview

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller"
)

// WaitReport answers "when will my job start?": every job waiting for
// GPUs, one line per job, the held ones first in the queues' one order,
// each with why it waits and when it is predicted to start; and the team
// queues' accounts. `nomad-gpu queue` draws it (WriteWaitTable), and its
// JSON is `queue -json` (docs/queue.md).
type WaitReport struct {
	GeneratedAt time.Time    `json:"generated_at"`
	Jobs        []WaitingJob `json:"jobs"`
	// Queues are the queues' accounts as the controller's leader last
	// wrote them; left out without a queue file or the controller's
	// status.
	Queues []controller.QueueStatus `json:"queues,omitempty"`
	// Leading says whether a controller replica leads (nil when its
	// status was not read): without a leader no held job is admitted.
	Leading         *bool  `json:"leading,omitempty"`
	ControllerError string `json:"controller_error,omitempty"`
	HistoryError    string `json:"history_error,omitempty"`
}

// StateHeld is a waiting job's state when it is held at count 0 until
// the controller admits it; others are StateBlocked or StatePending.
const StateHeld = "held"

// WaitingJob is one job waiting for GPUs: a held job (all its member
// groups), or one blocked or pending group of another job.
type WaitingJob struct {
	// Queue is a held job's team queue and Position its place in the
	// queues' order (1 next; 0 when not ordered: no queue file, held by
	// a dependency, invalid, or not held).
	Queue     string `json:"queue,omitempty"`
	Position  int    `json:"position,omitempty"`
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	State     string `json:"state"`
	// Asks are its waiting groups; Count their allocations together.
	Asks           []GroupAsk `json:"asks"`
	Count          int        `json:"count"`
	WaitingSeconds int64      `json:"waiting_seconds"`
	Since          time.Time  `json:"since"`
	// Reason is why it waits (a held job's: the controller's); Kind the
	// sort of reason (reasonKind).
	Reason string `json:"reason"`
	Kind   string `json:"kind"`
	// PredictedWaitSeconds is the predicted time until its last group is
	// placed, PredictedStart GeneratedAt plus it; PredictionBasis what it
	// rests on. Left out when not known (and for pending work).
	PredictedWaitSeconds *int64     `json:"predicted_wait_seconds,omitempty"`
	PredictedStart       *time.Time `json:"predicted_start,omitempty"`
	PredictionBasis      string     `json:"prediction_basis,omitempty"`
}

// GroupAsk is one waiting group of a job: its allocations and what one
// of them asks for.
type GroupAsk struct {
	Group   string      `json:"group"`
	Count   int         `json:"count"`
	Devices []DeviceAsk `json:"devices"`
}

// Waiting reports v's waiting work. namespace keeps the jobs of one
// namespace ("" or "*": all); it applies to the held jobs the
// controller reports that v's queue does not list (a namespace's view
// lists only its own).
func Waiting(v *View, namespace string) WaitReport {
	r := WaitReport{GeneratedAt: v.GeneratedAt, Jobs: []WaitingJob{}, ControllerError: v.ControllerError, HistoryError: v.HistoryError}
	gangs := map[[2]string]controller.GangStatus{}
	if c := v.Controller; c != nil {
		leading := c.Leading
		r.Leading, r.Queues = &leading, c.Queues
		for _, g := range c.Gangs {
			gangs[[2]string{g.Namespace, g.Job}] = g
		}
	}
	held := map[[2]string]int{} // index in r.Jobs
	for _, e := range v.Queue {
		if !e.Gang {
			r.Jobs = append(r.Jobs, entryJob(v.GeneratedAt, e))
			continue
		}
		k := [2]string{e.Namespace, e.Job}
		i, ok := held[k]
		if !ok {
			i, held[k] = len(r.Jobs), len(r.Jobs)
			r.Jobs = append(r.Jobs, WaitingJob{Namespace: e.Namespace, Job: e.Job, State: StateHeld, Since: e.Since,
				PredictedWaitSeconds: e.PredictedWaitSeconds, PredictionBasis: e.PredictionBasis})
		}
		addMember(&r.Jobs[i], e)
	}
	if v.Controller != nil {
		for _, g := range v.Controller.Gangs {
			k := [2]string{g.Namespace, g.Job}
			if _, listed := held[k]; listed || (g.State != "waiting" && g.State != "invalid") || !inNamespace(g.Namespace, namespace) {
				continue
			}
			held[k] = len(r.Jobs)
			r.Jobs = append(r.Jobs, WaitingJob{Namespace: g.Namespace, Job: g.Job, State: StateHeld, Asks: []GroupAsk{},
				Count: g.Wanted, Since: g.Since, WaitingSeconds: waitSeconds(v.GeneratedAt, g.Since)})
		}
	}
	for k, i := range held {
		applyGang(&r.Jobs[i], gangs[k], v.GeneratedAt)
	}
	for i := range r.Jobs {
		if r.Jobs[i].Kind == "" {
			r.Jobs[i].Kind = reasonKind(r.Jobs[i].Reason)
		}
	}
	slices.SortStableFunc(r.Jobs, waitOrder)
	return r
}

// entryJob is the waiting job of one queue entry of work not held.
func entryJob(now time.Time, e QueueEntry) WaitingJob {
	j := WaitingJob{Namespace: e.Namespace, Job: e.Job, State: e.State,
		Asks:  []GroupAsk{{Group: e.Group, Count: e.Count, Devices: e.Devices}},
		Count: e.Count, WaitingSeconds: e.WaitingSeconds, Since: e.Since, Reason: e.Reason,
		PredictedWaitSeconds: e.PredictedWaitSeconds, PredictionBasis: e.PredictionBasis}
	j.PredictedStart = startAt(now, j.PredictedWaitSeconds)
	return j
}

// addMember adds a held job's member group e: the job waits as long as
// its oldest group, and starts when its last group is placed (unknown
// when any group's wait is).
func addMember(j *WaitingJob, e QueueEntry) {
	j.Asks = append(j.Asks, GroupAsk{Group: e.Group, Count: e.Count, Devices: e.Devices})
	j.Count += e.Count
	j.WaitingSeconds = max(j.WaitingSeconds, e.WaitingSeconds)
	if e.Since.Before(j.Since) {
		j.Since = e.Since
	}
	switch w := e.PredictedWaitSeconds; {
	case j.PredictedWaitSeconds == nil:
	case w == nil:
		j.PredictedWaitSeconds, j.PredictionBasis = nil, e.PredictionBasis
	case *w > *j.PredictedWaitSeconds:
		j.PredictedWaitSeconds, j.PredictionBasis = w, e.PredictionBasis
	}
}

// applyGang gives a held job what the controller says of it: its queue,
// place and reason (one of its own when the controller said none).
func applyGang(j *WaitingJob, g controller.GangStatus, now time.Time) {
	j.Queue, j.Position, j.Reason, j.Kind = g.Queue, g.Position, g.Reason, g.Kind
	if j.Kind == "" && j.Reason != "" { // a status an older leader wrote
		j.Kind = controller.WaitKind(g.State, g.Reason)
	}
	if j.Reason == "" {
		j.Kind = controller.WaitGang
		j.Reason = fmt.Sprintf("gang: its %s wait for the controller to admit them all at once; it has given no reason yet", members(j.Count))
	}
	j.PredictedStart = startAt(now, j.PredictedWaitSeconds)
}

func members(n int) string {
	if n == 1 {
		return "1 member"
	}
	return fmt.Sprintf("%d members", n)
}

func startAt(now time.Time, wait *int64) *time.Time {
	if wait == nil {
		return nil
	}
	t := now.Add(time.Duration(*wait) * time.Second)
	return &t
}

func inNamespace(ns, want string) bool {
	return want == "" || want == "*" || ns == want
}

// waitOrder puts the held jobs the queues order first, by their place;
// then the rest longest wait first, as the queue is.
func waitOrder(a, b WaitingJob) int {
	if (a.Position > 0) != (b.Position > 0) {
		if a.Position > 0 {
			return -1
		}
		return 1
	}
	return cmp.Or(cmp.Compare(a.Position, b.Position), -cmp.Compare(a.WaitingSeconds, b.WaitingSeconds),
		cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Job, b.Job), cmp.Compare(a.State, b.State))
}

// reasonPrefixes name the kind of a reason of work not held by how it
// begins: Nomad's placement failures (FailureReason) and the queue's own
// reasons have their words. (A held job's kind is the controller's:
// controller.WaitKind.)
var reasonPrefixes = []struct{ prefix, kind string }{
	{"quota", controller.WaitQuota}, // Nomad's `quota "q" reached`
	{"never fits:", controller.WaitInvalid},
	{"placed on ", "pending"},
}

// reasonKind is the sort of the reason of waiting work not held, a word
// to scan and filter by: quota, capacity, invalid, pending or other.
func reasonKind(reason string) string {
	for _, p := range reasonPrefixes {
		if strings.HasPrefix(reason, p.prefix) {
			return p.kind
		}
	}
	switch {
	case strings.Contains(reason, "quota exhausted"):
		return controller.WaitQuota
	case strings.Contains(reason, " exhausted on "):
		return controller.WaitCapacity
	}
	return controller.WaitOther
}
