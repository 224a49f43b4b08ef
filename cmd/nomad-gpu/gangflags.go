package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/nomad-gpu/nomad-gpu/controller"
)

// gangFlags are the gang module's flags.
type gangFlags struct {
	on, reserve bool
	config      controller.GangConfig
	reserveCfg  controller.ReserveConfig
}

func (g *gangFlags) add(fs *flag.FlagSet) {
	d := controller.DefaultGangConfig()
	fs.BoolVar(&g.on, "gangs", true, `admit gang jobs (job meta nomad_gpu_gang = "true", groups at count 0) all or nothing, on Nomad's own plan`)
	fs.DurationVar(&g.config.AdmitTimeout, "gang-admit-timeout", d.AdmitTimeout, "the longest an admitted gang may have a member not running while another holds GPUs before it is rolled back to count 0")
	fs.DurationVar(&g.config.RetryMin, "gang-retry", d.RetryMin, "the first wait before a rolled-back gang is planned again; it doubles up to an hour")
	fs.DurationVar(&g.config.KeepEvery, "gang-keep", d.KeepEvery, "how often a waiting gang is evaluated again so that Nomad does not garbage-collect it as a dead batch job: keep it below the servers' job_gc_threshold (4h by default)")
	g.config.RetryMax = d.RetryMax
	fs.BoolVar(&g.reserve, "reservations", false, "keep the nodes expected to free soonest for the gang, or the job asking several GPUs an allocation, at the head of the queue, with a placeholder job one above its priority (docs/controller.md, reservations); off until backfill is applied and the trace replay weighs it")
	fs.DurationVar(&g.reserveCfg.MaxHold, "reserve-max-hold", controller.DefaultReserveConfig().MaxHold, "the longest a reservation holds; its gang is not kept again for as long")
}

// gangs checks the flags; nil when -gangs=false.
func (g *gangFlags) gangs() (*controller.GangConfig, error) {
	if !g.on {
		return nil, nil
	}
	switch {
	case g.config.AdmitTimeout < time.Second || g.config.AdmitTimeout > time.Hour:
		return nil, fmt.Errorf("-gang-admit-timeout: %s; allowed: 1s to 1h", g.config.AdmitTimeout)
	case g.config.RetryMin < time.Second || g.config.RetryMin > g.config.RetryMax:
		return nil, fmt.Errorf("-gang-retry: %s; allowed: 1s to %s", g.config.RetryMin, g.config.RetryMax)
	case g.config.KeepEvery < time.Second || g.config.KeepEvery > 24*time.Hour:
		return nil, fmt.Errorf("-gang-keep: %s; allowed: 1s to 24h", g.config.KeepEvery)
	}
	c := g.config
	if g.reserve {
		if g.reserveCfg.MaxHold < time.Minute || g.reserveCfg.MaxHold > 24*time.Hour {
			return nil, fmt.Errorf("-reserve-max-hold: %s; allowed: 1m to 24h", g.reserveCfg.MaxHold)
		}
		r := g.reserveCfg
		c.Reserve = &r
	}
	return &c, nil
}
