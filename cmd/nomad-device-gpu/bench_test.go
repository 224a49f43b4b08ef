package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	devicepb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/device"
)

// BenchmarkPluginResidentMemory reports the built plugin's resident memory
// (target: under 40 MiB) after it has fingerprinted and streamed stats for
// 56 MIG instances at a fast interval, as a busy agent would drive it.
func BenchmarkPluginResidentMemory(b *testing.B) {
	c := launch(b)
	cfg := simConfig(filepath.Join(b.TempDir(), "control.json"))
	cfg["sim"].(map[string]any)["mig"] = []map[string]any{{
		"gpus":     []int{0, 1, 2, 3, 4, 5, 6, 7},
		"profiles": []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"},
	}}
	delete(cfg, "mps")
	if err := c.setConfig(b, cfg, true); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fp, err := c.device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := fp.Recv(); err != nil {
		b.Fatal(err)
	}
	st, err := c.device.Stats(ctx, &devicepb.StatsRequest{CollectionInterval: durationpb.New(20 * time.Millisecond)})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	samples := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); samples++ {
		if _, err := st.Recv(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	rss, err := residentMiB(c.pid)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rss, "MiB-rss")
	b.ReportMetric(float64(samples), "stats-samples")
}

func residentMiB(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}
