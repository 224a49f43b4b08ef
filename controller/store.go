package controller

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// LedgerPrefix is where the priority ledger lives: one variable per job,
// in the job's namespace, holding its Entry as JSON under LedgerItem.
// Only the leader writes here; a token that reads it is enough to watch.
const LedgerPrefix = "nomad-gpu/priority/"

// LedgerItem is the variable item that holds an entry.
const LedgerItem = "entry"

// LedgerPath is where the entry of the job is kept. Job IDs may hold
// characters that variable paths may not; such IDs are hex-encoded.
func LedgerPath(jobID string) string {
	if plainPath.MatchString(jobID) {
		return LedgerPrefix + jobID
	}
	return LedgerPrefix + "x" + hex.EncodeToString([]byte(jobID))
}

// plainPath: the characters variable paths allow, less '/', and not
// starting with 'x', which LedgerPath puts before every encoded ID.
var plainPath = regexp.MustCompile(`^[A-Za-wyz0-9_~-][A-Za-z0-9_~-]{0,99}$`)

// Stored is an entry with the variable index it was read or written at,
// for check-and-set.
type Stored struct {
	Entry
	Index uint64
}

// Store keeps the ledger in Nomad Variables.
type Store struct{ api *api.Client }

// NewStore keeps the ledger through c.
func NewStore(c *api.Client) *Store { return &Store{api: c} }

// Load reads every entry of every namespace.
func (s *Store) Load(ctx context.Context) ([]Stored, error) {
	metas, _, err := s.api.Variables().PrefixList(LedgerPrefix, (&api.QueryOptions{Namespace: "*"}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("listing %s*: %w", LedgerPrefix, err)
	}
	var out []Stored
	for _, m := range metas {
		v, _, err := s.api.Variables().Read(m.Path, (&api.QueryOptions{Namespace: m.Namespace}).WithContext(ctx))
		if nomadview.IsNotFound(err) {
			continue // deleted since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", m.Path, err)
		}
		st, err := decode(v)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

func decode(v *api.Variable) (Stored, error) {
	var e Entry
	if err := json.NewDecoder(strings.NewReader(v.Items[LedgerItem])).Decode(&e); err != nil {
		return Stored{}, fmt.Errorf("%s (namespace %s): item %q: %v", v.Path, v.Namespace, LedgerItem, err)
	}
	if e.JobID == "" || LedgerPath(e.JobID) != v.Path || e.Namespace != v.Namespace {
		return Stored{}, fmt.Errorf("%s (namespace %s): job_id %q, namespace %q do not belong at this path", v.Path, v.Namespace, e.JobID, e.Namespace)
	}
	return Stored{Entry: e, Index: v.ModifyIndex}, nil
}

// Get reads the job's entry; found is false when it has none.
func (s *Store) Get(ctx context.Context, k JobKey) (st Stored, found bool, err error) {
	v, _, err := s.api.Variables().Read(LedgerPath(k.ID), (&api.QueryOptions{Namespace: k.Namespace}).WithContext(ctx))
	if nomadview.IsNotFound(err) {
		return Stored{}, false, nil
	}
	if err != nil {
		return Stored{}, false, fmt.Errorf("reading %s: %w", LedgerPath(k.ID), err)
	}
	st, err = decode(v)
	return st, err == nil, err
}

// Put writes st if the variable is still at st.Index (0: if it does not
// exist), and sets st.Index to the new one.
func (s *Store) Put(ctx context.Context, st *Stored) error {
	b, err := json.Marshal(st.Entry)
	if err != nil {
		return err
	}
	v := &api.Variable{Namespace: st.Namespace, Path: LedgerPath(st.JobID), Items: api.VariableItems{LedgerItem: string(b)}, ModifyIndex: st.Index}
	out, _, err := s.api.Variables().CheckedUpdate(v, (&api.WriteOptions{Namespace: st.Namespace}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("writing %s: %w", v.Path, err)
	}
	st.Index = out.ModifyIndex
	return nil
}

// Delete removes st's variable if it is still at st.Index.
func (s *Store) Delete(ctx context.Context, st Stored) error {
	path := LedgerPath(st.JobID)
	if _, err := s.api.Variables().CheckedDelete(path, st.Index, (&api.WriteOptions{Namespace: st.Namespace}).WithContext(ctx)); err != nil {
		return fmt.Errorf("deleting %s: %w", path, err)
	}
	return nil
}
