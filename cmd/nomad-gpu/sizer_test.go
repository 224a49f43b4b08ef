package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

// The module flags as the controller and the sizer's dry run both take
// them: errors name the flag and what it allows.
func TestModuleFlags(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"-priority-tiers", "40,70"}, `-priority-tiers: "40,70": bounds must decrease: 70 after 40; allowed: decreasing lower bounds`},
		{[]string{"-max-priority", "101"}, "-max-priority: 101; allowed: 1 to 100"},
		{[]string{"-deadline-lead", "-1s"}, "-deadline-lead: -1s; allowed: 0 or more"},
		{[]string{"-raise-every", "-1s"}, "-raise-every: -1s; allowed: 0 or more"},
		{[]string{"-forecast-window", "0s"}, "-forecast-window: 0s; allowed: 1m or more"},
		{[]string{"-sizing-interval", "500ms"}, "-sizing-interval: 500ms; allowed: 1s or more"},
		{[]string{"-window", "0s"}, "-window: 0s; allowed: more than 0"},
		{[]string{"-history", "h.db", "-window", "48h", "-retention", "24h"}, "-retention: 24h0m0s; allowed: at least -window (48h0m0s)"},
		{[]string{"-min-samples", "0"}, "-min-samples: 0; allowed: 1 or more"},
		{[]string{"-min-span", "-1m"}, "-min-span: -1m0s; allowed: 0 or more"},
	}
	for _, c := range cases {
		t.Run(c.args[0], func(t *testing.T) {
			if _, err := parseControllerFlags(c.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("controller %v: error %v, want %q", c.args, err, c.wantErr)
			}
			if _, _, err := parseSizerFlags(append([]string{"-dry-run"}, c.args...), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("sizer %v: error %v, want %q", c.args, err, c.wantErr)
			}
		})
	}
}

// Which modules the flags turn on.
func TestModuleFlagsConfig(t *testing.T) {
	prom := controller.SizingConfig{Prometheus: "http://prom:9090", Interval: 30 * time.Second, Window: 6 * time.Hour,
		Retention: history.DefaultRetention, Thresholds: sizing.DefaultThresholds}
	cases := []struct {
		name      string
		args      []string
		deadlines *sizing.DeadlineConfig
		sizing    *controller.SizingConfig
	}{
		{"defaults: deadlines, no sizing", nil, &sizing.DefaultDeadlines, nil},
		{"deadlines off", []string{"-deadlines=false"}, nil, nil},
		{"tiers and lead", []string{"-priority-tiers", "80,50,20", "-deadline-lead", "1m"},
			&sizing.DeadlineConfig{Tiers: []int{80, 50, 20}, MaxPriority: 90, Lead: time.Minute, RaiseEvery: time.Minute}, nil},
		{"prometheus turns sizing on", []string{"-prometheus", "http://prom:9090", "-sizing-interval", "30s"}, &sizing.DefaultDeadlines, &prom},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, err := parseControllerFlags(c.args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := fmtPtr(o.cfg.Deadlines), fmtPtr(c.deadlines); got != want {
				t.Errorf("deadlines %s, want %s", got, want)
			}
			if got, want := fmtPtr(o.cfg.Sizing), fmtPtr(c.sizing); got != want {
				t.Errorf("sizing %s, want %s", got, want)
			}
			if o.cfg.FinishedWindow != 24*time.Hour {
				t.Errorf("finished window %s, want the default 24h", o.cfg.FinishedWindow)
			}
		})
	}
}

func fmtPtr[T any](p *T) string {
	if p == nil {
		return "off"
	}
	return fmt.Sprintf("%+v", *p)
}

func TestSizerFlags(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
	}{
		{nil, "-dry-run is required: the sizer's loop moved into nomad-gpu controller"},
		{[]string{"-history", "h.db"}, "-dry-run is required"},
		{[]string{"-dry-run", "extra"}, `unexpected argument "extra"`},
		{[]string{"-dry-run", "-log-level", "loud"}, `-log-level: "loud"; allowed: trace, debug, info, warn, error`},
		{[]string{"-dry-run", "-once", "-history", "h.db", "-sizing-interval", "30s"}, ""},
	}
	for _, c := range cases {
		_, cfg, err := parseSizerFlags(c.args, &bytes.Buffer{})
		if c.wantErr == "" {
			if err != nil || cfg.Sizing == nil || cfg.Sizing.History != "h.db" || cfg.Deadlines == nil {
				t.Errorf("%v: %+v, %v", c.args, cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.wantErr)
		}
	}
}
