package e2e

// Right-sizing against a real Nomad: the controller's sizing module
// samples the MPS shares of running tasks through Nomad's node device
// stats and resizes the jobs whose policy is auto. A starved job grows one step per interval up
// to its max and resumes from its checkpoint each time; an idle one shrinks
// to its min; a job under recommend and one that does not checkpoint are
// never restarted.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// sizingInterval is the jobs' nomad_gpu_sizing_interval.
const sizingInterval = 40 * time.Second

// sizedLoadJob is a batch job whose task counts as counterScript does while
// `nomad-gpu sim-load` keeps its MPS shares at util % (none at 0).
func sizedLoadJob(id, cli string, shares, util int, checkpoint bool, meta map[string]string) string {
	script := counterScript
	if util > 0 {
		script = fmt.Sprintf("%s sim-load --util %d --duration 1h &\n%s", cli, util, counterScript)
	}
	ck := ""
	if checkpoint {
		ck = `
        checkpoint {
          commit_timeout = "15s"
        }`
	}
	var m strings.Builder
	for k, v := range meta {
		fmt.Fprintf(&m, "    %s = %q\n", k, v)
	}
	return fmt.Sprintf(`
job %q {
  type = "batch"
  meta {
%s  }
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "t" {
      driver       = "gpu"
      kill_timeout = "20s"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]%s
      }
      resources {
        cpu    = 20
        memory = 32
        device "nvidia/mps" {
          count = %d
        }
      }
    }
  }
}`, id, m.String(), script, ck, shares)
}

// sharesOf is how many MPS shares the allocation holds.
func sharesOf(a *api.Allocation) int {
	if a.AllocatedResources == nil || a.AllocatedResources.Tasks["t"] == nil {
		return 0
	}
	n := 0
	for _, d := range a.AllocatedResources.Tasks["t"].Devices {
		if d.Type == "mps" {
			n += len(d.DeviceIDs)
		}
	}
	return n
}

func TestControllerResizesAutoJobs(t *testing.T) {
	cluster.RequirePlugin(t, "nomad-device-gpu")
	cluster.RequirePlugin(t, "nomad-driver-gpu")
	cli := cluster.RequireBinary(t, "nomad-gpu")
	benchTrace := cluster.RequireBinary(t, "bench-trace")
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
	}
	c := cluster.Start(t, cluster.Options{Clients: 0})
	node := harness.NewGPUNode(t)
	// GPUs 4 and 5 as 8 MPS shares each: every size asked fits on one GPU
	// whatever the other jobs hold.
	layout := harness.DefaultLayout
	layout.MPS, layout.MPSShares = []int{4, 5}, 8
	node.Layout = &layout
	node.DriverHCL = fmt.Sprintf("nomad {\naddress = %q\n}\nisolation {\nunveil_paths = [%q]\n}", c.Server().HTTPAddr(), "rx:"+filepath.Dir(cli))
	c.StartClients(t, cluster.ClientOptions{Name: "gpu-1", PluginDir: cluster.PluginDir(t), ExtraHCL: node.HCL(t)})
	c.WaitForNode(t, "gpu-1", func(n *api.Node) bool {
		d := n.Drivers["gpu"]
		return d != nil && d.Healthy && len(deviceGroups(n)) == 6
	}, 2*time.Minute)

	auto := func(min, max string) map[string]string {
		return map[string]string{sizing.MetaMode: "auto", sizing.MetaMin: min, sizing.MetaMax: max, sizing.MetaInterval: sizingInterval.String()}
	}
	c.RunJob(t, sizedLoadJob("starved", cli, 1, 100, true, auto("1", "4")))
	c.RunJob(t, sizedLoadJob("idle", cli, 4, 0, true, auto("2", "8")))
	c.RunJob(t, sizedLoadJob("watched", cli, 2, 100, true, map[string]string{sizing.MetaMode: "recommend"}))
	c.RunJob(t, sizedLoadJob("nockpt", cli, 2, 100, false, auto("1", "8")))
	first := map[string]*api.Allocation{}
	for _, id := range []string{"starved", "idle", "watched", "nockpt"} {
		first[id] = nextAlloc(t, c, id, 0, 2*time.Minute)
	}

	historyFile := filepath.Join(t.TempDir(), "history.db")
	ctl := c.StartController(t, "controller", "-history", historyFile, "-sizing-interval", "2s", "-min-samples", "4", "-min-span", "6s", "-window", "10m")

	// resumed checks that next restored what prev committed on its way out.
	resumed := func(id string, prev, next *api.Allocation) {
		t.Helper()
		waitTerminal(t, c, prev.ID)
		before := counts(c.AllocLogs(t, prev.ID, "t", "stdout"))
		log := c.WaitForAllocLogs(t, next.ID, "t", "stdout", "restored=", time.Minute)
		if before["committed"] == 0 || before["committed"] != before["signal"] || counts(log)["restored"] != before["committed"] {
			t.Fatalf("%s: the resized task committed %v on its way out and its replacement restored %d:\n%s", id, before, counts(log)["restored"], log)
		}
	}

	// The starved job: 1 → 2 shares, then 2 → 4 not within the interval,
	// then held at its max of 4 however starved.
	grown := nextAlloc(t, c, "starved", 1, 2*time.Minute)
	if got := sharesOf(grown); got != 2 {
		t.Fatalf("starved job resized to %d shares, want 2", got)
	}
	resumed("starved", first["starved"], grown)
	again := nextAlloc(t, c, "starved", 2, 2*time.Minute)
	if got := sharesOf(again); got != 4 {
		t.Fatalf("starved job resized again to %d shares, want 4", got)
	}
	// Less a second: each allocation is created a moment after its round.
	if gap := time.Unix(0, again.CreateTime).Sub(time.Unix(0, grown.CreateTime)); gap < sizingInterval-time.Second {
		t.Errorf("starved job resized again %v after the last resize, within its %v interval", gap, sizingInterval)
	}
	resumed("starved", grown, again)

	// The idle job: 4 → 2, its min, and no further.
	shrunk := nextAlloc(t, c, "idle", 1, time.Minute)
	if got := sharesOf(shrunk); got != 2 {
		t.Fatalf("idle job resized to %d shares, want its min 2", got)
	}
	resumed("idle", first["idle"], shrunk)

	// Past another interval nothing else moved: the bounds hold, and the
	// recommend and no-checkpoint jobs run their first allocation still.
	time.Sleep(sizingInterval + 10*time.Second)
	for id, n := range map[string]int{"starved": 3, "idle": 2, "watched": 1, "nockpt": 1} {
		stubs, _, err := c.API().Jobs().Allocations(id, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(stubs) != n {
			t.Errorf("job %s has %d allocations, want %d", id, len(stubs), n)
		}
		if j, _, err := c.API().Jobs().Info(id, nil); err != nil || (n == 1 && *j.Version != 0) {
			t.Errorf("job %s: version %v, %v; want it never registered again", id, j.Version, err)
		}
	}
	for _, id := range []string{"watched", "nockpt"} {
		if a, _, err := c.API().Allocations().Info(first[id].ID, nil); err != nil || a.ClientStatus != "running" {
			t.Errorf("job %s's allocation is not running: %v", id, err)
		}
	}

	// Each resize is in the job's history with its reason, and in the log.
	j, _, err := c.API().Jobs().Info("starved", nil)
	if err != nil {
		t.Fatal(err)
	}
	if last := j.TaskGroups[0].Tasks[0].Meta[sizing.MetaLastResize]; !strings.Contains(last, "→ 4 MPS shares") {
		t.Errorf("task meta %s = %q, want the last resize's reason", sizing.MetaLastResize, last)
	}
	log := ctl.Log()
	for _, want := range []string{"kind=resized namespace=default job=starved reason=\"default/starved/g/t: 1 MPS share → 2 MPS shares", "task=default/watched/g/t", "recommended only"} {
		if !strings.Contains(log, want) {
			t.Errorf("controller log lacks %q", want)
		}
	}
	if n := strings.Count(log, "kind=resized"); n != 3 {
		t.Errorf("the controller logged %d resizes, want 3 (starved twice, idle once)", n)
	}
	if n := ctl.Metric(t, contract.MetricControllerDecisions); n < 3 {
		t.Errorf("%s is %v, want the 3 resizes counted at least", contract.MetricControllerDecisions, n)
	}
	// The dry run reads the same file once the leader lets go of it, and
	// with every job at its bound has nothing to do.
	ctl.Stop()
	out, err := exec.Command(cli, "sizer", "-dry-run", "-address", c.Server().HTTPAddr(), "-history", historyFile, "-min-samples", "4", "-min-span", "6s", "-window", "10m").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "nothing to do") {
		t.Errorf("nomad-gpu sizer -dry-run: %v\n%s", err, out)
	}
	// The purchase question reads the runs the leader recorded, each with
	// its job's submission as Nomad gave it: 7 allocations, 4 still
	// running; a resize registers a new version, so the 3 replacements
	// are pieces of their own.
	report := t.TempDir()
	out, err = exec.Command(benchTrace, "-history", historyFile, "-window", "0", "-load", "0", "-frontier", "1:2", "-purchase", "10m", "-out", report).CombinedOutput()
	if err != nil {
		t.Errorf("bench-trace -history: %v\n%s", err, out)
	} else if md, err := os.ReadFile(filepath.Join(report, "purchase.md")); err != nil || !strings.Contains(string(md), "history: 7 runs made 7 jobs; 0 pieces of work never started (left out), 4 still running (cut at the read), 0 without a recorded submission") {
		t.Errorf("bench-trace -history: purchase.md lacks what the history held (%v):\n%s", err, md)
	}
	// The 3 allocations a resize replaced were killed by Nomad: stopped,
	// not complete, so their short runs teach the predictions nothing.
	store, err := history.Open(historyFile, history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := store.AllRuns(t.Context(), time.Time{})
	_ = store.Close()
	outcomes := map[history.Outcome]int{}
	for _, r := range runs {
		outcomes[r.Outcome]++
	}
	if err != nil || outcomes[history.OutcomeStopped] != 3 || outcomes[history.OutcomeRunning] != 4 {
		t.Errorf("recorded outcomes %v (%v), want 3 stopped and 4 running", outcomes, err)
	}
	for _, id := range []string{"starved", "idle", "watched", "nockpt"} {
		c.StopJob(t, id, true)
	}
}

// A job whose deadline it would miss behind a busy node is raised a tier
// by the controller's deadline module (a ledger raise),
// preempts its way in (the busy job checkpoints), starts before its
// deadline, and gets its priority back once it has run.
func TestControllerDeadline(t *testing.T) {
	cluster.RequireBinary(t, "nomad-gpu")
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "e2e: the gpu driver needs a root Nomad client")
	}
	c := checkpointCluster(t, []harness.GPUNode{harness.NewGPUNode(t)}, "")
	c.EnablePreemption(t)
	gpus := wholeGPUs(t, c, "gpu-1")
	c.RunJob(t, counterJob("busy", "batch", 30, gpus, true))
	busy := nextAlloc(t, c, "busy", 0, 2*time.Minute)
	waitProgress(t, c, busy.ID, 20)

	// Nothing is known of how long busy runs, so the controller takes the wait
	// as -deadline-lead (60s): past the latest start 15 s from now.
	deadline := time.Now().Add(75 * time.Second)
	c.RunJob(t, fmt.Sprintf(`
job "urgent" {
  type     = "batch"
  priority = 30
  meta {
    %s = %q
  }
  group "g" {
    task "t" {
      driver = "gpu"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo READY; sleep 10"]
      }
      resources {
        cpu    = 20
        memory = 32
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}`, sizing.MetaDeadline, deadline.UTC().Format(time.RFC3339)))
	ctl := c.StartController(t, "controller", "-deadline-lead", "60s", "-raise-every", "10s", "-priority-tiers", "70,40", "-max-priority", "80")

	urgent := nextAlloc(t, c, "urgent", 0, 90*time.Second)
	if p := jobPriority(t, c, "urgent"); p != 40 && p != 70 {
		t.Errorf("urgent runs at priority %d, want a raise to 40 or 70", p)
	}
	st := urgent.TaskStates["t"]
	if st == nil || st.StartedAt.IsZero() || !st.StartedAt.Before(deadline) {
		t.Fatalf("urgent started at %v, deadline %v", st, deadline)
	}
	preempted := waitTerminal(t, c, busy.ID)
	if preempted.PreemptedByAllocation != urgent.ID {
		t.Errorf("busy was not preempted by urgent: %s", cluster.AllocSummary(preempted))
	}
	if ck := counts(c.AllocLogs(t, busy.ID, "t", "stdout")); ck["committed"] == 0 {
		t.Errorf("busy did not checkpoint on its way out: %v", ck)
	}

	// Once it has run, its priority is its own again.
	waitTerminal(t, c, urgent.ID)
	for end := time.Now().Add(30 * time.Second); jobPriority(t, c, "urgent") != 30; time.Sleep(time.Second) {
		if time.Now().After(end) {
			t.Fatalf("urgent's priority is %d after it ran, want 30 back", jobPriority(t, c, "urgent"))
		}
	}
	log := ctl.Log()
	for _, want := range []string{"kind=deadline-raised namespace=default job=urgent reason=\"to 40: ", "kind=deadline-restored namespace=default job=urgent", "kind=restored namespace=default job=urgent"} {
		if !strings.Contains(log, want) {
			t.Errorf("controller log lacks %q", want)
		}
	}
	// The raise was kept in the priority ledger, and nowhere else.
	if _, _, err := c.API().Variables().Read(controller.LedgerPath("urgent"), nil); err == nil {
		t.Errorf("the ledger entry of urgent outlived its raise")
	}
	c.StopJob(t, "busy", true)
	c.StopJob(t, "urgent", true)
}
