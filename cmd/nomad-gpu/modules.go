package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/nomad-gpu/nomad-gpu/autoscaler/apm"
	"github.com/nomad-gpu/nomad-gpu/controller"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing/history"
)

// moduleFlags are the flags of the controller's deadline and sizing
// modules, shared by `controller` and `sizer -dry-run`, which shows what
// they would do.
type moduleFlags struct {
	deadlines      bool
	tiers          string
	deadline       sizing.DeadlineConfig
	finishedWindow time.Duration
	sizing         controller.SizingConfig
}

func (m *moduleFlags) add(fs *flag.FlagSet) {
	d := sizing.DefaultDeadlines
	fs.BoolVar(&m.deadlines, "deadlines", true, "raise queued jobs that would miss their meta nomad_gpu_deadline a priority tier, until they start")
	fs.StringVar(&m.tiers, "priority-tiers", "70,40", "priority tiers' lower bounds, decreasing (as the APM's priority_tiers): a deadline raise goes one tier up")
	fs.IntVar(&m.deadline.MaxPriority, "max-priority", d.MaxPriority, "the highest priority a deadline raise gives (1 to 100)")
	fs.DurationVar(&m.deadline.Lead, "deadline-lead", d.Lead, "the wait assumed for a queued job whose wait cannot be predicted")
	fs.DurationVar(&m.deadline.RaiseEvery, "raise-every", d.RaiseEvery, "least time between two deadline raises of one job")
	fs.DurationVar(&m.finishedWindow, "forecast-window", 24*time.Hour, "how far back finished allocations are read: what predicts a queued job's wait, and the sizer's runs without -history")
	s := &m.sizing
	fs.StringVar(&s.History, "history", "", "right-sizing: the history file (bbolt; created if missing); only the leader opens it, so replicas share it through a host volume, or use -prometheus")
	fs.StringVar(&s.Prometheus, "prometheus", "", "right-sizing: read utilisation and memory from this Prometheus (the gpu driver's task metrics); without -history, runs are what Nomad remembers and the controller keeps no file")
	fs.DurationVar(&s.Interval, "sizing-interval", time.Minute, "time between sizing rounds: the sample rate of the history")
	fs.DurationVar(&s.Window, "window", 6*time.Hour, "how far back a recommendation reads")
	fs.DurationVar(&s.Retention, "retention", history.DefaultRetention, "how long the history file keeps samples and finished runs")
	s.Thresholds = sizing.DefaultThresholds
	fs.IntVar(&s.Thresholds.MinSamples, "min-samples", s.Thresholds.MinSamples, "samples a task needs before it is resized")
	fs.DurationVar(&s.Thresholds.MinSpan, "min-span", s.Thresholds.MinSpan, "time its samples must span before it is resized")
}

// apply checks the flags and sets the modules of cfg: deadlines unless
// -deadlines=false, sizing when -history or -prometheus names a history.
func (m *moduleFlags) apply(cfg *controller.Config) error {
	if err := m.check(); err != nil {
		return err
	}
	cfg.FinishedWindow = m.finishedWindow
	if m.deadlines {
		d := m.deadline
		cfg.Deadlines = &d
	}
	if m.sizing.History != "" || m.sizing.Prometheus != "" {
		s := m.sizing
		cfg.Sizing = &s
	}
	return nil
}

func (m *moduleFlags) check() error {
	tiers, err := apm.ParseTiers(m.tiers)
	if err != nil {
		return fmt.Errorf("-priority-tiers: %q: %v; allowed: decreasing lower bounds such as 70,40", m.tiers, err)
	}
	m.deadline.Tiers = tiers
	s := m.sizing
	switch {
	case m.deadline.MaxPriority < 1 || m.deadline.MaxPriority > 100:
		return fmt.Errorf("-max-priority: %d; allowed: 1 to 100 (Nomad's job priorities)", m.deadline.MaxPriority)
	case m.deadline.Lead < 0:
		return fmt.Errorf("-deadline-lead: %s; allowed: 0 or more", m.deadline.Lead)
	case m.deadline.RaiseEvery < 0:
		return fmt.Errorf("-raise-every: %s; allowed: 0 or more", m.deadline.RaiseEvery)
	case m.finishedWindow < time.Minute:
		return fmt.Errorf("-forecast-window: %s; allowed: 1m or more", m.finishedWindow)
	case s.Interval < time.Second:
		return fmt.Errorf("-sizing-interval: %s; allowed: 1s or more", s.Interval)
	case s.Window <= 0:
		return fmt.Errorf("-window: %s; allowed: more than 0", s.Window)
	case s.History != "" && s.Retention < s.Window:
		return fmt.Errorf("-retention: %s; allowed: at least -window (%s), or recommendations read history already dropped", s.Retention, s.Window)
	case s.Thresholds.MinSamples < 1:
		return fmt.Errorf("-min-samples: %d; allowed: 1 or more", s.Thresholds.MinSamples)
	case s.Thresholds.MinSpan < 0:
		return fmt.Errorf("-min-span: %s; allowed: 0 or more", s.Thresholds.MinSpan)
	}
	return nil
}
