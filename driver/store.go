package driver

import (
	"slices"
	"strings"
	"sync"

	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// taskStore is the one place this plugin process keeps its tasks. Its lock
// guards only the maps, never a task's own fields (the task's mutex does)
// and is never held across a call that can block: RPCs look a task up and
// then work on it unlocked.
type taskStore struct {
	mu    sync.RWMutex
	tasks map[string]*task
	// starting are IDs whose StartTask is under way: not yet visible to
	// the other RPCs, but taken.
	starting map[string]bool
	// lost are tasks whose recovery failed. Nomad still destroys them, and
	// DestroyTask then needs the task's config to clean up what it held.
	lost map[string]*drivers.TaskConfig
}

func newTaskStore() *taskStore {
	return &taskStore{tasks: map[string]*task{}, starting: map[string]bool{}, lost: map[string]*drivers.TaskConfig{}}
}

// reserve takes id for a start; false if a task of that ID exists or is
// being started.
func (s *taskStore) reserve(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tasks[id]; ok || s.starting[id] {
		return false
	}
	s.starting[id] = true
	return true
}

// release gives up a reservation whose start failed.
func (s *taskStore) release(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.starting, id)
}

func (s *taskStore) get(id string) *task {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tasks[id]
}

// add registers t unless a task of that ID is already there; it reports
// whether t was added.
func (s *taskStore) add(t *task) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tasks[t.id]; ok {
		return false
	}
	s.tasks[t.id] = t
	delete(s.starting, t.id)
	delete(s.lost, t.id)
	return true
}

func (s *taskStore) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tasks, id)
	delete(s.lost, id)
}

func (s *taskStore) markLost(cfg *drivers.TaskConfig) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tasks[cfg.ID]; !ok {
		s.lost[cfg.ID] = cfg
	}
}

// takeLost returns and forgets the config of a task whose recovery failed.
func (s *taskStore) takeLost(id string) *drivers.TaskConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	cfg := s.lost[id]
	delete(s.lost, id)
	return cfg
}

// all lists the tasks in ID order.
func (s *taskStore) all() []*task {
	s.mu.RLock()
	out := make([]*task, 0, len(s.tasks))
	for _, t := range s.tasks {
		out = append(out, t)
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b *task) int { return strings.Compare(a.id, b.id) })
	return out
}

// usingMPS lists the tasks that are clients of the GPU's MPS daemon.
func (s *taskStore) usingMPS(gpuUUID string) []*task {
	var out []*task
	for _, t := range s.all() {
		if slices.Contains(t.mpsGPUs, gpuUUID) {
			out = append(out, t)
		}
	}
	return out
}
