package model

import (
	"fmt"
	"math"
	"slices"

	"github.com/nomad-gpu/nomad-gpu/tracereplay"
)

// allocPct is the pool's GPU allocation percentage, gpu_alloc_pct.
func (s *sim) allocPct() float64 {
	if s.nReady == 0 {
		return 0
	}
	return float64(s.heldUnit) / float64(s.unitsPerGPU) * 100 / float64(s.nReady*s.cl.GPUsPerNode)
}

func (s *sim) autoscale() {
	if s.hasAction && s.now < s.lastAction+s.cooldown {
		return
	}
	count := s.nBooting + s.nReady
	pct := s.allocPct()
	switch s.f.Autoscale {
	case tracereplay.AutoscaleGPUQueue:
		needed := s.nodesNeeded()
		if needed > 0 {
			s.low = false
			if add := min(needed-s.nBooting, s.o.Policy.MaxScaleUp, s.cl.MaxNodes-count); add > 0 {
				s.scaleOut(add)
			}
			return
		}
		if pct >= s.o.Policy.IdleFloor {
			s.low = false
			return
		}
		if !s.low {
			s.low, s.lowSince = true, s.now
		}
		if s.now-s.lowSince >= s.scaleInAfter {
			s.scaleIn(min(s.o.Policy.MaxScaleDown, count-s.cl.MinNodes))
		}
	case tracereplay.AutoscaleTargetValue:
		if count == 0 {
			return // a count of 0 gives a desired count of 0
		}
		desired := int(math.Ceil(float64(count)*pct/s.o.Policy.TargetAlloc - 1e-9))
		desired = min(max(desired, s.cl.MinNodes), s.cl.MaxNodes)
		switch {
		case desired > count:
			s.scaleOut(desired - count)
		case desired < count:
			s.scaleIn(count - desired)
		}
	}
}

func (s *sim) scaleOut(n int) {
	for range n {
		id := s.addNode()
		s.push(s.now+s.boot, evNodeReady, id, 0)
	}
	s.hasAction, s.lastAction = true, s.now
}

// scaleIn removes up to n idle ready nodes, the newest first.
func (s *sim) scaleIn(n int) {
	if n <= 0 {
		return
	}
	var idle []int32
	for _, id := range s.ready {
		if len(s.nodes[id].allocs) == 0 {
			idle = append(idle, id)
		}
	}
	if len(idle) == 0 {
		return
	}
	slices.Sort(idle)
	for i := 0; i < n && i < len(idle); i++ {
		s.startRemoval(idle[len(idle)-1-i])
	}
	s.hasAction, s.lastAction = true, s.now
}

// nodesNeeded packs the waiting jobs into empty nodes, best fit, largest
// first, one device kind at a time; a new node brings every kind, so the
// kind needing the most nodes decides. Jobs no empty node fits are left
// out: more nodes cannot place them.
func (s *sim) nodesNeeded() int {
	needed := 0
	type size struct{ k, n int }
	var sizes []size
	for g := range s.groups {
		capN := s.groups[g].perNode
		sizes = sizes[:0]
		for i := range s.sqs {
			q := &s.sqs[i]
			if q.g == g && q.Len() > 0 && q.k <= capN {
				sizes = append(sizes, size{q.k, q.Len()})
			}
		}
		if len(sizes) == 0 {
			continue
		}
		slices.SortFunc(sizes, func(a, b size) int { return b.k - a.k })
		bins := make([]int, capN+1) // open new nodes by free instances
		nodes := 0
		for _, sz := range sizes {
			for n := sz.n; n > 0; {
				c := sz.k
				for c <= capN && bins[c] == 0 {
					c++
				}
				if c > capN {
					per := capN / sz.k
					full := n / per
					nodes += full
					bins[capN-per*sz.k] += full
					if rem := n % per; rem > 0 {
						nodes++
						bins[capN-rem*sz.k]++
					}
					break
				}
				take := min(n, c/sz.k)
				bins[c]--
				bins[c-take*sz.k]++
				n -= take
			}
		}
		needed = max(needed, nodes)
	}
	return needed
}

func (s *sim) sample() {
	smp := tracereplay.Sample{
		At:        s.now,
		Nodes:     s.nBooting + s.nReady + s.nRemoving,
		GPUs:      float64(s.nReady * s.cl.GPUsPerNode),
		Allocated: float64(s.heldUnit) / float64(s.unitsPerGPU),
		Queued:    s.waiting + s.pending,
	}
	busy := 0.0
	for _, nid := range s.ready {
		for _, a := range s.nodes[nid].allocs {
			if j := &s.jobs[a]; j.state == jobRunning {
				busy += float64(j.units) * j.util / 100
			}
		}
	}
	smp.Busy = busy / float64(s.unitsPerGPU)
	smp.Fragmentation = s.fragmentation()
	s.timeline = append(s.timeline, smp)
}

// fragmentation is nomad_gpu_cluster_fragmentation_ratio over the ready
// nodes: free instances that no waiting job of their kind fits, or that
// are free slices of a partly held GPU, over all free instances.
func (s *sim) fragmentation() float64 {
	minK := make([]int, len(s.groups)) // smallest waiting ask per kind; 0: none
	for i := range s.sqs {
		q := &s.sqs[i]
		if q.Len() > 0 && (minK[q.g] == 0 || q.k < minK[q.g]) {
			minK[q.g] = q.k
		}
	}
	stuck := make([]bool, len(s.groups))
	free, stranded := 0, 0
	p := len(s.slotGroup)
	for _, nid := range s.ready {
		n := &s.nodes[nid]
		for g, f := range n.free {
			stuck[g] = s.waiting > 0 && f > 0 && (minK[g] == 0 || minK[g] > f)
			free += f
			if stuck[g] {
				stranded += f
			}
		}
		if s.mpsGroup >= 0 && !stuck[s.mpsGroup] {
			for _, u := range n.mpsUsed {
				if u > 0 {
					stranded += s.mpsShares - u
				}
			}
		}
		for gpu, u := range n.migUsed {
			if u == 0 {
				continue
			}
			for slot, g := range s.slotGroup {
				if !n.mig[gpu*p+slot] && !stuck[g] {
					stranded++
				}
			}
		}
	}
	if free == 0 {
		return 0
	}
	return float64(stranded) / float64(free)
}

func (s *sim) result() tracereplay.Result {
	late := 0
	for i := range s.jobs {
		if s.jobs[i].arrival > s.horizon {
			late++
		}
	}
	notes := s.notes
	if late > 0 {
		notes = append(notes, fmt.Sprintf("%d jobs arrive after the horizon %s; never submitted", late, s.horizon))
	}
	return tracereplay.Result{
		Engine:      "model",
		Version:     Version,
		Config:      s.o.Config,
		Cluster:     s.o.Cluster,
		Compression: s.o.Compression,
		Horizon:     s.horizon,
		Jobs:        s.recs,
		Timeline:    s.timeline,
		Notes:       notes,
	}
}
