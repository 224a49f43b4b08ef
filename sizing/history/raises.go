package history

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// PriorityRaise records that the sizer raised a job's priority for its
// deadline, so that it can give the job back the priority it had once the
// job runs, even across sizer restarts. It is kept here rather than in the
// job's meta: a meta change is a destructive update, a priority change is
// not.
type PriorityRaise struct {
	Namespace string    `json:"ns"`
	Job       string    `json:"job"`
	Original  int       `json:"original"` // the priority before the first raise
	Raised    int       `json:"raised"`   // the priority the sizer last set
	At        time.Time `json:"at"`       // the last raise
	Reason    string    `json:"reason"`
}

func raiseKey(ns, job string) []byte { return []byte(ns + "\x00" + job) }

// PutRaise records r, replacing the job's earlier record.
func (s *Store) PutRaise(ctx context.Context, r PriorityRaise) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.Namespace == "" || r.Job == "" || strings.ContainsRune(r.Namespace+r.Job, 0) {
		return fmt.Errorf("history: priority raise of %q/%q: namespace and job must be set, without NUL", r.Namespace, r.Job)
	}
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRaises).Put(raiseKey(r.Namespace, r.Job), v)
	})
}

// Raise is the job's record; ok is false when there is none.
func (s *Store) Raise(ctx context.Context, ns, job string) (r PriorityRaise, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return r, false, err
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRaises).Get(raiseKey(ns, job))
		if v == nil {
			return nil
		}
		ok = true
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("history: priority raise of %s/%s: %v: %w", ns, job, err, ErrCorrupt)
		}
		return nil
	})
	return r, ok, err
}

// Raises are every job's records, by namespace and job.
func (s *Store) Raises(ctx context.Context) ([]PriorityRaise, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []PriorityRaise
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRaises).ForEach(func(k, v []byte) error {
			var r PriorityRaise
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("history: priority raise %q: %v: %w", k, err, ErrCorrupt)
			}
			out = append(out, r)
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Job < out[j].Job
	})
	return out, err
}

// DeleteRaise forgets the job's record.
func (s *Store) DeleteRaise(ctx context.Context, ns, job string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRaises).Delete(raiseKey(ns, job))
	})
}
