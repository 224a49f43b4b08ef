package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller"
)

// Bad flags exit 2 with the flag named and what is allowed.
func TestControllerFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-preemption-cooldown", "-1m"}, "-preemption-cooldown: -1m0s; allowed: 0 (off) or more"},
		{[]string{"-lock-ttl", "15s"}, "-lock-ttl: 15s; allowed: 23s (22s + -lock-delay"},
		{[]string{"-lock-ttl", "25s", "-lock-delay", "5s"}, "-lock-ttl: 25s; allowed: 27s (22s + -lock-delay"},
		{[]string{"-lock-ttl", "49h"}, "-lock-ttl: 49h0m0s; allowed: 23s"},
		{[]string{"-lock-delay", "0s"}, "-lock-delay: 0s; allowed: more than 0"},
		{[]string{"-tick", "10ms"}, "-tick: 10ms; allowed: 100ms to 1m"},
		{[]string{"-namespace", ""}, "-namespace: empty"},
		{[]string{"-metrics-address", "nope"}, `-metrics-address: "nope"`},
		{[]string{"-log-level", "loud"}, `-log-level: "loud"; allowed: trace, debug, info, warn, error`},
		{[]string{"-min-runtime", "training"}, `-min-runtime: "training"; allowed: pool=duration`},
		{[]string{"-min-runtime", "training=soon"}, `-min-runtime: "training=soon": "soon" is not a duration above 0`},
		{[]string{"-min-runtime", "a=1m,a=2m"}, `-min-runtime: pool "a" given twice`},
		{[]string{"-min-runtime-priority", "0"}, "-min-runtime-priority: 0; allowed: 1 to 32767"},
		{[]string{"-layout-min-interval", "-1s"}, "-layout-min-interval: -1s; allowed: 0 or more"},
		{[]string{"-layout-kinds", "training"}, `-layout-kinds: "training"; allowed: pool=value`},
		{[]string{"-layout-kinds", "*=whole+time"}, `-layout-kinds: pool "*": "time" is not a layout kind; allowed: whole, mps, mig`},
		{[]string{"-layout-shares", "a=1"}, `-layout-shares: pool "a": "1" is not a share count of 2 to 48`},
		{[]string{"-layout-shares", "a=4,a=8"}, `-layout-shares: pool "a" given twice`},
		{[]string{"-layout-min-whole", "a=-1"}, `-layout-min-whole: pool "a": "-1" is not a GPU count of 0 or more`},
		{[]string{"-layout-never", "3"}, `-layout-never: "3" is not a GPU- UUID`},
		{[]string{"-move-budget-hour", "0"}, "-move-budget-hour: 0; allowed: 1 to 1000 (-moves=false turns moving off)"},
		{[]string{"-gang-admit-timeout", "0s"}, "-gang-admit-timeout: 0s; allowed: 1s to 1h"},
		{[]string{"-gang-retry", "2h"}, "-gang-retry: 2h0m0s; allowed: 1s to 1h0m0s"},
		{[]string{"-gang-keep", "0s"}, "-gang-keep: 0s; allowed: 1s to 24h"},
		{[]string{"-move-budget-job-day", "0"}, "-move-budget-job-day: 0; allowed: 1 to 1000"},
		{[]string{"-move-settle", "10ms"}, "-move-settle: 10ms; allowed: 1s to 1h"},
		{[]string{"-move-pools", "training,*"}, `-move-pools: "*" is not a node pool name`},
		{[]string{"-scale-in-pools", "gpu,a b"}, `-scale-in-pools: "a b" is not a node pool or pool/class`},
		{[]string{"-scale-in-pools", "gpu/"}, `-scale-in-pools: "gpu/" is not a node pool or pool/class`},
		{[]string{"-scale-in-quiet", "0s"}, "-scale-in-quiet: 0s; allowed: 1s to 24h"},
		{[]string{"-scale-in-min-nodes", "-1"}, "-scale-in-min-nodes: -1; allowed: 0 to 100000"},
		{[]string{"-scale-in-wait", "25h"}, "-scale-in-wait: 25h0m0s; allowed: 1s to 24h"},
		{[]string{"-relief-high", "101"}, "-relief-high: 101; allowed: 0 (off) to 100"},
		{[]string{"-relief-low", "80"}, "-relief-low: 80; allowed: 0 to below -relief-high (80)"},
		{[]string{"-relief-window", "-1s"}, "-relief-window: -1s; allowed: 0s to 24h"},
		{[]string{"-relief-interval", "100ms"}, "-relief-interval: 100ms; allowed: 1s to 10m"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr strings.Builder
			if rc := runController(tt.args, io.Discard, &stderr); rc != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", rc, stderr.String(), tt.want)
			}
		})
	}
}

func TestControllerFlags(t *testing.T) {
	o, err := parseControllerFlags([]string{"-preemption-cooldown", "10m", "-min-runtime", "training=20m, hpc=1h"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Cooldown != 10*time.Minute || o.cfg.MinRuntime["training"] != 20*time.Minute || o.cfg.MinRuntime["hpc"] != time.Hour || o.cfg.MinRuntimePriority != 100 {
		t.Errorf("parsed %+v", o.cfg)
	}
}

func TestControllerMoveFlags(t *testing.T) {
	o, err := parseControllerFlags([]string{"-move-pools", "training, hpc", "-move-budget-hour", "1", "-move-settle", "30s",
		"-scale-in-pools", "gpu, training/gpu-burst", "-scale-in-min-nodes", "2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := o.cfg.Moves
	if m == nil || !slices.Equal(m.Pools, []string{"training", "hpc"}) || m.PerHour != 1 || m.PerJobPerDay != 3 || m.Settle != 30*time.Second {
		t.Errorf("moves %+v", m)
	}
	if s := m.ScaleIn; !slices.Equal(s.Groups, []controller.NodeGroup{{Pool: "gpu"}, {Pool: "training", Class: "gpu-burst"}}) || s.MinNodes != 2 || s.Quiet != 10*time.Minute || s.Wait != 15*time.Minute {
		t.Errorf("scale-in %+v", s)
	}
	if off, err := parseControllerFlags([]string{"-moves=false"}, io.Discard); err != nil || off.cfg.Moves != nil {
		t.Errorf("-moves=false: %+v, %v", off.cfg.Moves, err)
	}
}

func TestControllerGangFlags(t *testing.T) {
	o, err := parseControllerFlags([]string{"-gang-admit-timeout", "45s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if g := o.cfg.Gangs; g == nil || g.AdmitTimeout != 45*time.Second || g.RetryMin != time.Minute || g.RetryMax != time.Hour {
		t.Errorf("gangs %+v", g)
	}
	if off, err := parseControllerFlags([]string{"-gangs=false"}, io.Discard); err != nil || off.cfg.Gangs != nil {
		t.Errorf("-gangs=false: %+v, %v", off.cfg.Gangs, err)
	}
}

// A named pool's layout bounds start from the "*" ones.
func TestControllerLayoutFlags(t *testing.T) {
	o, err := parseControllerFlags([]string{"-layout-shares", "*=4", "-layout-kinds", "training=whole", "-layout-min-whole", "*=1,inference=0",
		"-layout-never", "GPU-a, GPU-b", "-layout-min-interval", "1m"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b := o.cfg.Layouts
	if b == nil || b.MinInterval != time.Minute || b.Default.Shares != 4 || b.Default.MinWhole != 1 || len(b.Default.Allowed) != 0 || len(b.Default.Never) != 2 {
		t.Fatalf("bounds %+v", b)
	}
	tr, inf := b.Pools["training"], b.Pools["inference"]
	if tr.Shares != 4 || tr.MinWhole != 1 || len(tr.Allowed) != 1 || tr.Allowed[0] != "whole" || len(tr.Never) != 2 {
		t.Errorf("training %+v", tr)
	}
	if inf.Shares != 4 || inf.MinWhole != 0 || len(inf.Allowed) != 0 {
		t.Errorf("inference %+v", inf)
	}
	off, err := parseControllerFlags([]string{"-layouts=false"}, io.Discard)
	if err != nil || off.cfg.Layouts != nil {
		t.Errorf("-layouts=false: %+v, %v", off.cfg.Layouts, err)
	}
}

// A bad queue file exits 2 naming the file, the key path and what is
// allowed, every wrong key at once; a good one is the controller's.
func TestControllerQueuesFlag(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := write("bad.hcl", `cohort "lab" {}
queue "a" {
  namespaces    = ["a"]
  nominal       = -6
  cohort        = "lba"
}
queue "b" {
  namespaces    = ["b"]
  nominal       = 2
  cohort        = "lab"
  lending_limit = 3
}
`)
	var stderr strings.Builder
	rc := runController([]string{"-queues", bad}, io.Discard, &stderr)
	for _, want := range []string{
		`bad.hcl: queue "a": nominal: -6; allowed: 0 or more GPU-equivalents`,
		`bad.hcl: queue "a": cohort: "lba" is no cohort block; allowed: "lab"`,
		`bad.hcl: queue "b": lending_limit: 3; allowed: 0 to nominal (2)`,
	} {
		if rc != 2 || !strings.Contains(stderr.String(), want) {
			t.Errorf("exit %d, stderr %q; want 2 and %q", rc, stderr.String(), want)
		}
	}
	stderr.Reset()
	if rc := runController([]string{"-queues", filepath.Join(dir, "none.hcl")}, io.Discard, &stderr); rc != 2 || !strings.Contains(stderr.String(), "-queues: open") {
		t.Errorf("a missing file: exit %d, stderr %q", rc, stderr.String())
	}
	good := write("good.hcl", "queue \"a\" {\n  namespaces = [\"a\"]\n  nominal = 4\n}\n")
	o, err := parseControllerFlags([]string{"-queues", good}, io.Discard)
	if err != nil || o.cfg.Queues == nil || len(o.cfg.Queues.Queues) != 1 || o.cfg.Queues.Queues[0].Nominal != 4 {
		t.Errorf("a good file: %+v, %v", o, err)
	}
	stderr.Reset()
	if rc := runController([]string{"-queues", good, "-gangs=false"}, io.Discard, &stderr); rc != 2 || !strings.Contains(stderr.String(), "-queues: set with -gangs=false; allowed: -gangs on") {
		t.Errorf("queues without the gangs' gate: exit %d, stderr %q; want 2 naming -gangs", rc, stderr.String())
	}
}
