package controller

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Raise is one reason a job runs above its own priority.
type Raise struct {
	// Key names the cause, one raise per key: "preemption/<victim alloc
	// ID>", "deadline".
	Key string `json:"key"`
	// Priority is what the raise lifts the job to.
	Priority int `json:"priority"`
	// Reason says why, for people: "preempted by alloc 1a2b3c4d".
	Reason string `json:"reason"`
	// Since is when it came in force; zero while it waits (a preemption
	// protection waits for the job's replacement to run).
	Since time.Time `json:"since,omitzero"`
	// Until is when it ends; zero for a raise that ends only when its
	// module ends it.
	Until time.Time `json:"until,omitzero"`
	// AllocName and After say what a waiting preemption protection waits
	// for: an allocation of that name created after that index (the
	// preempted one's), so the preempted one need not be listed still.
	AllocName string `json:"alloc_name,omitempty"`
	After     uint64 `json:"after,omitempty"`
}

// InForce says whether the raise lifts the job at now.
func (r Raise) InForce(now time.Time) bool {
	return !r.Since.IsZero() && !r.Since.After(now) && (r.Until.IsZero() || now.Before(r.Until))
}

// Entry is one job's line of the priority ledger. The job's priority is
// always its own, or the highest raise in force where that is higher.
//
// Applied and Writing tell a change made by hand from the controller's
// own: Applied is the priority the controller last saw the job at, and
// Writing the one it is about to write (0 when none), recorded before the
// job is written, so that a leader that dies between the two writes
// leaves nothing its successor takes for a hand change.
type Entry struct {
	Namespace string `json:"namespace"`
	JobID     string `json:"job_id"`
	// Own is the job's own priority: what it was registered with, or what
	// someone set it to by hand since.
	Own     int `json:"own"`
	Applied int `json:"applied"`
	// AppliedIndex is the job's modify index after the controller's last
	// write: a list of jobs older than that still shows the priority
	// before it, and is no hand change.
	AppliedIndex uint64  `json:"applied_index,omitempty"`
	Writing      int     `json:"writing,omitempty"`
	Raises       []Raise `json:"raises,omitempty"`
	// Handled are the preempted allocations of the job whose protection
	// was recorded, kept while Nomad still lists them, so a preemption is
	// protected once.
	Handled []string `json:"handled,omitempty"`
}

// NewEntry is the ledger line of a job first seen at priority.
func NewEntry(namespace, jobID string, priority int) Entry {
	return Entry{Namespace: namespace, JobID: jobID, Own: priority, Applied: priority}
}

// Want is the priority the job should have at now.
func (e Entry) Want(now time.Time) int {
	p := e.Own
	for _, r := range e.Raises {
		if r.InForce(now) {
			p = max(p, r.Priority)
		}
	}
	return p
}

// Observe takes in the job's priority as read from Nomad. A priority the
// controller neither set nor is setting was changed by hand: it becomes
// the job's own. It reports whether the entry changed.
func (e *Entry) Observe(current int) bool {
	switch {
	case current == e.Applied && e.Writing == 0:
		return false
	case current == e.Applied || current == e.Writing:
		e.Applied, e.Writing = current, 0
	default:
		e.Own, e.Applied, e.Writing = current, current, 0
	}
	return true
}

// Begin records r, replacing a raise of the same key.
func (e *Entry) Begin(r Raise) {
	if i := e.find(r.Key); i >= 0 {
		e.Raises[i] = r
		return
	}
	e.Raises = append(e.Raises, r)
}

// End drops the raise of key; it reports whether there was one.
func (e *Entry) End(key string) bool {
	i := e.find(key)
	if i < 0 {
		return false
	}
	e.Raises = slices.Delete(e.Raises, i, i+1)
	return true
}

// Get is the raise of key.
func (e Entry) Get(key string) (Raise, bool) {
	if i := e.find(key); i >= 0 {
		return e.Raises[i], true
	}
	return Raise{}, false
}

// Expire drops the raises whose end has passed at now and returns them.
func (e *Entry) Expire(now time.Time) []Raise {
	var over []Raise
	e.Raises = slices.DeleteFunc(e.Raises, func(r Raise) bool {
		if !r.Until.IsZero() && !now.Before(r.Until) {
			over = append(over, r)
			return true
		}
		return false
	})
	return over
}

// Idle says the entry holds nothing the job needs: no raise, the job at
// its own priority, no preempted allocation still listed.
func (e Entry) Idle() bool {
	return len(e.Raises) == 0 && e.Writing == 0 && e.Applied == e.Own && len(e.Handled) == 0
}

func (e Entry) find(key string) int {
	return slices.IndexFunc(e.Raises, func(r Raise) bool { return r.Key == key })
}

// String is the entry in one line, for logs.
func (e Entry) String() string {
	return fmt.Sprintf("%s/%s own %d applied %d raises %d", e.Namespace, e.JobID, e.Own, e.Applied, len(e.Raises))
}

// Ledger is the leader's copy of the priority ledger: the entries it
// loaded when it took the lock and has written since. Only the leader's
// one loop touches it, so it has no lock.
type Ledger struct {
	entries map[JobKey]*Stored
	dirty   map[JobKey]bool
}

// NewLedger holds the stored entries.
func NewLedger(stored []Stored) *Ledger {
	l := &Ledger{entries: map[JobKey]*Stored{}, dirty: map[JobKey]bool{}}
	for i := range stored {
		st := stored[i]
		l.entries[JobKey{Namespace: st.Namespace, ID: st.JobID}] = &st
	}
	return l
}

// Keys are the jobs with an entry, in order.
func (l *Ledger) Keys() []JobKey {
	keys := make([]JobKey, 0, len(l.entries))
	for k := range l.entries {
		keys = append(keys, k)
	}
	sortJobKeys(keys)
	return keys
}

// sortJobKeys sorts keys by namespace, then ID.
func sortJobKeys(keys []JobKey) {
	slices.SortFunc(keys, func(a, b JobKey) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.ID, b.ID))
	})
}

// Peek is the job's entry, the zero Entry if it has none.
func (l *Ledger) Peek(k JobKey) Entry {
	if st := l.entries[k]; st != nil {
		return st.Entry
	}
	return Entry{}
}

// Edit is the job's entry to change, made at priority if it has none;
// the entry is marked to be written.
func (l *Ledger) Edit(k JobKey, priority int) *Entry {
	st := l.entries[k]
	if st == nil {
		st = &Stored{Entry: NewEntry(k.Namespace, k.ID, priority)}
		l.entries[k] = st
	}
	l.dirty[k] = true
	return &st.Entry
}

// Stored is the job's entry with its variable index.
func (l *Ledger) Stored(k JobKey) *Stored { return l.entries[k] }

// Clean marks the job's entry written.
func (l *Ledger) Clean(k JobKey) { delete(l.dirty, k) }

// Replace puts an entry read from the store in place of the job's.
func (l *Ledger) Replace(st Stored) {
	k := JobKey{Namespace: st.Namespace, ID: st.JobID}
	l.entries[k] = &st
	delete(l.dirty, k)
}

// Forget drops the job's entry (its variable was deleted, or must be read
// again).
func (l *Ledger) Forget(k JobKey) {
	delete(l.entries, k)
	delete(l.dirty, k)
}
