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
	fs.IntVar(&m.config.PerHour, "move-budget-hour", 4, "most consolidations (each moving what one node needs freed) in any hour")
	fs.IntVar(&m.config.PerJobPerDay, "move-budget-job-day", 3, "most moves of one job's allocations in any 24 hours")
	fs.DurationVar(&m.config.Settle, "move-settle", 2*time.Minute, "how long a consolidation waits for the allocation it freed a node for to run before another is planned")
	fs.DurationVar(&m.config.HoldMax, "move-hold", 30*time.Second, "the longest a node being freed stays ineligible while the allocations moved off it are placed elsewhere")
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
