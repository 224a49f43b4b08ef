package clusterview

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/sizing"
)

// Totals sums up a view for its header line.
type Totals struct {
	Nodes, GPUs, BusyGPUs, UnhealthyGPUs int
	Slices, HeldSlices                   int
	// Queued are allocations waiting, Blocked and Pending by kind.
	Queued, Blocked, Pending int
	LongestWait              int64 // seconds
}

// Sum counts the view's nodes, GPUs, slices and queued allocations.
func (v *View) Sum() Totals {
	var t Totals
	t.Nodes = len(v.Nodes)
	for _, n := range v.Nodes {
		for _, g := range n.GPUs {
			t.GPUs++
			if len(g.Allocations) > 0 {
				t.BusyGPUs++
			}
			if !g.Healthy {
				t.UnhealthyGPUs++
			}
			for _, s := range g.Slices {
				t.Slices++
				if s.Alloc != nil {
					t.HeldSlices++
				}
			}
		}
	}
	for _, q := range v.Queue {
		t.Queued += q.Count
		if q.State == StatePending {
			t.Pending += q.Count
		} else {
			t.Blocked += q.Count
		}
		t.LongestWait = max(t.LongestWait, q.WaitingSeconds)
	}
	return t
}

// WriteTable draws the view as text: a header line, then per node a table
// of its GPUs with their slices indented beneath, then the queue.
func WriteTable(w io.Writer, v *View) error {
	var b strings.Builder
	t := v.Sum()
	fmt.Fprintf(&b, "nomad-gpu top  %s  nodes %d  GPUs %d (%d in use, %d unhealthy)",
		v.GeneratedAt.UTC().Format("2006-01-02 15:04:05 UTC"), t.Nodes, t.GPUs, t.BusyGPUs, t.UnhealthyGPUs)
	if t.Slices > 0 {
		fmt.Fprintf(&b, "  slices %d (%d in use)", t.Slices, t.HeldSlices)
	}
	if t.Queued > 0 {
		fmt.Fprintf(&b, "  queued %d (%d blocked, %d pending), longest wait %s", t.Queued, t.Blocked, t.Pending, FormatWait(t.LongestWait))
	} else {
		b.WriteString("  queue empty")
	}
	b.WriteString("\n")
	if v.HistoryError != "" {
		b.WriteString("forecasts unknown: " + truncate(v.HistoryError, 120) + "\n")
	}
	if len(v.Nodes) == 0 {
		b.WriteString("\nno GPU nodes\n")
	}
	for _, n := range v.Nodes {
		b.WriteString("\n")
		writeNode(&b, &n)
	}
	writeQueue(&b, v.Queue)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeNode(b *strings.Builder, n *Node) {
	fmt.Fprintf(b, "NODE %s (%s)  %s  pool %s  class %s  dc %s", n.Name, shortID(n.ID), n.Status, orDash(n.Pool), orDash(n.Class), orDash(n.Datacenter))
	if !n.Eligible {
		b.WriteString("  ineligible")
	}
	if n.Drain {
		b.WriteString("  draining")
	}
	if n.StatsError != "" {
		b.WriteString("  [" + n.StatsError + "]")
	}
	b.WriteString("\n")
	if len(n.GPUs) == 0 {
		b.WriteString("  no GPU devices\n")
		return
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  GPU\tID\tMODEL / PROFILE\tMODE\tHEALTH\tUTIL\tMEMORY MiB\tALLOCATIONS")
	for _, g := range n.GPUs {
		index := "-"
		if g.Index != nil {
			index = strconv.Itoa(*g.Index)
		}
		id := shortUUID(g.UUID)
		if id == "" {
			id = g.PCIBusID
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", index, orDash(id), orDash(g.Model), g.Mode,
			health(g.Healthy, g.HealthDescription), pct(g.UtilizationPct), mem(g.MemoryUsedMiB, g.MemoryTotalMiB), allocList(g))
		for j, s := range g.Slices {
			branch := "├─"
			if j == len(g.Slices)-1 {
				branch = "└─"
			}
			alloc := "free"
			if s.Alloc != nil {
				alloc = allocText(*s.Alloc)
			}
			fmt.Fprintf(tw, "  \t%s %s\t%s\t%s\t%s\t%s\t%s\t%s\n", branch, sliceID(s), orDash(s.Profile), s.Type,
				health(s.Healthy, s.HealthDescription), pct(s.UtilizationPct), mem(s.MemoryUsedMiB, s.MemoryTotalMiB), alloc)
		}
	}
	tw.Flush()
}

func writeQueue(b *strings.Builder, q []QueueEntry) {
	b.WriteString("\nQUEUE")
	if len(q) == 0 {
		b.WriteString("  no GPU work waiting\n")
		return
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  JOB\tNAMESPACE\tGROUP\tSTATE\tDEVICES\tCOUNT\tWAIT\tPREDICTED\tREASON")
	for _, e := range q {
		asks := make([]string, len(e.Devices))
		for i, d := range e.Devices {
			asks[i] = fmt.Sprintf("%s x%d", shortDeviceName(d.Name), d.Count)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", e.Job, e.Namespace, e.Group, e.State,
			strings.Join(asks, ", "), e.Count, FormatWait(e.WaitingSeconds), predicted(e), truncate(e.Reason, 100))
	}
	tw.Flush()
}

// predicted is a queue entry's forecast: "wait ~5m00s, run ~30m00s", the
// part known, or "-".
func predicted(e QueueEntry) string {
	var parts []string
	if e.PredictedWaitSeconds != nil {
		parts = append(parts, "wait ~"+FormatWait(*e.PredictedWaitSeconds))
	}
	if e.PredictedRuntimeSeconds != nil {
		parts = append(parts, "run ~"+FormatWait(*e.PredictedRuntimeSeconds))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// FormatWait writes a wait in seconds as 42s, 5m02s, 2h05m or 3d04h.
func FormatWait(s int64) string {
	d := time.Duration(s) * time.Second
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

func health(ok bool, desc string) string {
	if ok {
		return "ok"
	}
	if desc == "" || desc == "unhealthy" {
		return "UNHEALTHY"
	}
	return "UNHEALTHY: " + truncate(desc, 40)
}

func pct(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", *p)
}

func mem(used, total *int64) string {
	u, t := "-", "-"
	if used != nil {
		u = strconv.FormatInt(*used, 10)
	}
	if total != nil {
		t = strconv.FormatInt(*total, 10)
	}
	if used == nil && total == nil {
		return "-"
	}
	return u + " / " + t
}

func allocList(g GPU) string {
	if len(g.Slices) > 0 {
		held := 0
		for _, s := range g.Slices {
			if s.Alloc != nil {
				held++
			}
		}
		return fmt.Sprintf("%d/%d slices in use", held, len(g.Slices))
	}
	if len(g.Allocations) == 0 {
		return "free"
	}
	parts := make([]string, len(g.Allocations))
	for i, a := range g.Allocations {
		parts[i] = allocText(a)
	}
	return strings.Join(parts, ", ")
}

// allocText is job/group/task (alloc ID prefix), the namespace first when
// it is not "default", and the predicted time left when known
// ("~12m00s left").
func allocText(a AllocRef) string {
	s := a.Job + "/" + a.Group + "/" + a.Task + " " + shortID(a.AllocID)
	if a.Namespace != "" && a.Namespace != "default" {
		s = a.Namespace + ":" + s
	}
	if p := a.Prediction; p != nil && p.RemainingSeconds != nil && p.Basis != sizing.BasisFinished {
		s += " ~" + FormatWait(*p.RemainingSeconds) + " left"
	}
	return s
}

// shortUUID keeps a GPU- or MIG- UUID's prefix and first 8 hex digits.
func shortUUID(id string) string {
	for _, p := range []string{"GPU-", "MIG-"} {
		if strings.HasPrefix(id, p) && len(id) > len(p)+8 {
			return id[:len(p)+8]
		}
	}
	return id
}

// shortDeviceName shortens the GPU UUID naming an MPS group
// (nvidia/mps/GPU-…).
func shortDeviceName(name string) string {
	if i := strings.LastIndex(name, "/"); i >= 0 {
		return name[:i+1] + shortUUID(name[i+1:])
	}
	return name
}

func sliceID(s Slice) string {
	if s.Type == contract.SliceMPS {
		if _, n, ok := contract.ParseShareID(s.ID); ok {
			return "share " + strconv.Itoa(n)
		}
	}
	return shortUUID(s.ID)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
