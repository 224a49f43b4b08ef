package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
	basepb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/base"
	"github.com/nomad-gpu/nomad-gpu/wire/wiretest"
)

// As the agent launches it: the validation SetConfigs (without the
// agent's Nomad config) do not bind metrics.address, the runtime one does.
func TestDriverMetricsServedByTheRuntimeInstanceOnly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	// Task users must pass through to the checkpoint root (t.TempDir's
	// parent is 0700), or the driver refuses it.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// Not the default 127.0.0.1:4646, which may be a make dev agent's.
	nomad := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(nomad.Close)
	cfg := map[string]any{
		"state_dir":  filepath.Join(dir, "state"),
		"checkpoint": map[string]any{"root": filepath.Join(dir, "checkpoints")},
		"mps":        map[string]any{"pipe_root": filepath.Join(dir, "mps"), "log_root": filepath.Join(dir, "log")},
		"gpu":        map[string]any{"backend": "sim", "sim": map[string]any{"system": "dgxa100", "seed": "wire"}},
		"metrics":    map[string]any{"address": addr},
		"nomad":      map[string]any{"address": nomad.URL},
	}
	p := wiretest.Launch(t, pluginBinary, drivers.PluginSet(nil, nil), "driver")
	for i := 0; i < 2; i++ {
		if err := p.SetConfig(t, cfg, nil); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("a validation launch listens on metrics.address")
	}
	if err := p.SetConfig(t, cfg, &basepb.NomadConfig{Driver: &basepb.NomadDriverConfig{ClientMinPort: 14000, ClientMaxPort: 14512}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "text/plain") {
				t.Fatalf("GET /metrics: %s %q: %.200s", resp.Status, resp.Header.Get("Content-Type"), b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing serves %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
