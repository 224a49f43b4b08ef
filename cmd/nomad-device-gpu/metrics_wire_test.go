package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// freeAddr is a loopback address nothing listens on (now).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrapeSoon fetches /metrics, retrying while the plugin starts to listen.
func scrapeSoon(t *testing.T, addr string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /metrics: %s", resp.Status)
			}
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing serves %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// As the agent launches it: the validation SetConfigs (without the
// agent's Nomad config) do not bind, the runtime one does.
func TestMetricsServedByTheRuntimeInstanceOnly(t *testing.T) {
	addr := freeAddr(t)
	cfg := simConfig("")
	cfg["metrics"] = map[string]any{"address": addr, "node_name": "wire-node"}
	cfg["nomad"] = map[string]any{"address": notFoundServer(t)}
	validation := launch(t)
	for i := 0; i < 2; i++ {
		if err := validation.setConfig(t, cfg, false); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if listening(addr) {
		t.Fatal("a validation launch listens on metrics.address")
	}
	validation.Client.Kill()

	runtime := launch(t)
	if err := runtime.setConfig(t, cfg, true); err != nil {
		t.Fatal(err)
	}
	body := scrapeSoon(t, addr)
	for _, want := range []string{`nomad_gpu_device_info{`, `host="wire-node"`, `device_type="mig"`, `device_type="mps"`, `nomad_gpu_device_allocations_known{host="wire-node"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Reconfigured without metrics: nothing listens.
	delete(cfg, "metrics")
	if err := runtime.setConfig(t, cfg, true); err != nil {
		t.Fatal(err)
	}
	if listening(addr) {
		t.Fatal("still listening with metrics unset")
	}
}

// notFoundServer is a Nomad API address of the test's own that knows
// nothing: a plugin with metrics on reads Nomad, and the default address
// 127.0.0.1:4646 may be a make dev agent's.
func notFoundServer(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	return srv.URL
}
