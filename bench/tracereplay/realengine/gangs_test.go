package realengine

// Jobs bigger than a node (Slice.Members > 1) on the real engine. Such a
// job is one Nomad job of the gang's shape (jobs/examples/gang-sim.nomad.hcl):
// a group of Members members of Slice.Count GPUs whose task is `nomad-gpu
// sim-train`, its steps in lockstep at a barrier every member passes, so
// that the job makes progress only while every member runs, as the model
// says. With Features.Gangs the job is registered at count 0 with the
// gang meta and the controller admits it whole (-gangs); without, it is
// registered at its members' count, as a torchrun job on stock Nomad:
// Nomad places the members one at a time, and each waits, holding its
// GPUs, for its peers (the gpu driver's gang.wait, long here, plays the
// rendezvous timeout). Stock Nomad's preemption of one member would leave
// its peers hung in their collective call, which sim-train cannot rejoin:
// such a configuration is refused with a sample that has gangs.

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/contract"
)

// gangStepWall is a gang member's step, wall clock: its progress is known
// to a step, and a stop loses the step under way.
const gangStepWall = 200 * time.Millisecond

// stockGangWait is the gpu driver's gang.wait where no controller admits
// gangs: a member waits for its peers for the whole replay.
const stockGangWait = "720h"

// gangSteps are the steps of a member's work and their length, wall
// clock: gangStepWall each, or one step of the whole work when shorter.
func gangSteps(work time.Duration) (steps int, step time.Duration) {
	if work <= gangStepWall {
		return 1, max(work, time.Millisecond)
	}
	return int((work + gangStepWall - 1) / gangStepWall), gangStepWall
}

// hasGangs says whether the sample has a job bigger than a node.
func hasGangs(s tracereplay.Setup) bool {
	return slices.ContainsFunc(s.Trace.Jobs, func(j tracereplay.Job) bool {
		m, _ := s.Cluster.Members(j)
		return m > 1
	})
}

// refuseStockGangPreemption fails a configuration with stock Nomad's
// preemption (no gang admission) when the sample has gangs: see the file's
// comment.
func refuseStockGangPreemption(t *testing.T, s tracereplay.Setup, cfg tracereplay.Config) {
	if cfg.Preemption && !cfg.Gangs && hasGangs(s) {
		t.Fatalf("%s: preemption without gangs on a sample with jobs bigger than a node: a preempted member's peers hang in sim-train's collective call, which it cannot rejoin; not replayed (the model replays it; add -multi-node clip, or leave this configuration out)", cfg.Name)
	}
}

// replayGangJob is the Nomad job of trace job j, run as s.Members members
// of s.Count GPUs for work (wall clock): at count 0 for the controller to
// admit with gangs, else at its members' count.
func replayGangJob(j tracereplay.Job, s tracereplay.Slice, work time.Duration, cli string, commitTimeout time.Duration, gangs bool) string {
	steps, step := gangSteps(work)
	count, reschedule := s.Members, "1"
	if gangs {
		// The controller admits the gang, and requeues it whole when a
		// member stops: Nomad reschedules nothing alone.
		count, reschedule = 0, "0"
	}
	meta := fmt.Sprintf("%s = \"true\"", contract.MetaGang)
	ck := ""
	if commitTimeout > 0 {
		ck = fmt.Sprintf(`
        checkpoint {
          commit_timeout = %q
        }`, commitTimeout)
	} else {
		meta += fmt.Sprintf("\n    %s = \"none\"", contract.MetaGangCheckpoint)
	}
	args := []string{"sim-train", "--steps", strconv.Itoa(steps), "--step-time", step.String(),
		"--checkpoint-every", "0", "--peer-timeout", stockGangWait}
	return fmt.Sprintf(`
job %q {
  type      = "batch"
  priority  = %d
  node_pool = "gpu"
  meta {
    %s
  }
  group "g" {
    count = %d
    meta {
      %s = "%d"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts       = %s
      interval       = "24h"
      delay          = "5s"
      delay_function = "constant"
      unlimited      = false
    }
    network {
      port "rendezvous" {}
    }
    task "t" {
      driver       = "gpu"
      kill_timeout = "15s"
      config {
        command = %q
        args    = [%s]%s
      }
      resources {
        cpu    = 10
        memory = 64
        device "nvidia/gpu" {
          count = %d
        }
      }
    }
  }
}`, j.ID, j.EffectivePriority(), meta, count, contract.MetaGangMembers, s.Members, reschedule, cli, quoteAll(args), ck, s.Count)
}

// quoteAll is args as an HCL list's items.
func quoteAll(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	return strings.Join(q, ", ")
}

// collectGang fills a gang's record: its members' allocations as
// MemberRuns, each with its progress from sim-train's log, and the spans
// during which every member ran as its runs (gangRuns). The job is done
// when each member's last allocation completed its steps.
func (rc *recordCollector) collectGang(t *testing.T, rec *tracereplay.JobRecord, allocs []*api.AllocationListStub, stepTrace time.Duration) {
	slices.SortFunc(allocs, func(a, b *api.AllocationListStub) int { return int(a.CreateIndex - b.CreateIndex) })
	done := map[string]bool{} // by member name (allocation index)
	for _, a := range allocs {
		switch {
		case a.ClientStatus != api.AllocClientStatusFailed:
		case a.DesiredStatus != api.AllocDesiredStatusRun:
			rc.stoppedMembers++ // told to stop before its peers were placed
		default:
			rc.failedAlloc(t, rec.ID, a.ID)
		}
		st := rc.startedTask(rec, a)
		if st == nil {
			continue
		}
		run := tracereplay.Run{Placed: rc.at(time.Unix(0, a.CreateTime)), Start: rc.at(st.StartedAt), Node: a.NodeName, Held: held(a)}
		switch {
		case st.FinishedAt.IsZero() || st.FinishedAt.After(rc.horizon):
			run.End, run.Open = rc.at(rc.horizon), true
		default:
			run.End = rc.at(st.FinishedAt)
			run.Preempted = a.PreemptedByAllocation != "" || a.DesiredStatus == api.AllocDesiredStatusEvict
			done[a.Name] = a.DesiredStatus == api.AllocDesiredStatusRun && a.ClientStatus == api.AllocClientStatusComplete && !st.Failed
		}
		if logs, err := rc.taskLog(a.ID, a.NodeName); err == nil {
			readTrainProgress(logs, &run, stepTrace)
		}
		if run.Preempted {
			rc.preempted++
		}
		rec.MemberRuns = append(rec.MemberRuns, run)
	}
	rec.Runs = gangRuns(rec.MemberRuns, rec.Slice.Members)
	if len(done) == rec.Slice.Members && !slices.Contains(slices.Collect(maps.Values(done)), false) && len(rec.Runs) > 0 {
		rec.Done, rec.Finish = true, rec.Runs[len(rec.Runs)-1].End
	}
}

// readTrainProgress reads a member's progress from sim-train's log: the
// step it restored (or 0), the last step it finished and the last it
// committed, each stepTrace of trace time; false when the log tells no
// start.
func readTrainProgress(logs string, run *tracereplay.Run, stepTrace time.Duration) bool {
	restored, reached, committed := int64(-1), int64(-1), int64(-1)
	for _, l := range strings.Split(logs, "\n") {
		switch {
		case strings.HasSuffix(l, ": starting at step 0"):
			restored = 0
		case strings.HasPrefix(l, "rank ") && strings.Contains(l, ": restored step "):
			restored = stepOf(l[strings.LastIndex(l, " ")+1:])
		case strings.HasPrefix(l, "step "):
			reached = stepOf(strings.TrimPrefix(l, "step "))
		case strings.HasPrefix(l, "checkpoint: step "):
			committed = stepOf(strings.TrimPrefix(l, "checkpoint: step "))
		}
	}
	if restored < 0 {
		return false
	}
	reached = max(reached, restored)
	run.ProgressKnown = true
	run.Restored, run.Reached = time.Duration(restored)*stepTrace, time.Duration(reached)*stepTrace
	if committed >= 0 {
		run.Checkpointed, run.Saved = true, time.Duration(committed)*stepTrace
	}
	return true
}

// stepOf is a step number of sim-train's log; -1 for none.
func stepOf(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// gangRuns are the spans during which members of a gang's runs (members
// of them at once make the gang whole) all ran: from the last one's start
// to the first one's end. A span restores the most any running member
// restored (in lockstep they restore the same step), and ends with the
// progress, checkpoint and cause (preempted, moved) of the member whose
// run ended it; one still open at the horizon is Open.
func gangRuns(runs []tracereplay.Run, members int) []tracereplay.Run {
	type edge struct {
		at    time.Duration
		start bool
		run   int
	}
	var es []edge
	for i, r := range runs {
		es = append(es, edge{r.Start, true, i}, edge{r.End, false, i})
	}
	slices.SortStableFunc(es, func(a, b edge) int {
		switch {
		case a.at != b.at:
			return int(a.at - b.at)
		case a.start != b.start:
			if a.start {
				return 1 // ends first: a member replaced at one instant makes no span
			}
			return -1
		}
		return 0
	})
	var out []tracereplay.Run
	running := map[int]bool{}
	for _, e := range es {
		if e.start {
			running[e.run] = true
			if len(running) == members {
				span := tracereplay.Run{Start: e.at, ProgressKnown: true}
				for i := range running {
					span.Restored = max(span.Restored, runs[i].Restored)
					span.ProgressKnown = span.ProgressKnown && runs[i].ProgressKnown
				}
				out = append(out, span)
			}
			continue
		}
		if len(running) == members {
			r, span := runs[e.run], &out[len(out)-1]
			span.End, span.Open = r.End, r.Open
			span.Preempted, span.Moved = r.Preempted, r.Moved
			span.Reached, span.Saved, span.Checkpointed = r.Reached, r.Saved, r.Checkpointed
			span.ProgressKnown = span.ProgressKnown && r.ProgressKnown
		}
		delete(running, e.run)
	}
	return out
}

// A gang's spans are while every member runs: a member placed late
// delays the first; one preempted ends a span with its progress and
// checkpoint, and the next starts once it runs again; a replacement
// started at the instant its predecessor ended makes no span of its own.
func TestGangRuns(t *testing.T) {
	run := func(start, end time.Duration, restored, reached, saved time.Duration, preempted bool) tracereplay.Run {
		return tracereplay.Run{Start: start, End: end, Restored: restored, Reached: reached, Saved: saved, Checkpointed: saved > 0, Preempted: preempted, ProgressKnown: true}
	}
	for _, tc := range []struct {
		name string
		runs []tracereplay.Run
		want []tracereplay.Run
	}{
		{"one span from the last start", []tracereplay.Run{run(0, 100, 0, 90, 0, false), run(10, 100, 0, 90, 0, false)},
			[]tracereplay.Run{{Start: 10, End: 100, Reached: 90, ProgressKnown: true}}},
		{"a member preempted", []tracereplay.Run{
			run(0, 50, 0, 40, 0, false), run(0, 40, 0, 40, 35, true), // the second member preempted at 40, its peer stopped at 50
			run(60, 100, 35, 75, 0, false), run(62, 100, 35, 75, 0, false),
		}, []tracereplay.Run{
			{Start: 0, End: 40, Reached: 40, Saved: 35, Checkpointed: true, Preempted: true, ProgressKnown: true},
			{Start: 62, End: 100, Restored: 35, Reached: 75, ProgressKnown: true},
		}},
		{"a replacement at the instant", []tracereplay.Run{run(0, 100, 0, 0, 0, false), run(0, 30, 0, 0, 0, false), run(30, 100, 0, 0, 0, false)},
			[]tracereplay.Run{{Start: 0, End: 30, ProgressKnown: true}, {Start: 30, End: 100, ProgressKnown: true}}},
		{"never whole", []tracereplay.Run{run(0, 100, 0, 0, 0, false)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gangRuns(tc.runs, 2); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("gangRuns =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// sim-train's log tells a member's progress in steps: restored, reached,
// committed.
func TestReadTrainProgress(t *testing.T) {
	const stepTrace = 5 * time.Second
	for _, tc := range []struct {
		name, logs string
		want       tracereplay.Run
		told       bool
	}{
		{"fresh, stopped", "rank 1 of 2: starting at step 0\nrendezvous: rank 1 of 2 joined rank 0 at 10.0.0.1:2000\nstep 1\nstep 2\nstep 3\ncheckpoint: step 3\n",
			tracereplay.Run{Restored: 0, Reached: 15 * time.Second, Saved: 15 * time.Second, Checkpointed: true, ProgressKnown: true}, true},
		{"restored, no step yet", "rank 0 of 2: restored step 7\nrendezvous: all 2 members joined rank 0 on port 2000\n",
			tracereplay.Run{Restored: 35 * time.Second, Reached: 35 * time.Second, ProgressKnown: true}, true},
		{"no start told", "rendezvous: all 2 members joined\n", tracereplay.Run{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var run tracereplay.Run
			if told := readTrainProgress(tc.logs, &run, stepTrace); told != tc.told || !reflect.DeepEqual(run, tc.want) {
				t.Errorf("readTrainProgress = %v, %+v; want %v, %+v", told, run, tc.told, tc.want)
			}
		})
	}
}

func TestGangSteps(t *testing.T) {
	for _, tc := range []struct {
		work  time.Duration
		steps int
		step  time.Duration
	}{{50 * time.Millisecond, 1, 50 * time.Millisecond}, {time.Second, 5, gangStepWall}, {1001 * time.Millisecond, 6, gangStepWall}} {
		if n, d := gangSteps(tc.work); n != tc.steps || d != tc.step {
			t.Errorf("gangSteps(%s) = %d × %s; want %d × %s", tc.work, n, d, tc.steps, tc.step)
		}
	}
}
