package gpuqueue

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

func TestBadConfig(t *testing.T) {
	cases := []struct {
		key, value, want string
	}{
		{"signal", "queue", `gpu-queue: signal: "queue" must be one of "nodes_needed", "queued", "wait", "util", "nodes", "removable"`},
		{"pool", strings.Repeat("p", 201), `gpu-queue: pool: "ppp`},
		{"activation", "0", `gpu-queue: activation: "0" must be a positive number`},
		{"activation", "five", `gpu-queue: activation: "five" must be a positive number`},
		{"activation", "NaN", `gpu-queue: activation: "NaN" must be a positive number`},
		{"max_wait", "30", `gpu-queue: max_wait: "30" must be a duration of at least 1s such as "30m", or "0" to turn it off`},
		{"max_wait", "-5m", `gpu-queue: max_wait: "-5m" must be a duration`},
		{"max_wait", "10ms", `gpu-queue: max_wait: "10ms" must be a duration of at least 1s`},
		{"max_scale_up", "-1", `gpu-queue: max_scale_up: "-1" must be a positive integer`},
		{"max_scale_up", "0", `gpu-queue: max_scale_up: "0" must be a positive integer`},
		{"max_scale_up", "2.5", `gpu-queue: max_scale_up: "2.5" must be a positive integer`},
		{"max_scale_down", "-1", `gpu-queue: max_scale_down: "-1" must be a positive integer`},
		{"max_scale_down", "lots", `gpu-queue: max_scale_down: "lots" must be a positive integer`},
		{"floor", "120", `gpu-queue: floor: "120" must be a percentage from 0 to 100 (0 turns scale-in off)`},
		{"floor", "-1", `gpu-queue: floor: "-1" must be a percentage from 0 to 100`},
		{"floor", "0.3x", `gpu-queue: floor: "0.3x" must be a percentage`},
		{"scale_in_after", "0", `gpu-queue: scale_in_after: "0" must be a duration of at least 1s such as "10m"`},
		{"scale_in_after", "ten minutes", `gpu-queue: scale_in_after: "ten minutes" must be a duration`},
		{"boot_time", "-1m", `gpu-queue: boot_time: "-1m" must be a duration of at least 1s such as "5m", or "0" to turn in-flight accounting off`},
		{"boot_time", "5", `gpu-queue: boot_time: "5" must be a duration`},
		{"lookahead", "yes please", `gpu-queue: lookahead: "yes please" must be true or false`},
		{"max_step", "-1", `gpu-queue: unknown key "max_step"; allowed: signal, pool, activation, max_wait, max_scale_up, max_scale_down, floor, scale_in_after, boot_time, lookahead`},
	}
	for _, c := range cases {
		t.Run(c.key+"="+c.value, func(t *testing.T) {
			s := New(nil)
			a, err := s.Run(autoscaler.Check{Name: "c", Config: map[string]string{c.key: c.value}},
				[]autoscaler.Metric{{Time: t0, Value: 1}}, 1)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run: got %v\nwant %s", err, c.want)
			}
			if !a.Error || a.Direction != autoscaler.DirectionNone || a.Reason != err.Error() {
				t.Fatalf("Run: action on error %+v", a)
			}
			if c.key == "signal" || c.key == "pool" {
				return
			}
			err = s.SetConfig(map[string]string{c.key: c.value})
			want := c.want
			if c.key == "max_step" {
				want = `gpu-queue: unknown key "max_step"; allowed: activation, max_wait,`
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("SetConfig: got %v\nwant %s", err, want)
			}
		})
	}

	t.Run("every bad key is named", func(t *testing.T) {
		_, err := New(nil).Run(autoscaler.Check{Config: map[string]string{"floor": "x", "max_wait": "y", "zz": "1", "aa": "2"}},
			[]autoscaler.Metric{{Value: 1}}, 1)
		for _, want := range []string{`unknown keys "aa", "zz"`, "floor:", "max_wait:"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want %s", err, want)
			}
		}
	})
	t.Run("lookahead needs boot_time", func(t *testing.T) {
		want := "gpu-queue: lookahead: needs boot_time above 0"
		_, err := New(nil).Run(autoscaler.Check{Config: map[string]string{"lookahead": "true", "boot_time": "0"}}, []autoscaler.Metric{{Value: 1}}, 1)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Run: got %v", err)
		}
		if err := New(nil).SetConfig(map[string]string{"lookahead": "true", "boot_time": "0"}); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("SetConfig: got %v", err)
		}
		// across checks of a pool: boot_time 0 on one, lookahead on another
		h := newHarness(t, []testCheck{
			check("capacity", SignalNodesNeeded, "pool", "gpu", "boot_time", "0"),
			check("queue", SignalQueued, "pool", "gpu", "lookahead", "true"),
		})
		h.clock = t0
		run := func(c testCheck) error {
			_, err := h.s.Run(autoscaler.Check{Name: c.name, Query: c.query, Config: c.cfg}, []autoscaler.Metric{{Time: h.clock, Value: 1}}, 1)
			return err
		}
		run(h.checks[0])
		if err := run(h.checks[1]); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("pool: got %v", err)
		}
	})
	t.Run("signal and pool belong to checks", func(t *testing.T) {
		for _, k := range []string{"signal", "pool"} {
			err := New(nil).SetConfig(map[string]string{k: "util"})
			if err == nil || !strings.Contains(err.Error(), "gpu-queue: "+k+": belongs in each check's strategy block") {
				t.Fatalf("%s: got %v", k, err)
			}
		}
	})
	t.Run("checks of a pool that disagree", func(t *testing.T) {
		s := New(nil)
		s.now = func() time.Time { return t0 }
		run := func(name, sig, mw string) error {
			_, err := s.Run(autoscaler.Check{Name: name, Config: map[string]string{"signal": sig, "pool": "gpu", "max_wait": mw}},
				[]autoscaler.Metric{{Time: t0, Value: 1}}, 1)
			return err
		}
		if err := run("capacity", "nodes_needed", "30m"); err != nil {
			t.Fatal(err)
		}
		if err := run("wait", "wait", "1800s"); err != nil {
			t.Fatalf("equal values written differently: %v", err)
		}
		err := run("queue", "queued", "45m")
		want := `gpu-queue: max_wait: checks "capacity" (30m0s) and "queue" (45m0s) of pool "gpu" disagree; set it on one check`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v\nwant %s", err, want)
		}
	})
	t.Run("bad metrics and counts", func(t *testing.T) {
		s := New(nil)
		if _, err := s.Run(autoscaler.Check{Name: "c"}, []autoscaler.Metric{{Value: 1}}, -1); err == nil || !strings.Contains(err.Error(), "count -1 is negative") {
			t.Fatalf("got %v", err)
		}
		nan := 0.0
		nan /= nan
		if _, err := s.Run(autoscaler.Check{Name: "c"}, []autoscaler.Metric{{Value: nan}}, 1); err == nil || !strings.Contains(err.Error(), "is not a number") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestGoodConfig(t *testing.T) {
	all := map[string]string{
		"activation": "5", "max_wait": "30m", "max_scale_up": "4", "max_scale_down": "2", "floor": "30",
		"scale_in_after": "15m", "boot_time": "5m", "lookahead": "true",
		// the agent's keys are ignored
		"nomad_address": "http://127.0.0.1:4646", "nomad_token": "x", "nomad_config_inherit": "true", "nomad_skip-verify": "false",
	}
	s := New(nil)
	if err := s.SetConfig(all); err != nil {
		t.Fatal(err)
	}
	want := rules{Activation: 5, MaxWait: 30 * time.Minute, MaxScaleUp: 4, MaxScaleDown: 2, Floor: 30,
		ScaleInAfter: 15 * time.Minute, BootTime: 5 * time.Minute, Lookahead: true}
	if s.defaults != want {
		t.Fatalf("got %+v", s.defaults)
	}
	cfg := map[string]string{"signal": "queued", "pool": "gpu", "floor": "0", "max_wait": "0", "boot_time": "0", "lookahead": "false"}
	for k, v := range all {
		if _, set := cfg[k]; !set {
			cfg[k] = v
		}
	}
	if _, err := s.Run(autoscaler.Check{Name: "q", Config: cfg}, []autoscaler.Metric{{Value: 1}}, 1); err != nil {
		t.Fatal(err)
	}
	// A failed SetConfig keeps the previous config.
	if err := s.SetConfig(map[string]string{"floor": "x"}); err == nil || s.defaults != want {
		t.Fatalf("got %v, %+v", err, s.defaults)
	}
	// Empty config: the defaults.
	if err := s.SetConfig(nil); err != nil || s.defaults != defaultRules {
		t.Fatalf("got %v, %+v", err, s.defaults)
	}
}
