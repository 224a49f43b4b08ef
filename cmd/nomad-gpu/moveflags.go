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
	on           bool
	pools        string
	scaleInPools string
	config       controller.MoveConfig
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
	fs.StringVar(&m.scaleInPools, "scale-in-pools", "", "node pools, each alone or with a node class (pool/class: one scaling policy's nodes), whose surplus nodes are emptied for the autoscaler to remove (scale-in by consolidation), comma-separated; none: off")
	fs.DurationVar(&m.config.ScaleIn.Quiet, "scale-in-quiet", 10*time.Minute, "how long no queued allocation could use a node before its work is moved off it for scale-in")
	fs.IntVar(&m.config.ScaleIn.MinNodes, "scale-in-min-nodes", 0, "schedulable GPU nodes each of -scale-in-pools keeps: the scaling policy's min")
	fs.DurationVar(&m.config.ScaleIn.Wait, "scale-in-wait", 15*time.Minute, "the longest a node emptied for removal waits for the autoscaler before it takes work again")
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
	if err := checkScaleIn(m.config.ScaleIn); err != nil {
		return nil, err
	}
	c := m.config
	var err error
	if c.Pools, err = poolNames(m.pools); err != nil {
		return nil, err
	}
	if c.ScaleIn.Groups, err = nodeGroups(m.scaleInPools); err != nil {
		return nil, err
	}
	return &c, nil
}

// nodeGroups is -scale-in-pools: node pools, each alone or with a node
// class ("training/gpu-burst").
func nodeGroups(list string) ([]controller.NodeGroup, error) {
	var out []controller.NodeGroup
	for _, g := range strings.Split(list, ",") {
		g = strings.TrimSpace(g)
		if g == "" {
			continue
		}
		pool, class, withClass := strings.Cut(g, "/")
		if !poolName(pool) || withClass && !poolName(class) {
			return nil, fmt.Errorf("-scale-in-pools: %q is not a node pool or pool/class; allowed: comma-separated, such as training,hpc/gpu-burst", g)
		}
		out = append(out, controller.NodeGroup{Pool: pool, Class: class})
	}
	return out, nil
}

// poolNames is -move-pools: comma-separated node pool names.
func poolNames(list string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !poolName(p) {
			return nil, fmt.Errorf("-move-pools: %q is not a node pool name; allowed: names, comma-separated, such as training,hpc", p)
		}
		out = append(out, p)
	}
	return out, nil
}

// poolName says whether s may name a node pool (or a node class).
func poolName(s string) bool { return s != "" && !strings.ContainsAny(s, " =*/") }

// checkScaleIn checks the scale-in flags.
func checkScaleIn(s controller.ScaleInConfig) error {
	switch {
	case s.Quiet < time.Second || s.Quiet > 24*time.Hour:
		return fmt.Errorf("-scale-in-quiet: %s; allowed: 1s to 24h", s.Quiet)
	case s.MinNodes < 0 || s.MinNodes > 100000:
		return fmt.Errorf("-scale-in-min-nodes: %d; allowed: 0 to 100000", s.MinNodes)
	case s.Wait < time.Second || s.Wait > 24*time.Hour:
		return fmt.Errorf("-scale-in-wait: %s; allowed: 1s to 24h", s.Wait)
	}
	return nil
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
