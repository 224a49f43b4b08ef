package driver

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/cgroups"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// TaskStats samples the task's cgroup once per interval until it exits.
func (d *Driver) TaskStats(ctx context.Context, id string, interval time.Duration) (<-chan *drivers.TaskResourceUsage, error) {
	t := d.store.get(id)
	if t == nil {
		return nil, fmt.Errorf("task %s: %w", id, drivers.ErrTaskNotFound)
	}
	if interval <= 0 {
		interval = time.Second
	}
	ch := make(chan *drivers.TaskResourceUsage, 1)
	go func() {
		defer close(ch)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		var prev cpuSample
		for {
			u, cur := t.usage(prev)
			prev = cur
			select {
			case ch <- u:
			case <-ctx.Done():
				return
			case <-t.done:
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			case <-t.done:
				return
			}
		}
	}()
	return ch, nil
}

type cpuSample struct {
	at               time.Time
	total, user, sys uint64 // ns
}

// usage builds one sample; CPU percentages need the previous sample.
func (t *task) usage(prev cpuSample) (*drivers.TaskResourceUsage, cpuSample) {
	now := time.Now()
	u := &drivers.TaskResourceUsage{Timestamp: now}
	if t.group == nil {
		return u, prev
	}
	st, err := t.group.Stats()
	if err != nil {
		return u, prev
	}
	cur := cpuSample{at: now, total: st.CPUTotalNanos, user: st.CPUUserNanos, sys: st.CPUSystemNanos}
	cpu := &u.Usage.CPU
	cpu.ThrottledPeriods, cpu.ThrottledTime = st.ThrottledPeriods, st.ThrottledNanos
	cpu.Measured = []string{drivers.CPUThrottledPeriods, drivers.CPUThrottledTime}
	if !prev.at.IsZero() && now.After(prev.at) {
		wall := float64(now.Sub(prev.at).Nanoseconds())
		pct := func(a, b uint64) float64 {
			if a < b {
				return 0
			}
			return float64(a-b) / wall * 100
		}
		cpu.Percent = pct(cur.total, prev.total)
		cpu.UserMode = pct(cur.user, prev.user)
		cpu.SystemMode = pct(cur.sys, prev.sys)
		// Nomad expresses CPU use in MHz, comparable with the task's cpu
		// reservation: the share of one core times one core's MHz.
		cpu.TotalTicks = cpu.Percent / 100 * coreMHz()
		cpu.Measured = append(cpu.Measured, drivers.CPUPercent, drivers.CPUUserMode, drivers.CPUSystemMode, drivers.CPUTotalTicks)
	}
	mem := &u.Usage.Memory
	mem.RSS, mem.Cache, mem.Usage, mem.MaxUsage = st.MemoryRSS, st.MemoryCache, st.MemoryUsage, st.MemoryMaxUsage
	mem.Swap, mem.KernelUsage = st.MemorySwap, st.KernelUsage
	for _, m := range st.Measured {
		switch m {
		case cgroups.MeasuredRSS:
			mem.Measured = append(mem.Measured, drivers.MemRSS)
		case cgroups.MeasuredCache:
			mem.Measured = append(mem.Measured, drivers.MemCache)
		case cgroups.MeasuredUsage:
			mem.Measured = append(mem.Measured, drivers.MemUsage)
		case cgroups.MeasuredMaxUsage:
			mem.Measured = append(mem.Measured, drivers.MemMaxUsage)
		case cgroups.MeasuredSwap:
			mem.Measured = append(mem.Measured, drivers.MemSwap)
		case cgroups.MeasuredKernelUsage:
			mem.Measured = append(mem.Measured, drivers.MemKernelUsage)
		}
	}
	return u, cur
}

var (
	coreMHzOnce sync.Once
	coreMHzVal  float64
)

// coreMHz is one core's clock as /proc/cpuinfo reports it (the average);
// 1000 where it reports none (some virtual machines and arm64).
func coreMHz() float64 {
	coreMHzOnce.Do(func() {
		coreMHzVal = 1000
		f, err := os.Open("/proc/cpuinfo")
		if err != nil {
			return
		}
		defer f.Close()
		var sum float64
		var n int
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok || strings.TrimSpace(k) != "cpu MHz" {
				continue
			}
			if mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				sum += mhz
				n++
			}
		}
		if n > 0 {
			coreMHzVal = sum / float64(n)
		}
	})
	return coreMHzVal
}
