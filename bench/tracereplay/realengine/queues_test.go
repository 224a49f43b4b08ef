package realengine

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
)

// Team queues on real Nomad (Features.Queues): one namespace a queue of
// the cluster's teams (tracereplay.Cluster.Queues), a queue file giving
// each its weight's share of the fixed cluster as its nominal quota, all
// in one cohort, and every job submitted held (a gang of one member) in
// its queue's namespace, for the controller's gate to admit.

// queueFile writes the controller's queue file for s's teams and returns
// its path.
func queueFile(t *testing.T, s tracereplay.Setup, cfg tracereplay.Config) string {
	t.Helper()
	names, shares := s.Cluster.Queues()
	gpus := float64(cfg.StartNodes(s.Cluster) * s.Cluster.GPUsPerNode)
	var b strings.Builder
	fmt.Fprintf(&b, "fair_share {\n  half_life = %q\n}\ncohort \"cluster\" {}\n", s.Policy.QueueHalfLife.String())
	for i, name := range names {
		fmt.Fprintf(&b, "queue %q {\n  namespaces = [%q]\n  nominal    = %g\n  weight     = %g\n  cohort     = \"cluster\"\n}\n", name, name, shares[i]*gpus, shares[i])
	}
	path := filepath.Join(t.TempDir(), "queues.hcl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// makeQueueNamespaces registers a namespace per team queue.
func makeQueueNamespaces(t *testing.T, c *cluster.Cluster, s tracereplay.Setup) {
	t.Helper()
	names, _ := s.Cluster.Queues()
	for _, ns := range names {
		if _, err := c.API().Namespaces().Register(&api.Namespace{Name: ns}, nil); err != nil {
			t.Fatalf("namespace %s: %v", ns, err)
		}
	}
}

// registerHeld submits the replay job held in namespace ns: its group at
// count 0 with one member, no reschedule (a member's failure is the
// gang's), for the controller to admit; it returns the registration's
// evaluation.
func registerHeld(t *testing.T, c *cluster.Cluster, jobHCL, ns string) string {
	t.Helper()
	job, err := c.API().Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: jobHCL, Canonicalize: true})
	if err != nil {
		t.Fatalf("parse job: %v", err)
	}
	job.Namespace = &ns
	if job.Meta == nil {
		job.Meta = map[string]string{}
	}
	job.Meta[contract.MetaGang] = "true"
	tg := job.TaskGroups[0]
	tg.Count = new(0)
	if tg.Meta == nil {
		tg.Meta = map[string]string{}
	}
	tg.Meta[contract.MetaGangMembers] = "1"
	tg.ReschedulePolicy.Attempts, tg.ReschedulePolicy.Unlimited = new(0), new(false)
	resp, _, err := c.API().Jobs().Register(job, nil)
	if err != nil {
		t.Fatalf("register job %s: %v", *job.ID, err)
	}
	return resp.EvalID
}

// reclaimedLine is a decision of the controller's log taking a run back
// (for another queue, or its own work 10 above).
var reclaimedLine = regexp.MustCompile(`decision: kind=(?:reclaimed|yielded) namespace=\S+ job=(\S+)`)

// reclaimedJobs are the jobs the controller took runs back from, from
// its log (its decisions): their allocations it stopped are reclaimed
// runs.
func reclaimedJobs(log string) map[string]bool {
	out := map[string]bool{}
	for _, m := range reclaimedLine.FindAllStringSubmatch(log, -1) {
		out[m[1]] = true
	}
	return out
}
