package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// AutoscalerBinary returns the nomad-autoscaler binary to run:
// $NOMAD_AUTOSCALER_BINARY if set, else `nomad-autoscaler` on PATH. Without
// one it skips the test with one line.
func AutoscalerBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("NOMAD_AUTOSCALER_BINARY"); p != "" {
		abs, err := exec.LookPath(p)
		if err != nil {
			t.Fatalf("e2e: NOMAD_AUTOSCALER_BINARY=%q is not an executable: %v", p, err)
		}
		abs, _ = filepath.Abs(abs)
		return abs
	}
	p, err := exec.LookPath("nomad-autoscaler")
	if err != nil {
		testenv.Skip(t, testenv.Autoscaler, "e2e: no nomad-autoscaler binary (set NOMAD_AUTOSCALER_BINARY or put nomad-autoscaler on PATH)")
	}
	abs, _ := filepath.Abs(p)
	return abs
}

// AutoscalerOptions configures StartAutoscaler.
type AutoscalerOptions struct {
	// PluginDir holds the external plugins the agent may launch.
	PluginDir string
	// HCL is agent config added to what the harness writes (nomad, http,
	// policy, log settings): the apm, strategy and target blocks.
	HCL string
	// Policies are scaling policy files (name → HCL), written to the
	// agent's policy dir. Job policies come from Nomad itself.
	Policies map[string]string
	// EvaluationInterval is policy.default_evaluation_interval; 0: 2s.
	EvaluationInterval time.Duration
}

// Autoscaler is a nomad-autoscaler agent process of the cluster.
type Autoscaler struct {
	*process
	dir  string
	port int
}

// Log is everything the agent has logged so far.
func (a *Autoscaler) Log() string {
	b, _ := os.ReadFile(a.logPath)
	return string(b)
}

// StartAutoscaler starts a nomad-autoscaler agent against the cluster's
// server and waits until it serves its health endpoint. It skips the test
// without a binary; it is stopped with the cluster.
func (c *Cluster) StartAutoscaler(t testing.TB, o AutoscalerOptions) *Autoscaler {
	t.Helper()
	bin := AutoscalerBinary(t)
	port, err := freePort()
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	a := &Autoscaler{dir: filepath.Join(c.dir, "autoscaler"), port: port}
	policyDir := filepath.Join(a.dir, "policies")
	if err := os.MkdirAll(policyDir, 0o755); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	for name, body := range o.Policies {
		if err := os.WriteFile(filepath.Join(policyDir, name), []byte(body), 0o644); err != nil {
			t.Fatalf("e2e: %v", err)
		}
	}
	every := o.EvaluationInterval
	if every == 0 {
		every = 2 * time.Second
	}
	cfg := fmt.Sprintf(`log_level  = "DEBUG"
plugin_dir = %s

nomad {
  address = %s
}

http {
  bind_address = "127.0.0.1"
  bind_port    = %d
}

policy {
  dir                         = %s
  default_evaluation_interval = %q
  default_cooldown            = "5s"
}

%s
`, hclString(o.PluginDir), hclString(c.server.HTTPAddr()), port, hclString(policyDir), every.String(), o.HCL)
	cfgPath := filepath.Join(a.dir, "autoscaler.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	proc, err := c.startProcess("nomad-autoscaler", a.dir, bin, "agent", "-config", cfgPath)
	if err != nil {
		t.Fatalf("e2e: %v", err)
	}
	a.process = proc
	if err := proc.waitHTTP(fmt.Sprintf("http://127.0.0.1:%d/v1/health", port), agentServeTimeout); err != nil {
		t.Fatalf("e2e: %v", err)
	}
	return a
}
