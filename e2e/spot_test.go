package e2e

// A spot node reclaimed, against a real Nomad: two sim nodes of 4 GPUs
// sharing a checkpoint root, spot-1 in the spot pool gpu-spot, gpu-1 in
// the pool gpu. A job that does not say it may run on spot never lands
// there, even with spot-1 free and gpu-1 closed; a checkpointing job that
// says so (node_pool "all", a constraint on ${node.pool}) runs on spot-1.
// `nomad-gpu reclaim-watch` reads a fake EC2 metadata service the way it
// reads the real one (IMDSv2); a rebalance recommendation makes spot-1
// ineligible while train runs on; when the fake gives the two-minute notice
// (here one minute), the watcher drains spot-1, the checkpointing job
// commits and runs again on gpu-1 within the notice, losing at most one
// step, and the other job is never touched.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// fakeEC2 answers IMDSv2's token, spot/instance-action and the rebalance
// recommendation: each 404 until set (its JSON then).
type fakeEC2 struct{ notice, rebalance atomic.Pointer[string] }

func (f *fakeEC2) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token" && r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") != "":
		fmt.Fprint(w, "token-1")
	case r.Header.Get("X-aws-ec2-metadata-token") != "token-1":
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	case r.Method == http.MethodGet && r.URL.Path == "/latest/meta-data/spot/instance-action" && f.notice.Load() != nil:
		fmt.Fprint(w, *f.notice.Load())
	case r.Method == http.MethodGet && r.URL.Path == "/latest/meta-data/events/recommendations/rebalance" && f.rebalance.Load() != nil:
		fmt.Fprint(w, *f.rebalance.Load())
	default:
		http.NotFound(w, r)
	}
}

// spotJob is counterJob (batch, 1 GPU) in the pool, checkpointing or not;
// with pool "all" it is allowed the gpu and gpu-spot pools.
func spotJob(id, pool string, checkpoint bool) string {
	hcl := counterJob(id, "batch", 50, 1, checkpoint)
	extra := fmt.Sprintf("  node_pool = %q\n", pool)
	if pool == "all" {
		extra += "  constraint {\n    attribute = \"${node.pool}\"\n    operator  = \"regexp\"\n    value     = \"^gpu(-spot)?$\"\n  }\n"
	}
	return strings.Replace(hcl, "  type     =", extra+"  type     =", 1)
}

func TestSpotReclaim(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
	}
	cluster.RequirePlugin(t, "nomad-device-gpu")
	cluster.RequirePlugin(t, "nomad-driver-gpu")
	c := cluster.Start(t, cluster.Options{Clients: 0})
	for _, p := range []string{"gpu", "gpu-spot"} {
		if _, err := c.API().NodePools().Register(&api.NodePool{Name: p}, nil); err != nil {
			t.Fatal(err)
		}
	}
	shared := filepath.Join(harness.NewGPUNode(t).Dir, "shared-checkpoints")
	var opts []cluster.ClientOptions
	for _, n := range []struct{ name, pool string }{{"spot-1", "gpu-spot"}, {"gpu-1", "gpu"}} {
		node := fourGPUNode(t)
		node.SharedCheckpoints = shared
		node.DriverHCL = fmt.Sprintf("nomad {\naddress = %q\n}", c.Server().HTTPAddr())
		opts = append(opts, cluster.ClientOptions{Name: n.name, PluginDir: cluster.PluginDir(t), ExtraHCL: node.HCL(t), ClientHCL: fmt.Sprintf("node_pool = %q", n.pool)})
	}
	c.StartClients(t, opts...)
	var spot, onDemand string
	for _, name := range []string{"spot-1", "gpu-1"} {
		id := c.WaitForNode(t, name, func(n *api.Node) bool {
			d := n.Drivers["gpu"]
			return d != nil && d.Healthy && wholeGPUsOf(n) == 4
		}, 2*time.Minute).ID
		if name == "spot-1" {
			spot = id
		} else {
			onDemand = id
		}
	}

	// With gpu-1 closed, the job that says nothing of spot waits; the one
	// that allows it runs on spot-1.
	setEligible(t, c, onDemand, false)
	c.RunJob(t, spotJob("plain", "gpu", false))
	c.RunJob(t, spotJob("train", "all", true))
	train := nextAlloc(t, c, "train", 0, 2*time.Minute)
	if train.NodeID != spot {
		t.Fatalf("train placed on %s, want spot-1", train.NodeID)
	}
	time.Sleep(5 * time.Second)
	if n := queued(t, c, "plain"); n != 1 {
		t.Fatalf("plain: %d queued with spot-1 free; want it waiting (it does not allow the spot pool)", n)
	}
	setEligible(t, c, onDemand, true)
	plain := nextAlloc(t, c, "plain", 0, 2*time.Minute)
	if plain.NodeID != onDemand {
		t.Fatalf("plain placed on %s, want gpu-1", plain.NodeID)
	}
	waitProgress(t, c, train.ID, 20)

	// The notice: reclaim-watch drains spot-1; train commits and runs on
	// gpu-1 before the instance would go.
	ec2 := &fakeEC2{}
	imds := httptest.NewServer(ec2)
	t.Cleanup(imds.Close)
	watch := c.StartCommand(t, "reclaim-watch", "reclaim-watch", "-provider", "aws", "-metadata-url", imds.URL,
		"-node-id", spot, "-interval", "500ms", "-drain-deadline", "3s", "-rebalance", "cordon")
	time.Sleep(2 * time.Second)
	if strings.Contains(watch.Log(), "reclaim notice") || strings.Contains(watch.Log(), "rebalance recommendation") {
		t.Fatalf("reclaim-watch acted before any notice:\n%s", watch.Log())
	}
	// First the rebalance recommendation: spot-1 takes no new work, train
	// runs on.
	rebalance := fmt.Sprintf(`{"noticeTime": %q}`, time.Now().UTC().Format(time.RFC3339))
	ec2.rebalance.Store(&rebalance)
	c.WaitForNode(t, "spot-1", func(n *api.Node) bool { return n.SchedulingEligibility == api.NodeSchedulingIneligible }, 30*time.Second)
	if got, _, err := c.API().Allocations().Info(train.ID, nil); err != nil || got.DesiredStatus != api.AllocDesiredStatusRun || got.ClientStatus != api.AllocClientStatusRunning {
		t.Fatalf("train was stopped by the rebalance recommendation (%v): %s", err, cluster.AllocSummary(got))
	}
	if n, _, err := c.API().Nodes().Info(spot, nil); err != nil || n.DrainStrategy != nil {
		t.Fatalf("spot-1 is draining on a rebalance recommendation (%v)", err)
	}
	goes := time.Now().Add(time.Minute).UTC().Truncate(time.Second)
	notice := fmt.Sprintf(`{"action": "terminate", "time": %q}`, goes.Format(time.RFC3339))
	ec2.notice.Store(&notice)

	waitTerminal(t, c, train.ID)
	before := counts(c.AllocLogs(t, train.ID, "t", "stdout"))
	next := nextAlloc(t, c, "train", 1, time.Until(goes))
	log := c.WaitForAllocLogs(t, next.ID, "t", "stdout", "restored=", time.Until(goes))
	if time.Now().After(goes) {
		t.Errorf("train ran again %s after the instance would have gone", time.Since(goes).Round(time.Second))
	}
	restored := counts(log)["restored"]
	t.Logf("train: before the notice %v; its next run restored %d on %s, %s before the instance would go", before, restored, next.NodeID, time.Until(goes).Round(time.Second))
	if restored != before["committed"] || restored == 0 || before["stopped"]-restored > 1 {
		t.Errorf("train: stopped at %d, committed %d, its next run restored %d: more than one step lost", before["stopped"], before["committed"], restored)
	}
	if next.NodeID != onDemand {
		t.Errorf("train's next run is on %s, want gpu-1", next.NodeID)
	}
	n, _, err := c.API().Nodes().Info(spot, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n.LastDrain == nil || !strings.Contains(n.LastDrain.Meta[contract.DrainMetaReclaim], "aws spot instance-action terminate") {
		t.Errorf("spot-1's last drain %+v, want meta %s with the notice", n.LastDrain, contract.DrainMetaReclaim)
	}
	if got, _, err := c.API().Allocations().Info(plain.ID, nil); err != nil || got.DesiredStatus != api.AllocDesiredStatusRun {
		t.Errorf("plain's allocation was stopped (%v): %s", err, cluster.AllocSummary(got))
	}
}
