package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller"
)

// moveFlags are the controller's move module flags.
type moveFlags struct {
	on     bool
	pools  string
	config controller.MoveConfig
}

func (m *moveFlags) add(fs *flag.FlagSet) {
	fs.BoolVar(&m.on, "moves", true, "move checkpointing batch work that opted in (job meta "+controller.MetaMovable+` = "true", or -move-pools) to free a node for a queued multi-GPU allocation`)
	fs.StringVar(&m.pools, "move-pools", "", `node pools whose jobs are movable unless their meta says "false", comma-separated`)
	fs.IntVar(&m.config.PerHour, "move-budget-hour", 4, "most rounds of moves in any hour: a consolidation (moving what one node needs freed), or a relief (one client off an overloaded MPS GPU)")
	fs.IntVar(&m.config.PerJobPerDay, "move-budget-job-day", 3, "most moves of one job's allocations in any 24 hours")
	fs.DurationVar(&m.config.Settle, "move-settle", 2*time.Minute, "how long a consolidation waits for the allocation it freed a node for to run before another is planned")
	fs.DurationVar(&m.config.HoldMax, "move-hold", 30*time.Second, "the longest a node being freed stays ineligible while the allocations moved off it are placed elsewhere (relief: the longest a GPU is held for the servers to see it held, and again for the moved client to be placed)")
	fs.Float64Var(&m.config.Relief.High, "relief-high", 80, "an MPS GPU above this utilisation, percent of its SMs (all its clients), for -relief-window is overloaded: a movable client moves off it; 0 turns relief off")
	fs.Float64Var(&m.config.Relief.Low, "relief-low", 40, "an MPS GPU below this utilisation, percent, with free shares enough, shows a client of an overloaded GPU can move")
	fs.DurationVar(&m.config.Relief.Window, "relief-window", 5*time.Minute, "how long an MPS GPU stays above -relief-high before a client moves off it")
	fs.DurationVar(&m.config.Relief.Interval, "relief-interval", 15*time.Second, "how often the utilisation of MPS GPUs with clients is read (Nomad's node stats, one call per node)")
}

// moves checks the flags; nil when -moves=false.
func (m *moveFlags) moves() (*controller.MoveConfig, error) {
	if !m.on {
		return nil, nil
	}
	switch {
	case m.config.PerHour < 1 || m.config.PerHour > 1000:
		return nil, fmt.Errorf("-move-budget-hour: %d; allowed: 1 to 1000 (-moves=false turns moving off)", m.config.PerHour)
	case m.config.PerJobPerDay < 1 || m.config.PerJobPerDay > 1000:
		return nil, fmt.Errorf("-move-budget-job-day: %d; allowed: 1 to 1000", m.config.PerJobPerDay)
	case m.config.Settle < time.Second || m.config.Settle > time.Hour:
		return nil, fmt.Errorf("-move-settle: %s; allowed: 1s to 1h", m.config.Settle)
	case m.config.HoldMax < time.Second || m.config.HoldMax > 10*time.Minute:
		return nil, fmt.Errorf("-move-hold: %s; allowed: 1s to 10m", m.config.HoldMax)
	}
	if err := checkRelief(m.config.Relief); err != nil {
		return nil, err
	}
	c := m.config
	for _, p := range strings.Split(m.pools, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if strings.ContainsAny(p, " =*") {
			return nil, fmt.Errorf("-move-pools: %q is not a node pool name; allowed: names, comma-separated, such as training,hpc", p)
		}
		c.Pools = append(c.Pools, p)
	}
	return &c, nil
}

// checkRelief checks the relief flags; High 0 (off) checks nothing else.
func checkRelief(r controller.ReliefConfig) error {
	switch {
	case r.High == 0:
		return nil
	case r.High < 0 || r.High > 100:
		return fmt.Errorf("-relief-high: %v; allowed: 0 (off) to 100", r.High)
	case r.Low < 0 || r.Low >= r.High:
		return fmt.Errorf("-relief-low: %v; allowed: 0 to below -relief-high (%v)", r.Low, r.High)
	case r.Window < 0 || r.Window > 24*time.Hour:
		return fmt.Errorf("-relief-window: %s; allowed: 0s to 24h", r.Window)
	case r.Interval < time.Second || r.Interval > 10*time.Minute:
		return fmt.Errorf("-relief-interval: %s; allowed: 1s to 10m", r.Interval)
	}
	return nil
}
