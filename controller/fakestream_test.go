package controller

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The fake's event stream, as Nomad's /v1/event/stream serves the topics
// Allocation and Job: newline-delimited JSON frames, a heartbeat ({})
// first and every 30s, then one frame per raft index with its events,
// each allocation whole but for its job, each registered job whole. Like Nomad's broker it keeps the
// last fakeEventBuffer frames (Nomad's event_buffer_size defaults to 100)
// and starts a subscription at the first frame at or after ?index=, or at
// its oldest one when the index is older.

const (
	fakeEventBuffer    = 100
	fakeHeartbeatEvery = 30 * time.Second
)

// eventFrame is one raft index's frame of one topic, encoded once.
type eventFrame struct {
	index uint64
	topic string
	line  []byte
}

// streamEvent is an event as Nomad encodes it.
type streamEvent struct {
	Topic      string
	Type       string
	Key        string
	Namespace  string
	FilterKeys []string
	Index      uint64
	Payload    struct {
		Allocation *api.Allocation `json:",omitempty"`
		Job        *api.Job        `json:",omitempty"`
	}
}

// published records the frame of allocations changed at the current
// allocation index; the caller holds mu.
func (f *fakeNomad) published(typ string, allocs ...*api.AllocationListStub) {
	frame := struct {
		Index  uint64
		Events []streamEvent
	}{Index: f.allocIdx}
	for _, a := range allocs {
		e := streamEvent{Topic: "Allocation", Type: typ, Key: a.ID, Namespace: a.Namespace,
			FilterKeys: []string{a.JobID, ""}, Index: f.allocIdx}
		e.Payload.Allocation = fullAlloc(a)
		frame.Events = append(frame.Events, e)
	}
	f.buffer(f.allocIdx, "Allocation", frame)
}

// publishedJob records the frame of a job registered at the current jobs
// index, the job whole; the caller holds mu.
func (f *fakeNomad) publishedJob(j *api.JobListStub) {
	e := streamEvent{Topic: "Job", Type: "JobRegistered", Key: j.ID, Namespace: j.Namespace, Index: f.jobIdx}
	e.Payload.Job = fullJob(j)
	f.buffer(f.jobIdx, "Job", struct {
		Index  uint64
		Events []streamEvent
	}{Index: f.jobIdx, Events: []streamEvent{e}})
}

// buffer keeps a frame, dropping the oldest past fakeEventBuffer.
func (f *fakeNomad) buffer(index uint64, topic string, frame any) {
	line, _ := json.Marshal(frame)
	f.frames = append(f.frames, eventFrame{index: index, topic: topic, line: line})
	if len(f.frames) > fakeEventBuffer {
		f.frames = f.frames[len(f.frames)-fakeEventBuffer:]
	}
}

// fullAlloc is the allocation a stub lists, as Nomad holds it: with its
// placement metrics, and no job (the stream leaves it out; a read by ID
// adds it).
func fullAlloc(s *api.AllocationListStub) *api.Allocation {
	return &api.Allocation{ID: s.ID, Namespace: s.Namespace, EvalID: s.EvalID, Name: s.Name, NodeID: s.NodeID,
		NodeName: s.NodeName, JobID: s.JobID, TaskGroup: s.TaskGroup, AllocatedResources: s.AllocatedResources,
		DesiredStatus: s.DesiredStatus, DesiredDescription: s.DesiredDescription, ClientStatus: s.ClientStatus,
		ClientDescription: s.ClientDescription, TaskStates: s.TaskStates, DeploymentStatus: s.DeploymentStatus,
		FollowupEvalID: s.FollowupEvalID, NextAllocation: s.NextAllocation, RescheduleTracker: s.RescheduleTracker,
		PreemptedAllocations: s.PreemptedAllocations, PreemptedByAllocation: s.PreemptedByAllocation,
		CreateIndex: s.CreateIndex, ModifyIndex: s.ModifyIndex, AllocModifyIndex: s.ModifyIndex,
		CreateTime: s.CreateTime, ModifyTime: s.ModifyTime,
		Metrics: &api.AllocationMetric{NodesEvaluated: 8, NodesInPool: 1250, NodePool: "gpu",
			NodesAvailable: map[string]int{"dc1": 1250}, AllocationTime: 180 * time.Microsecond,
			ScoreMetaData: []*api.NodeScoreMeta{{NodeID: s.NodeID, NormScore: 0.81,
				Scores: map[string]float64{"binpack": 0.81, "job-anti-affinity": 0, "node-affinity": 0, "node-reschedule-penalty": 0}}}},
	}
}

// serveEvents streams the frames from ?index= until the client goes.
func (f *fakeNomad) serveEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	topics := map[string]bool{}
	for _, t := range q["topic"] {
		name, key, _ := strings.Cut(t, ":")
		if (name != "Allocation" && name != "Job") || key != "*" {
			http.Error(w, fmt.Sprintf("the fake streams the topics Allocation:* and Job:* only, not %q", t), http.StatusBadRequest)
			return
		}
		topics[name] = true
	}
	next, _ := strconv.ParseUint(q.Get("index"), 10, 64)
	w.Header().Set("Content-Type", "application/json")
	rc := http.NewResponseController(w)
	heartbeat := time.NewTicker(fakeHeartbeatEvery)
	defer heartbeat.Stop()
	send := func(line []byte) bool {
		_, err := w.Write(append(line, '\n'))
		return err == nil && rc.Flush() == nil
	}
	if !send([]byte("{}")) {
		return
	}
	for {
		f.mu.Lock()
		var lines [][]byte
		for _, fr := range f.frames {
			if fr.index >= next {
				next = fr.index + 1
				if topics[fr.topic] {
					lines = append(lines, fr.line)
				}
			}
		}
		wake := f.wake
		f.mu.Unlock()
		for _, l := range lines {
			if !send(l) {
				return
			}
		}
		select {
		case <-wake:
		case <-heartbeat.C:
			if !send([]byte("{}")) {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// readAlloc answers GET /v1/allocation/:id: the allocation with its job.
func (f *fakeNomad) readAlloc(w http.ResponseWriter, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range [][]*api.AllocationListStub{f.live, f.finished} {
		for _, s := range l {
			if s.ID != id {
				continue
			}
			a := fullAlloc(s)
			if j := f.jobs[s.JobID]; j != nil {
				a.Job = fullJob(j)
			}
			writeJSON(w, f.allocIdx, a)
			return
		}
	}
	http.Error(w, "alloc not found", http.StatusNotFound)
}

// isEventStream says whether r asks for the event stream.
func isEventStream(r *http.Request) bool {
	return r.URL.Path == "/v1/event/stream" && r.Method == http.MethodGet
}
