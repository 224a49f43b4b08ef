package realengine

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
)

// TestScaleInSettings: the autoscaled nomad-gpu configuration runs the
// controller with scale-in by consolidation on the replay's pool (its
// quiet period and wait from the Policy, its minimum the policy's) and a
// gpu-queue policy with the removable check, as the model does; the same
// without scale-in, and every other configuration, have neither.
func TestScaleInSettings(t *testing.T) {
	configs, err := tracereplay.ParseConfigs("nomad-gpu,nomad-gpu-no-scale-in,nomad-gpu-fixed,+autoscale", tracereplay.AutoscaleGPUQueue)
	if err != nil {
		t.Fatal(err)
	}
	s := tracereplay.Setup{Policy: tracereplay.DefaultPolicy(), Cluster: tracereplay.Cluster{Nodes: 4, MinNodes: 2, MaxNodes: 6, GPUsPerNode: 8}}
	want := []string{"-scale-in-pools", "gpu", "-scale-in-quiet", "24s", "-scale-in-min-nodes", "2", "-scale-in-wait", "36s"}
	for _, cfg := range configs {
		got := scaleInArgs(cfg, s)
		if cfg.Name == "nomad-gpu" {
			if !slices.Equal(got, want) {
				t.Errorf("%s: controller flags %q, want %q", cfg.Name, got, want)
			}
		} else if got != nil {
			t.Errorf("%s: controller flags %q, want none", cfg.Name, got)
		}
	}
	if s.Policy.ScaleInQuiet*25 != 10*time.Minute || s.Policy.ScaleInWait*25 != 15*time.Minute {
		t.Errorf("quiet %s, wait %s: want the controller's 10m and 15m at compression 25", s.Policy.ScaleInQuiet, s.Policy.ScaleInWait)
	}

	policy := harness.WithRemovable(harness.GPUQueuePolicy("http://127.0.0.1:1", 2, 6, 8, s.Policy, 8*time.Second, true))
	if strings.Count(policy, `signal = "removable"`) != 1 || strings.Index(policy, `check "removable"`) > strings.Index(policy, `target "sim-pool"`) {
		t.Errorf("policy without one removable check before its target:\n%s", policy)
	}
	if _, diags := hclparse.NewParser().ParseHCL([]byte(policy), "gpu-pool.hcl"); diags.HasErrors() {
		t.Errorf("policy does not parse: %v\n%s", diags, policy)
	}
}
