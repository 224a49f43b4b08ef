package e2e

// GPU layouts that follow the queue, against a real Nomad: the controller
// asks a free GPU for the layout the queue needs in node metadata, the
// device plugin applies it once nothing holds the GPU.

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/autoscaler/apm"
	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// layoutNodeHCL is the device plugin's config for a node that follows
// the layouts in its metadata, quickly.
func layoutNodeHCL(n harness.GPUNode, drainGrace string) string {
	return fmt.Sprintf(`nomad {
  address = %q
}
layout {
  enabled     = true
  poll        = "500ms"
  drain_grace = %q
  state_file  = %q
}`, cluster.SelfHTTPAddr, drainGrace, filepath.Join(n.Dir, "layouts.json"))
}

// startLayoutCluster is one simulated GPU node laid out as l, following
// its metadata's layouts; it waits until the node shows all 8 GPUs'
// layout groups.
func startLayoutCluster(t *testing.T, l harness.NodeLayout, drainGrace string) (*cluster.Cluster, harness.GPUNode, *api.Node) {
	t.Helper()
	c, node := startGPUClusterWhen(t, func(n *api.Node) bool { return len(layoutGroups(n)) == 8 }, func(n *harness.GPUNode) {
		n.Layout = &l
		n.DeviceHCL = layoutNodeHCL(*n, drainGrace)
	})
	return c, node, c.WaitForNode(t, "client-1", func(n *api.Node) bool { return len(layoutGroups(n)) == 8 }, time.Minute)
}

func attrText(d *api.NodeDeviceResource, name string) string {
	if a := d.Attributes[name]; a != nil {
		if a.StringVal != nil {
			return *a.StringVal
		}
		return a.String()
	}
	return ""
}

// currentLayouts is each GPU's current layout by UUID, as the servers see it.
func currentLayouts(n *api.Node) map[string]string {
	out := map[string]string{}
	for uuid, d := range layoutGroups(n) {
		out[uuid] = attrText(d, contract.AttrLayoutCurrent)
	}
	return out
}

// ownershipRecord watches a node for the whole test: which GPUs running
// allocations hold, and every change of a GPU's layout. A change seen
// between two looks while one allocation ran at both and held an instance
// of that GPU is a violation: the GPU was relaid under it. An allocation
// counts as holding from running on (one whose Reserve was refused never
// held anything).
type ownershipRecord struct {
	mu         sync.Mutex
	changes    []string
	violations []string
	stop       chan struct{}
	done       chan struct{}
}

func recordOwnership(t *testing.T, c *cluster.Cluster, nodeID string) *ownershipRecord {
	r := &ownershipRecord{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		var lastLayouts map[string]string
		var lastHolders map[string][]string // GPU → running allocs
		for {
			layouts, holders, ok := lookOwnership(c, nodeID)
			if ok {
				r.compare(lastLayouts, lastHolders, layouts, holders)
				lastLayouts, lastHolders = layouts, holders
			}
			select {
			case <-r.stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(r.finish)
	return r
}

// lookOwnership reads the node's layouts and which running allocations
// hold each GPU.
func lookOwnership(c *cluster.Cluster, nodeID string) (map[string]string, map[string][]string, bool) {
	n, _, err := c.API().Nodes().Info(nodeID, nil)
	if err != nil {
		return nil, nil, false
	}
	allocs, _, err := c.API().Nodes().Allocations(nodeID, nil)
	if err != nil {
		return nil, nil, false
	}
	holders := map[string][]string{}
	for _, a := range allocs {
		if a.ClientStatus != api.AllocClientStatusRunning || a.AllocatedResources == nil {
			continue
		}
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				for _, id := range d.DeviceIDs {
					gpu := gpuOfInstance(n, id)
					holders[gpu] = append(holders[gpu], a.ID)
				}
			}
		}
	}
	return currentLayouts(n), holders, true
}

// gpuOfInstance is the GPU UUID an instance ID is part of.
func gpuOfInstance(n *api.Node, id string) string {
	if u, _, ok := contract.ParseShareID(id); ok {
		return u
	}
	if strings.HasPrefix(id, "GPU-") {
		return id
	}
	for _, d := range n.NodeResources.Devices {
		for _, in := range d.Instances {
			if in.ID == id && in.Locality != nil {
				for uuid, lg := range layoutGroups(n) {
					if strings.EqualFold(attrText(lg, contract.AttrLayoutPCIBusID), in.Locality.PciBusID) {
						return uuid
					}
				}
			}
		}
	}
	return id
}

func (r *ownershipRecord) compare(lastLayouts map[string]string, lastHolders map[string][]string, layouts map[string]string, holders map[string][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uuid, now := range layouts {
		before, seen := lastLayouts[uuid]
		if !seen || before == now {
			continue
		}
		r.changes = append(r.changes, fmt.Sprintf("%s %s: %s → %s", time.Now().Format("15:04:05.000"), uuid, before, now))
		for _, a := range lastHolders[uuid] {
			if slices.Contains(holders[uuid], a) {
				r.violations = append(r.violations, fmt.Sprintf("%s relaid %s → %s while allocation %s ran on it", uuid, before, now, a))
			}
		}
	}
}

func (r *ownershipRecord) finish() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

// check stops the record and fails the test on a violation; it returns
// the layout changes seen.
func (r *ownershipRecord) check(t *testing.T) []string {
	t.Helper()
	r.finish()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.violations {
		t.Error(v)
	}
	return slices.Clone(r.changes)
}

// waitRunning waits until every job's first allocation runs and returns
// them by job.
func waitRunning(t *testing.T, c *cluster.Cluster, jobs []string, timeout time.Duration) map[string]*api.AllocationListStub {
	t.Helper()
	deadline := time.Now().Add(timeout)
	out := map[string]*api.AllocationListStub{}
	for {
		for _, j := range jobs {
			if out[j] != nil {
				continue
			}
			stubs, _, err := c.API().Jobs().Allocations(j, false, nil)
			if err != nil {
				continue
			}
			for _, a := range stubs {
				if a.ClientStatus == api.AllocClientStatusRunning {
					out[j] = a
				}
			}
		}
		if len(out) == len(jobs) {
			return out
		}
		if time.Now().After(deadline) {
			var missing []string
			for _, j := range jobs {
				if out[j] == nil {
					missing = append(missing, j)
				}
			}
			t.Fatalf("e2e: jobs %v not running after %v", missing, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitRunningCount waits until at least n of the jobs run, and returns
// how many run then.
func waitRunningCount(t *testing.T, c *cluster.Cluster, jobs []string, n int, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		count := 0
		for _, j := range jobs {
			stubs, _, err := c.API().Jobs().Allocations(j, false, nil)
			if err != nil {
				continue
			}
			for _, a := range stubs {
				if a.ClientStatus == api.AllocClientStatusRunning {
					count++
					break
				}
			}
		}
		if count >= n || time.Now().After(deadline) {
			return count
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestLayoutsFollowTheQueue: a node of 8 whole GPUs and no static slices.
// 6 jobs asking for one MPS share each make a free GPU shares within 30
// s; 8 whole-GPU jobs then take the 7 whole GPUs and the eighth waits
// until the shares are free, when the shared GPU is whole again. No GPU
// is relaid while an allocation holds one of its instances.
func TestLayoutsFollowTheQueue(t *testing.T) {
	c, _, n := startLayoutCluster(t, harness.NodeLayout{}, "2s")
	record := recordOwnership(t, c, n.ID)
	ctl := c.StartController(t, "ctl", "-tick", "500ms", "-preemption-cooldown", "0")

	var mpsJobs []string
	start := time.Now()
	for i := range 6 {
		id := fmt.Sprintf("mps-%d", i)
		c.RunJob(t, gpuJob(id, "nvidia/mps", 1, ""))
		mpsJobs = append(mpsJobs, id)
	}
	running := waitRunning(t, c, mpsJobs, 30*time.Second)
	t.Logf("6 MPS jobs running %.1f s after they were queued", time.Since(start).Seconds())
	shared := map[string]bool{}
	for _, stub := range running {
		a, _, err := c.API().Allocations().Info(stub.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				shared[d.Name] = true // an MPS group is named by its GPU
			}
		}
	}
	if len(shared) != 1 {
		t.Errorf("the 6 MPS jobs hold shares of %d GPUs, want 1: %v", len(shared), shared)
	}

	var wholeJobs []string
	for i := range 8 {
		id := fmt.Sprintf("whole-%d", i)
		c.RunJob(t, gpuJob(id, "nvidia/gpu", 1, ""))
		wholeJobs = append(wholeJobs, id)
	}
	// Seven fit on the whole GPUs; the eighth waits for the shared GPU,
	// which its shares' allocations hold.
	if got := waitRunningCount(t, c, wholeJobs, 7, 60*time.Second); got != 7 {
		t.Fatalf("%d whole-GPU jobs run while the shares are held, want 7", got)
	}
	for _, j := range mpsJobs {
		c.StopJob(t, j, false)
	}
	waitRunning(t, c, wholeJobs, 90*time.Second)
	changes := record.check(t)
	t.Logf("layout changes seen: %s", strings.Join(changes, "; "))
	if got := ctl.MetricByLabel(t, contract.MetricControllerLayoutChanges, contract.LabelLayoutKind); got["mps"] < 1 || got["whole"] < 1 {
		t.Errorf("layout changes by kind %v; want at least one to mps and one back to whole", got)
	}
	// The controller times a layout once its own read of the node list
	// shows it offered, which may come a tick after the jobs placed on
	// it run.
	deadline := time.Now().Add(10 * time.Second)
	for n := ctl.Metric(t, contract.MetricControllerLayoutApplied+"_count"); n < 2; n = ctl.Metric(t, contract.MetricControllerLayoutApplied+"_count") {
		if time.Now().After(deadline) {
			t.Errorf("%s_count %v; want the two layouts' times from asked to applied", contract.MetricControllerLayoutApplied, n)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// migInstances are a node's MIG instance IDs.
func migInstances(n *api.Node) map[string]bool {
	out := map[string]bool{}
	for _, d := range n.NodeResources.Devices {
		if d.Type == contract.SliceMIG {
			for _, in := range d.Instances {
				out[in.ID] = true
			}
		}
	}
	return out
}

// envValue is the value of a NAME=value line in a task's output.
func envValue(out, name string) string {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+"="); ok {
			return v
		}
	}
	return ""
}

// TestLayoutsMIGGeometry: a sim GPU in MIG mode goes from one geometry
// (3g.40gb twice) to another (1g.10gb seven times) as a MIG ask of the
// other profile waits, through NVML's GPU and compute instance calls;
// the task sees the new instance's MIG- UUID in CUDA_VISIBLE_DEVICES.
func TestLayoutsMIGGeometry(t *testing.T) {
	c, _, n := startLayoutCluster(t, harness.NodeLayout{MIG: []int{7}, MIGProfiles: []string{"3g.40gb", "3g.40gb"}}, "1s")
	before := migInstances(n)
	if len(before) != 2 {
		t.Fatalf("node has MIG instances %v, want the two 3g.40gb", before)
	}
	record := recordOwnership(t, c, n.ID)
	c.StartController(t, "ctl", "-tick", "500ms", "-preemption-cooldown", "0")
	c.RunJob(t, gpuJob("small", "nvidia/mig/1g.10gb", 1, ""))
	a := waitRunning(t, c, []string{"small"}, 60*time.Second)["small"]
	out := c.WaitForAllocLogs(t, a.ID, "t", "stdout", "READY", 30*time.Second)
	visible := envValue(out, contract.EnvCUDAVisibleDevices)
	if !strings.HasPrefix(visible, "MIG-") || before[visible] {
		t.Errorf("CUDA_VISIBLE_DEVICES=%q; want a MIG- UUID of the new geometry (the old ones were %v)", visible, before)
	}
	after := c.WaitForNode(t, "client-1", func(n *api.Node) bool {
		for _, d := range layoutGroups(n) {
			if attrText(d, contract.AttrLayoutMIGMode) == "true" {
				return attrText(d, contract.AttrLayoutCurrent) == "mig:"+strings.Repeat("1g.10gb,", 6)+"1g.10gb"
			}
		}
		return false
	}, 30*time.Second)
	if got := migInstances(after); len(got) != 7 || !got[visible] {
		t.Errorf("MIG instances after: %d (%v); want 7 including %s", len(got), got, visible)
	}
	t.Logf("layout changes seen: %s", strings.Join(record.check(t), "; "))
}

// racerJob is a service job asking for one whole GPU, placed again by
// Nomad an hour after a failed allocation: within the test only the
// controller's forced reschedule of a placement a relayout refused
// places it again.
const racerJob = `
job "racer" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      delay          = "1h"
      delay_function = "constant"
      unlimited      = true
    }
    task "t" {
      driver = "gpu"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo READY; while true; do sleep 0.2; done"]
      }
      resources {
        cpu    = 50
        memory = 32
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}`

// gpuByIndex is the UUID of the node's GPU of NVML index i, from its
// layout groups.
func gpuByIndex(t *testing.T, n *api.Node, i int) string {
	t.Helper()
	for uuid, d := range layoutGroups(n) {
		if attrText(d, contract.AttrLayoutIndex) == fmt.Sprint(i) {
			return uuid
		}
	}
	t.Fatalf("node has no layout group of GPU %d", i)
	return ""
}

// settleAlloc waits until the allocation runs or has failed, and returns it.
func settleAlloc(t *testing.T, c *cluster.Cluster, id string, timeout time.Duration) *api.Allocation {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		a, _, err := c.API().Allocations().Info(id, nil)
		if err == nil && (a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusFailed) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("allocation %s neither runs nor failed after %v", id, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestLayoutsPinAndRace: an operator's `nomad node meta apply` pin is
// applied and left alone by the controller, though work waits that the
// GPU's old layout would serve; a placement racing the relayout gets a
// clean Reserve error, is placed again by the controller, and runs once
// the pin is gone.
func TestLayoutsPinAndRace(t *testing.T) {
	// GPU 0 is the node's only whole GPU: the others are in MIG mode.
	c, _, n := startLayoutCluster(t, harness.NodeLayout{MIG: []int{1, 2, 3, 4, 5, 6, 7}, MIGProfiles: []string{"3g.40gb", "3g.40gb"}}, "3s")
	record := recordOwnership(t, c, n.ID)
	ctl := c.StartController(t, "ctl", "-tick", "500ms", "-preemption-cooldown", "0")
	gpu0 := gpuByIndex(t, n, 0)
	pinKey, pin := contract.MetaPinPrefix+gpu0, "mps:4"

	// The plugin reads the pin within its poll and drains GPU 0 at once:
	// Reserve refuses its instance from then on, while the servers still
	// see it whole and healthy until the node's next update (5–10 s on a
	// non-dev agent). A whole-GPU job placed now races the relayout.
	pinAndAwait(t, c, n.ID, gpu0, pin, "→ draining")
	c.RunJob(t, racerJob)
	first := settleAlloc(t, c, c.WaitForAllocs(t, "racer", 1, 30*time.Second)[0].ID, time.Minute)
	if first.ClientStatus != api.AllocClientStatusFailed {
		t.Fatalf("the racing allocation %s runs on the GPU being relaid: the race was not reproduced\n%s", first.ID, cluster.AllocSummary(first))
	}
	// The plugin's refusal while it drains, or, where the switch came
	// first, the plugin's or Nomad's of an instance gone: each names it.
	if !controller.RefusedByRelayout(first.TaskStates) || !strings.Contains(cluster.AllocSummary(first), gpu0) {
		t.Errorf("the racing allocation failed without a Reserve error naming GPU 0:\n%s", cluster.AllocSummary(first))
	}

	// Pinned: GPU 0 is mps:4 and stays so, though the racer waits for a
	// whole GPU the planner would make of it.
	c.WaitForNode(t, "client-1", func(n *api.Node) bool {
		d := layoutGroups(n)[gpu0]
		return d != nil && attrText(d, contract.AttrLayoutCurrent) == pin && attrText(d, contract.AttrLayoutPinned) == "true"
	}, 30*time.Second)
	time.Sleep(5 * time.Second) // rounds of the controller with the racer queued
	if got := ctl.MetricByLabel(t, contract.MetricControllerLayoutChanges, contract.LabelLayoutKind); len(got) != 0 {
		t.Errorf("the controller relaid GPUs %v while the only candidate was pinned", got)
	}

	// Unpinned: GPU 0 is whole again and the racer runs: placed again by
	// the controller's forced reschedule, as Nomad's own is an hour away.
	if _, err := c.API().Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: n.ID, Meta: map[string]*string{pinKey: nil}}, nil); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, c, []string{"racer"}, 90*time.Second)
	if got := ctl.MetricByLabel(t, contract.MetricControllerDecisions, contract.LabelKind)["replaced"]; got != 1 {
		t.Errorf("the controller placed the refused allocation again %v times, want 1", got)
	}
	t.Logf("layout changes seen: %s", strings.Join(record.check(t), "; "))
}

// TestLayoutsNomadRefusesAGoneGroup pins Nomad's own wording, the one
// the controller matches (controller.NomadUnknownDevice): GPU 0 is the
// node's only whole GPU, so relaying it removes the device group
// nvidia/gpu/H100 from the client's fingerprint. With no drain grace the
// plugin switches at once; the servers, a node-update batch behind, still
// place a whole-GPU job there, and Nomad's client refuses the Reserve of
// a group it lacks before our plugin is asked.
func TestLayoutsNomadRefusesAGoneGroup(t *testing.T) {
	c, _, n := startLayoutCluster(t, harness.NodeLayout{MIG: []int{1, 2, 3, 4, 5, 6, 7}, MIGProfiles: []string{"3g.40gb", "3g.40gb"}}, "0s")
	pinAndAwait(t, c, n.ID, gpuByIndex(t, n, 0), "mps:4", "draining → ready")
	c.RunJob(t, racerJob)
	a := settleAlloc(t, c, c.WaitForAllocs(t, "racer", 1, 30*time.Second)[0].ID, time.Minute)
	if a.ClientStatus != api.AllocClientStatusFailed {
		t.Fatalf("the racing allocation was not refused (the servers saw the relayout first?)\n%s", cluster.AllocSummary(a))
	}
	if !strings.Contains(cluster.AllocSummary(a), controller.NomadUnknownDevice) || !controller.RefusedByRelayout(a.TaskStates) {
		t.Errorf("Nomad's refusal does not say %q, the wording the controller matches:\n%s", controller.NomadUnknownDevice, cluster.AllocSummary(a))
	}
}

// pinAndAwait pins gpu of client-1 (node nodeID) to layout and waits
// until the device plugin logs the GPU's state change transition
// ("→ draining", "draining → ready").
func pinAndAwait(t *testing.T, c *cluster.Cluster, nodeID, gpu, layout, transition string) {
	t.Helper()
	key := contract.MetaPinPrefix + gpu
	if _, err := c.API().Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: nodeID, Meta: map[string]*string{key: &layout}}, nil); err != nil {
		t.Fatal(err)
	}
	client := c.Client(t, "client-1")
	for deadline := time.Now().Add(15 * time.Second); !stateLogged(client.CurrentLog(), gpu, transition); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the device plugin did not log %s %q within 15s of the pin", gpu, transition)
		}
	}
}

// stateLogged says the client's log has the device plugin's state change
// transition of gpu.
func stateLogged(log, gpu, transition string) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, gpu) && strings.Contains(l, transition) {
			return true
		}
	}
	return false
}

// TestLayoutsFailedGPU: an XID fails GPU 0, the GPU the planner relays
// first among equals, and then fractional work waits. The planner never
// relays the failed GPU: the job runs on shares of another GPU within
// the relayout time; the failed GPU keeps its layout even when an
// operator pins it; and the APM's capacity leaves it out.
func TestLayoutsFailedGPU(t *testing.T) {
	c, node, n := startLayoutCluster(t, harness.NodeLayout{}, "2s")
	record := recordOwnership(t, c, n.ID)
	failed := gpuByIndex(t, n, 0)
	if err := gpu.OpenControl(node.Control).InjectXID(failed, 79); err != nil {
		t.Fatal(err)
	}
	n = c.WaitForNode(t, "client-1", func(n *api.Node) bool {
		return strings.Contains(attrText(layoutGroups(n)[failed], contract.AttrLayoutFault), "XID 79")
	}, time.Minute)
	if got := gpuCapacity(t, c); got != 7 {
		t.Errorf("APM capacity %v GPUs with GPU 0 failed, want 7", got)
	}

	ctl := c.StartController(t, "ctl", "-tick", "500ms", "-preemption-cooldown", "0")
	start := time.Now()
	c.RunJob(t, gpuJob("frac", "nvidia/mps", 1, ""))
	stub := waitRunning(t, c, []string{"frac"}, 30*time.Second)["frac"]
	t.Logf("the fractional job runs %.1f s after it was queued", time.Since(start).Seconds())
	a, _, err := c.API().Allocations().Info(stub.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range a.AllocatedResources.Tasks {
		for _, d := range tr.Devices {
			if d.Name == failed { // an MPS group is named by its GPU
				t.Errorf("the fractional job holds shares of the failed GPU %s", failed)
			}
		}
	}

	// An operator's pin does not relay it either: the plugin says why.
	pin := "mps:4"
	if _, err := c.API().Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: n.ID, Meta: map[string]*string{contract.MetaPinPrefix + failed: &pin}}, nil); err != nil {
		t.Fatal(err)
	}
	n = c.WaitForNode(t, "client-1", func(n *api.Node) bool {
		g := layoutGroups(n)[failed]
		return attrText(g, contract.AttrLayoutState) == string(contract.LayoutError) && strings.Contains(attrText(g, contract.AttrLayoutError), "has failed")
	}, time.Minute)
	if got := currentLayouts(n)[failed]; got != "whole" {
		t.Errorf("the failed GPU is %s after a pin, want whole", got)
	}
	if got := gpuCapacity(t, c); got != 7 {
		t.Errorf("APM capacity %v GPUs with GPU 0 failed and another shared, want 7", got)
	}
	for _, ch := range record.check(t) {
		if strings.Contains(ch, failed) {
			t.Errorf("the failed GPU was relaid: %s", ch)
		}
	}
	if got := ctl.MetricByLabel(t, contract.MetricControllerLayoutChanges, contract.LabelLayoutKind); got["mps"] != 1 {
		t.Errorf("layout changes by kind %v; want one to mps", got)
	}
}

// gpuCapacity is the APM's GPU capacity, in GPU-equivalents, of the
// cluster's nodes as the servers list them.
func gpuCapacity(t *testing.T, c *cluster.Cluster) float64 {
	t.Helper()
	stubs, _, err := c.API().Nodes().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range apm.GPUFigures(apm.SnapshotOf(&nomadview.Snapshot{Nodes: stubs}, false)) {
		total += f.Capacity
	}
	return total
}
