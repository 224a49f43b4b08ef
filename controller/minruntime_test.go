package controller

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// runningSince is a running allocation of job on node n1 whose task
// started at started.
func runningSince(id, job string, started time.Time) *api.AllocationListStub {
	a := alloc(id, job, 1, api.AllocClientStatusRunning)
	a.NodeID = "n1"
	a.TaskStates = map[string]*api.TaskState{"t": {State: "running", StartedAt: started}}
	return a
}

func minRuntimeView(meta map[string]string, allocs ...*api.AllocationListStub) View {
	v := cluster{jobs: map[string]int{"train": 30}, allocs: allocs}.view()
	v.Snap.Jobs[JobKey{Namespace: "default", ID: "train"}].Meta = meta
	v.Snap.Nodes = []*api.NodeListStub{{ID: "n1", NodePool: "training"}}
	return v
}

func TestMinRuntime(t *testing.T) {
	train := JobKey{Namespace: "default", ID: "train"}
	tests := []struct {
		name    string
		byPool  map[string]time.Duration
		meta    map[string]string
		started time.Duration // before now
		want    int
		kinds   []string
	}{
		{"off", nil, nil, time.Minute, 30, nil},
		{"pool's, inside", map[string]time.Duration{"training": 20 * time.Minute}, nil, time.Minute, 100, []string{"min-runtime"}},
		{"pool's, past", map[string]time.Duration{"training": 20 * time.Minute}, nil, 21 * time.Minute, 30, nil},
		{"other pool's", map[string]time.Duration{"hpc": 20 * time.Minute}, nil, time.Minute, 30, nil},
		{"meta over pool", map[string]time.Duration{"training": 20 * time.Minute}, map[string]string{MetaMinRuntime: "30s"}, time.Minute, 30, nil},
		{"meta alone", nil, map[string]string{MetaMinRuntime: "1h"}, time.Minute, 100, []string{"min-runtime"}},
		{"bad meta", map[string]time.Duration{"training": 20 * time.Minute}, map[string]string{MetaMinRuntime: "soon"}, time.Minute, 30, []string{"min-runtime-skipped"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := MinRuntime{ByPool: tt.byPool, Priority: 100}
			l := NewLedger(nil)
			now := t0.Add(time.Hour)
			got := m.Step(now, minRuntimeView(tt.meta, runningSince("a1", "train", now.Add(-tt.started))), l)
			if !sameKinds(got, tt.kinds) {
				t.Errorf("decisions %+v, want kinds %v", got, tt.kinds)
			}
			if w := priorityOf(l, train, 30, now); w != tt.want {
				t.Errorf("train wants %d, want %d", w, tt.want)
			}
		})
	}
}

// The raise ends when the minimum runtime is over, or at once when the
// allocation stops; a bad meta value is said once.
func TestMinRuntimeEnds(t *testing.T) {
	train := JobKey{Namespace: "default", ID: "train"}
	for _, tt := range []struct {
		name  string
		later func(now time.Time) View
		at    time.Duration
	}{
		{"minimum over", func(now time.Time) View {
			return minRuntimeView(nil, runningSince("a1", "train", t0))
		}, 20 * time.Minute},
		{"allocation stopped", func(now time.Time) View { return minRuntimeView(nil) }, time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := MinRuntime{ByPool: map[string]time.Duration{"training": 20 * time.Minute}, Priority: 100}
			l := NewLedger(nil)
			m.Step(t0.Add(time.Second), minRuntimeView(nil, runningSince("a1", "train", t0)), l)
			now := t0.Add(tt.at)
			got := m.Step(now, tt.later(now), l)
			if !sameKinds(got, []string{"min-runtime-over"}) || len(l.Peek(train).Raises) != 0 {
				t.Errorf("decisions %+v, raises %+v; want the raise over", got, l.Peek(train).Raises)
			}
		})
	}
	m := MinRuntime{Priority: 100}
	l := NewLedger(nil)
	bad := map[string]string{MetaMinRuntime: "soon"}
	var kinds []string
	for i := range 3 {
		for _, d := range m.Step(t0.Add(time.Duration(i)*time.Second), minRuntimeView(bad, runningSince("a1", "train", t0)), l) {
			kinds = append(kinds, d.Kind)
		}
	}
	if len(kinds) != 1 {
		t.Errorf("bad meta said %d times (%v), want once", len(kinds), kinds)
	}
}

// priorityOf is the priority the ledger wants for the job: its own where
// it has no entry.
func priorityOf(l *Ledger, k JobKey, own int, now time.Time) int {
	if l.Peek(k).JobID == "" {
		return own
	}
	return l.Peek(k).Want(now)
}
