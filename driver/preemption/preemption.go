// Package preemption is what the gpu driver asks of the Nomad API about the
// allocations it stops: why one is stopped (preempted, by which allocation;
// drained; stopped), and the preemption cooldown, which keeps a job that
// was just preempted from being preempted again at once by work of the same
// priority class.
//
// Nomad's scheduler has no cooldown. This one raises the preempted job's
// priority to its preemptor's, so that work of that priority can no longer
// preempt it (Nomad preempts only allocations at least 10 priority points
// lower), and restores it when the cooldown ends. A priority-only change is
// an in-place update: the job's allocations keep running. What is raised,
// from what and until when lives in Nomad, in a variable per job
// (VariablePrefix), not in a driver's memory, so that whichever node's
// driver is up when a cooldown ends restores the priority, and a driver or
// client restart does not leave a job raised for good. It is not kept in the
// job's meta, as one might think first: a change of job meta changes every
// task's environment, and Nomad replaces the job's allocations for it.
package preemption

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// VariablePrefix is where cooldowns are kept, one variable per job, in the
// job's namespace. A token with the cooldown needs variable write and read
// here, and submit-job, in the namespaces of the jobs it protects.
const VariablePrefix = "nomad-gpu/preemption-cooldown/"

// Client reads allocations and keeps cooldowns through one Nomad agent's
// HTTP API.
type Client struct {
	api *api.Client
	now func() time.Time
}

// New is a client of the agent at address ("http://127.0.0.1:4646"), with
// token where ACLs are on ("" where they are off).
func New(address, token string) (*Client, error) {
	c, err := api.NewClient(&api.Config{
		Address:    address,
		SecretID:   token,
		HttpClient: &http.Client{Timeout: 10 * time.Second},
	})
	if err != nil {
		return nil, fmt.Errorf("nomad.address %q: %w", address, err)
	}
	return &Client{api: c, now: time.Now}, nil
}

// Reason is why Nomad stops an allocation.
type Reason struct {
	// Trigger says it in a few words, to be recorded with a checkpoint:
	// "preempted by alloc 1a2b3c4d", "node drain", "stop: <description>".
	Trigger string
	// PreemptedBy is the preempting allocation's ID, "" when not preempted.
	PreemptedBy string
	// Alloc is the allocation as read.
	Alloc *api.Allocation
}

// StopReason reads the allocation being stopped and says why it is.
func (c *Client) StopReason(ctx context.Context, namespace, allocID string) (Reason, error) {
	a, _, err := c.api.Allocations().Info(allocID, (&api.QueryOptions{Namespace: namespace}).WithContext(ctx))
	if err != nil {
		return Reason{}, fmt.Errorf("reading allocation %s: %w", allocID, err)
	}
	r := Reason{Alloc: a, PreemptedBy: a.PreemptedByAllocation}
	switch {
	case a.PreemptedByAllocation != "":
		r.Trigger = "preempted by alloc " + short(a.PreemptedByAllocation)
	case a.DesiredTransition.ShouldMigrate():
		r.Trigger = "node drain"
	case a.DesiredStatus == api.AllocDesiredStatusStop || a.DesiredStatus == api.AllocDesiredStatusEvict:
		r.Trigger = a.DesiredStatus
		if a.DesiredDescription != "" {
			r.Trigger += ": " + a.DesiredDescription
		}
	default:
		r.Trigger = "stop"
	}
	return r, nil
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// Probe says whether the client may keep cooldowns: where ACLs are on, it
// needs a token, and one the agent accepts.
func (c *Client) Probe(ctx context.Context) error {
	_, _, err := c.api.ACLTokens().Self((&api.QueryOptions{}).WithContext(ctx))
	if err == nil {
		return nil
	}
	if strings.Contains(err.Error(), "ACL support disabled") {
		return nil
	}
	var unreachable *url.Error
	if errors.As(err, &unreachable) {
		return fmt.Errorf("the Nomad API at %s cannot be reached (%v); checked again every 30s", c.api.Address(), unreachable.Err)
	}
	return fmt.Errorf("the agent refuses the token (%v): nomad.token needs submit-job and variable read/write on %s*", err, VariablePrefix)
}

// Cooldown is one job's cooldown, as kept in its variable.
type Cooldown struct {
	Namespace, JobID string
	// Original is the job's own priority, restored when Until passes.
	Original int
	// Raised is what the job was raised to: its preemptor's priority.
	Raised      int
	Until       time.Time
	PreemptedBy string
}

// VariablePath is where the cooldown of the job is kept. Job IDs may hold
// characters that variable paths may not, and such IDs are hex-encoded.
func VariablePath(jobID string) string {
	if plainPath.MatchString(jobID) {
		return VariablePrefix + jobID
	}
	return VariablePrefix + "x" + hex.EncodeToString([]byte(jobID))
}

// plainPath: the characters variable paths allow, less '/', and not
// starting with 'x', which VariablePath puts before every encoded ID.
var plainPath = regexp.MustCompile(`^[A-Za-wyz0-9_~-][A-Za-z0-9_~-]{0,99}$`)

func (cd Cooldown) items() api.VariableItems {
	return api.VariableItems{
		"job_id":            cd.JobID,
		"original_priority": strconv.Itoa(cd.Original),
		"raised_priority":   strconv.Itoa(cd.Raised),
		"until":             cd.Until.UTC().Format(time.RFC3339),
		"preempted_by":      cd.PreemptedBy,
	}
}

func parseCooldown(v *api.Variable) (Cooldown, error) {
	cd := Cooldown{Namespace: v.Namespace, JobID: v.Items["job_id"], PreemptedBy: v.Items["preempted_by"]}
	var err error
	if cd.Original, err = strconv.Atoi(v.Items["original_priority"]); err != nil {
		return cd, fmt.Errorf("%s: original_priority: %v", v.Path, err)
	}
	if cd.Raised, err = strconv.Atoi(v.Items["raised_priority"]); err != nil {
		return cd, fmt.Errorf("%s: raised_priority: %v", v.Path, err)
	}
	if cd.Until, err = time.Parse(time.RFC3339, v.Items["until"]); err != nil {
		return cd, fmt.Errorf("%s: until: %v", v.Path, err)
	}
	if cd.JobID == "" || VariablePath(cd.JobID) != v.Path {
		return cd, fmt.Errorf("%s: job_id %q does not belong at this path", v.Path, cd.JobID)
	}
	return cd, nil
}

// ErrNotRaised: the preempted job's priority already is at least its
// preemptor's, so there is nothing to raise.
var ErrNotRaised = errors.New("the job's priority is not below its preemptor's")

// Protect starts the cooldown of the job of the preempted allocation r
// (StopReason's, with PreemptedBy set): for the length of the cooldown it
// runs at its preemptor's priority. The variable is written first, then
// the job: a crash between leaves a variable whose job is not raised,
// which Restore simply deletes. A job already in a cooldown keeps its
// original priority and has its end moved out.
func (c *Client) Protect(ctx context.Context, r Reason, cooldown time.Duration) (Cooldown, error) {
	if r.PreemptedBy == "" || r.Alloc == nil {
		return Cooldown{}, errors.New("the allocation was not preempted")
	}
	ns := r.Alloc.Namespace
	wo := (&api.WriteOptions{Namespace: ns}).WithContext(ctx)
	qo := (&api.QueryOptions{Namespace: ns}).WithContext(ctx)
	by, _, err := c.api.Allocations().Info(r.PreemptedBy, qo)
	if err != nil {
		return Cooldown{}, fmt.Errorf("reading the preempting allocation %s: %w", r.PreemptedBy, err)
	}
	if by.Job == nil || by.Job.Priority == nil {
		return Cooldown{}, fmt.Errorf("the preempting allocation %s carries no job priority", r.PreemptedBy)
	}
	job, _, err := c.api.Jobs().Info(r.Alloc.JobID, qo)
	if err != nil {
		return Cooldown{}, fmt.Errorf("reading job %s: %w", r.Alloc.JobID, err)
	}
	cd := Cooldown{Namespace: ns, JobID: *job.ID, Original: *job.Priority, Raised: *by.Job.Priority,
		Until: c.now().Add(cooldown), PreemptedBy: r.PreemptedBy}
	path := VariablePath(cd.JobID)
	prev, _, err := c.api.Variables().Read(path, qo)
	var index uint64
	switch {
	case err == nil:
		index = prev.ModifyIndex
		if old, perr := parseCooldown(prev); perr == nil && *job.Priority == old.Raised {
			cd.Original = old.Original
			cd.Raised = max(cd.Raised, old.Raised)
		}
	case !nomadview.IsNotFound(err):
		return Cooldown{}, fmt.Errorf("reading %s: %w", path, err)
	}
	if cd.Raised <= *job.Priority && index == 0 {
		return cd, ErrNotRaised
	}
	v := &api.Variable{Namespace: ns, Path: path, Items: cd.items(), ModifyIndex: index}
	if _, _, err := c.api.Variables().CheckedUpdate(v, wo); err != nil {
		return Cooldown{}, fmt.Errorf("writing %s: %w", path, err)
	}
	if *job.Priority != cd.Raised {
		if err := c.setPriority(ctx, job, cd.Raised); err != nil {
			return Cooldown{}, err
		}
	}
	return cd, nil
}

// setPriority registers job again with only its priority changed; the
// modify index makes it fail rather than undo a change made meanwhile.
func (c *Client) setPriority(ctx context.Context, job *api.Job, priority int) error {
	job.Priority = &priority
	opts := &api.RegisterOptions{EnforceIndex: true, ModifyIndex: *job.JobModifyIndex, PreserveCounts: true}
	if _, _, err := c.api.Jobs().RegisterOpts(job, opts, (&api.WriteOptions{Namespace: *job.Namespace}).WithContext(ctx)); err != nil {
		return fmt.Errorf("setting job %s's priority to %d: %w", *job.ID, priority, err)
	}
	return nil
}

// Restored is one cooldown that Restore ended.
type Restored struct {
	Cooldown
	// Note says what was done: the priority restored, or why not.
	Note string
}

// Restore ends every cooldown, in every namespace, whose end has passed:
// the job goes back to its original priority unless someone changed it
// since, and the variable is deleted. Several drivers may run it at once;
// the variable's and the job's modify indexes let one of them win.
func (c *Client) Restore(ctx context.Context) ([]Restored, error) {
	metas, _, err := c.api.Variables().PrefixList(VariablePrefix, (&api.QueryOptions{Namespace: api.AllNamespacesNamespace}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("listing %s*: %w", VariablePrefix, err)
	}
	var done []Restored
	var errs []error
	for _, m := range metas {
		qo := (&api.QueryOptions{Namespace: m.Namespace}).WithContext(ctx)
		v, _, err := c.api.Variables().Read(m.Path, qo)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", m.Path, err))
			continue
		}
		cd, err := parseCooldown(v)
		if err == nil && cd.Until.After(c.now()) {
			continue
		}
		r := Restored{Cooldown: cd}
		if err != nil {
			r.Note = "unreadable, removed: " + err.Error()
		} else {
			r.Note, err = c.restoreJob(ctx, cd)
			if err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if _, err := c.api.Variables().CheckedDelete(m.Path, v.ModifyIndex, (&api.WriteOptions{Namespace: m.Namespace}).WithContext(ctx)); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", m.Path, err))
			continue
		}
		done = append(done, r)
	}
	return done, errors.Join(errs...)
}

func (c *Client) restoreJob(ctx context.Context, cd Cooldown) (string, error) {
	job, _, err := c.api.Jobs().Info(cd.JobID, (&api.QueryOptions{Namespace: cd.Namespace}).WithContext(ctx))
	if err != nil {
		if nomadview.IsNotFound(err) {
			return "the job is gone", nil
		}
		return "", fmt.Errorf("reading job %s: %w", cd.JobID, err)
	}
	if job.Priority == nil || *job.Priority != cd.Raised {
		return fmt.Sprintf("left at priority %d: changed since it was raised to %d", deref(job.Priority), cd.Raised), nil
	}
	if job.Stop != nil && *job.Stop {
		return "the job is stopped", nil
	}
	if job.Status != nil && *job.Status == jobStatusDead {
		// Registering a finished batch job again runs it again: its work
		// would be done twice for a priority no allocation needs now.
		return fmt.Sprintf("left at priority %d: the job has finished, and registering it again would run it again", cd.Raised), nil
	}
	if err := c.setPriority(ctx, job, cd.Original); err != nil {
		return "", err
	}
	return fmt.Sprintf("priority %d restored (raised to %d)", cd.Original, cd.Raised), nil
}

// jobStatusDead is Nomad's status of a job with nothing left to run (the
// api package has no constant for it).
const jobStatusDead = "dead"

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// Predecessors are the job's other allocations of the same name (the same
// group and index: "train.g[0]") whose tasks have not finished on their
// client: an allocation this one replaces that is still stopping, on this
// node or another, and still committing its last checkpoint.
func (c *Client) Predecessors(ctx context.Context, namespace, jobID, allocName, self string) ([]string, error) {
	stubs, _, err := c.api.Jobs().Allocations(jobID, true, (&api.QueryOptions{Namespace: namespace}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("listing job %s's allocations: %w", jobID, err)
	}
	var ids []string
	for _, s := range stubs {
		if s.ID == self || s.Name != allocName {
			continue
		}
		switch s.ClientStatus {
		case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
			continue
		}
		if s.ClientStatus == api.AllocClientStatusPending && s.DesiredStatus == api.AllocDesiredStatusRun {
			continue // a newer replacement, not yet started: not ours to wait for
		}
		ids = append(ids, s.ID)
	}
	return ids, nil
}
