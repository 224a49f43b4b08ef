package model

import (
	"fmt"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
)

// consolidating is nodes of 4 GPUs with checkpointed preemption, with or
// without the controller's moves, budgetHour consolidations an hour.
func consolidating(nodes int, moves bool, budgetHour int) Options {
	o := checkpointed(0, 0)
	o.Cluster = fixed(nodes, 4)
	o.Config.Moves = moves
	o.Policy.MoveBudgetHour, o.Policy.MoveBudgetJobDay = budgetHour, 3
	o.Policy.MoveSettle, o.Policy.MoveHold = 30*sec, 60*sec
	return o
}

// fragmented is two 1-GPU jobs of 100s and two of 1000s at 0 per node:
// binpacking fills one node before the next, so each node ends up with 2
// GPUs free at 101s.
func fragmented(nodes int) []tracereplay.Job {
	var jobs []tracereplay.Job
	for n := range nodes {
		jobs = append(jobs, wjob(fmt.Sprintf("s%d", 2*n), 0, 100*sec, 1), wjob(fmt.Sprintf("s%d", 2*n+1), 0, 100*sec, 1),
			wjob(fmt.Sprintf("l%d", 2*n), 0, 1000*sec, 1), wjob(fmt.Sprintf("l%d", 2*n+1), 0, 1000*sec, 1))
	}
	return jobs
}

// TestConsolidation: 4-GPU jobs arrive at 150s, when no node has 4 GPUs
// free. Without moves one waits for the long jobs to end (1001s); with
// them the controller moves long jobs off a node (they resume from their
// checkpoints elsewhere, losing nothing) and the 4-GPU job runs there at
// once; two such jobs, two consolidations. With a budget of one
// consolidation an hour the second waits for the first to end (351s).
func TestConsolidation(t *testing.T) {
	tests := []struct {
		name          string
		nodes, budget int
		moves         bool
		bigs          int
		starts        []time.Duration // the 4-GPU jobs' first starts
		rounds        int             // consolidations
	}{
		{"without moves", 2, 100, false, 1, []time.Duration{1002 * sec}, 0},
		{"with moves", 2, 100, true, 1, []time.Duration{151 * sec}, 1},
		{"two asks, budget left", 4, 100, true, 2, []time.Duration{151 * sec, 151 * sec}, 2},
		{"two asks, budget of one", 4, 1, true, 2, []time.Duration{151 * sec, 352 * sec}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jobs := fragmented(tt.nodes)
			for i := range tt.bigs {
				jobs = append(jobs, wjob(fmt.Sprintf("big%d", i), 150*sec, 200*sec, 4))
			}
			r := mustRun(t, jobs, consolidating(tt.nodes, tt.moves, tt.budget))
			rounds := map[string]bool{} // the moved runs of one consolidation stop together, on one node
			var starts []time.Duration
			for _, j := range r.Jobs {
				for _, run := range j.Runs {
					if run.Moved {
						rounds[fmt.Sprint(run.End, run.Node)] = true
					}
					if run.Preempted {
						t.Errorf("%s preempted", j.ID)
					}
				}
				if lost := lostWork(j); lost != 0 {
					t.Errorf("%s lost %s moving", j.ID, lost)
				}
				if j.Requested == 4 {
					starts = append(starts, firstStart(j))
				}
			}
			if fmt.Sprint(starts) != fmt.Sprint(tt.starts) || len(rounds) != tt.rounds {
				t.Errorf("4-GPU jobs started at %v after %d consolidations, want %v after %d", starts, len(rounds), tt.starts, tt.rounds)
			}
			// Each consolidation was a round with room in the cluster.
			if l := r.MoveLooks; l.WithRoom < tt.rounds || l.Looks < l.WithRoom || (!tt.moves && l.Looks != 0) {
				t.Errorf("move looks %+v for %d consolidations", l, tt.rounds)
			}
		})
	}
}

// A 4-GPU job that waits for capacity, every GPU held by long 1-GPU
// jobs: consolidation looks and finds no room, and moves nothing.
func TestConsolidationWithoutRoom(t *testing.T) {
	var jobs []tracereplay.Job
	for i := range 8 {
		jobs = append(jobs, wjob(fmt.Sprintf("l%d", i), 0, 1000*sec, 1))
	}
	jobs = append(jobs, wjob("big", 150*sec, 200*sec, 4))
	r := mustRun(t, jobs, consolidating(2, true, 100))
	if l := r.MoveLooks; l.Looks == 0 || l.WithRoom != 0 {
		t.Errorf("move looks %+v; want some, none with room", l)
	}
	for _, j := range r.Jobs {
		for _, run := range j.Runs {
			if run.Moved {
				t.Errorf("%s moved with no room for the 4-GPU job", j.ID)
			}
		}
	}
}
