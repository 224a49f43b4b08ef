package topview

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller"
	"github.com/nomad-gpu/nomad-gpu/controller/sizing"
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

// DefaultWidth is the line length WriteTable fits when told none: a
// terminal's classic 80 columns.
const DefaultWidth = 80

// TableOptions say how WriteTable draws a view.
type TableOptions struct {
	// Width is the line length to fit, in columns; 0 is DefaultWidth.
	// Wider tables show more: the PCI bus ID, the GPU mode, whole names.
	Width int
	// Sort orders nodes, GPUs, tasks and queue ("" is SortNode); Filter
	// keeps what it matches (see Arrange).
	Sort   SortKey
	Filter string
}

// WriteTable draws the view as text: header lines, then per node its GPUs
// with their slices beneath and the tasks holding them, then the queue.
// Lines fit opt.Width: long names are cut with "…", and optional columns
// left out, where they would not.
func WriteTable(w io.Writer, v *View, opt TableOptions) error {
	width := opt.Width
	if width <= 0 {
		width = DefaultWidth
	}
	v = Arrange(v, opt.Sort, opt.Filter)
	var b strings.Builder
	writeHeader(&b, v, opt.Filter, width)
	if len(v.Nodes) == 0 {
		b.WriteString("\nno GPU nodes\n")
	}
	for _, n := range v.Nodes {
		b.WriteString("\n")
		writeNode(&b, &n, opt.Sort, width)
	}
	writeQueue(&b, v.Queue, width)
	writeController(&b, v, width)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeHeader(b *strings.Builder, v *View, filter string, width int) {
	t := v.Sum()
	parts := []string{"nomad-gpu top", v.GeneratedAt.UTC().Format("2006-01-02 15:04:05 UTC")}
	if filter != "" {
		parts = append(parts, "filter "+strconv.Quote(filter))
	}
	parts = append(parts, fmt.Sprintf("nodes %d", t.Nodes), fmt.Sprintf("GPUs %d (%d in use, %d unhealthy)", t.GPUs, t.BusyGPUs, t.UnhealthyGPUs))
	if t.Slices > 0 {
		parts = append(parts, fmt.Sprintf("slices %d (%d in use)", t.Slices, t.HeldSlices))
	}
	if t.Queued > 0 {
		parts = append(parts, fmt.Sprintf("queued %d (%d blocked, %d pending), longest wait %s", t.Queued, t.Blocked, t.Pending, FormatWait(t.LongestWait)))
	} else {
		parts = append(parts, "queue empty")
	}
	writeWrapped(b, parts, width, "")
	if v.HistoryError != "" {
		b.WriteString(Cut("forecasts unknown: "+v.HistoryError, width) + "\n")
	}
}

func writeNode(b *strings.Builder, n *Node, key SortKey, width int) {
	parts := []string{fmt.Sprintf("NODE %s (%s)", n.Name, shortID(n.ID)), n.Status,
		"pool " + orDash(n.Pool), "class " + orDash(n.Class), "dc " + orDash(n.Datacenter)}
	if !n.Eligible {
		parts = append(parts, "ineligible")
	}
	if n.Drain {
		parts = append(parts, "draining")
	}
	if n.StatsError != "" {
		parts = append(parts, "["+n.StatsError+"]")
	}
	writeWrapped(b, parts, width, "  ")
	if len(n.GPUs) == 0 {
		b.WriteString("  no GPU devices\n")
		return
	}
	gpuTable(n.GPUs).write(b, width)
	writeLayoutNotes(b, n.GPUs, width)
	for _, p := range n.StrayPins {
		b.WriteString(Cut("  ignored pin: "+p, width) + "\n")
	}
	if tasks := taskTable(n.GPUs, key); len(tasks.rows) > 0 {
		tasks.write(b, width)
	}
}

// gpuTable is a node's GPUs, each with its slices beneath.
func gpuTable(gpus []GPU) *textTable {
	t := &textTable{indent: "  ", cols: []column{
		{head: "IDX"}, {head: "UUID", want: 12, min: 12}, {head: "PCI BUS", drop: 2, extra: true},
		{head: "MODEL", want: 12, min: 8}, {head: "MODE", drop: 1, extra: true}, {head: "HEALTH"},
		{head: "UTIL", right: true}, {head: "MEM GiB", right: true},
		{head: "TEMP", right: true, drop: 1}, {head: "POWER", right: true, drop: 2}, {head: "USE"},
	}}
	for _, g := range gpus {
		note := ""
		if !g.Healthy && g.HealthDescription != "unhealthy" {
			note = g.HealthDescription
		}
		t.add(note, intOrDash(g.Index), orDash(shortUUID(g.UUID)), orDash(g.PCIBusID), orDash(strings.TrimPrefix(g.Model, "NVIDIA ")),
			modeText(g), health(g.Healthy), pct(g.UtilizationPct), gib(g.MemoryUsedMiB, g.MemoryTotalMiB),
			unit(g.TemperatureC, "C"), unit(g.PowerW, "W"), gpuUse(g))
		for j, s := range g.Slices {
			branch := "├─"
			if j == len(g.Slices)-1 {
				branch = "└─"
			}
			use := "free"
			if s.Alloc != nil {
				use = "used"
			}
			t.add("", branch, sliceID(s), "", orDash(s.Profile), s.Type, health(s.Healthy), pct(s.UtilizationPct),
				gib(s.MemoryUsedMiB, s.MemoryTotalMiB), "", "", use)
		}
	}
	return t
}

// modeText is a GPU's mode, or its layout where the plugin publishes it:
// "mps:8", or "whole → mps:8 draining" while another is asked.
func modeText(g GPU) string {
	l := g.Layout
	if l == nil {
		return g.Mode
	}
	text := l.Current
	if l.Desired != "" && l.Desired != l.Current {
		text += " → " + l.Desired + " " + l.State
	} else if l.State == "error" {
		text += " error"
	}
	if l.Pinned {
		text += " (pinned)"
	}
	return text
}

// writeLayoutNotes says, under a node's GPUs, why the controller last
// relaid each and why a layout cannot be made.
func writeLayoutNotes(b *strings.Builder, gpus []GPU, width int) {
	for _, g := range gpus {
		l := g.Layout
		if l == nil {
			continue
		}
		if l.Error != "" {
			b.WriteString(Cut(fmt.Sprintf("  GPU %s layout error: %s", intOrDash(g.Index), l.Error), width) + "\n")
		}
		if l.Reason != "" && l.Changed != nil {
			b.WriteString(Cut(fmt.Sprintf("  GPU %s relaid %s: %s", intOrDash(g.Index), l.Changed.Format("15:04:05"), l.Reason), width) + "\n")
		}
	}
}

// gpuUse is "free" or "used" for a whole GPU, held/all for a sliced one.
func gpuUse(g GPU) string {
	if len(g.Slices) > 0 {
		held := 0
		for _, s := range g.Slices {
			if s.Alloc != nil {
				held++
			}
		}
		return fmt.Sprintf("%d/%d", held, len(g.Slices))
	}
	if len(g.Allocations) == 0 {
		return "free"
	}
	return "used"
}

// taskTable is a row per task and GPU it holds (or holds slices of): what
// it uses there and its predicted time left.
func taskTable(gpus []GPU, key SortKey) *textTable {
	t := &textTable{indent: "  ", cols: []column{
		{head: "GPU"}, {head: "SLICES", want: 12, min: 6}, {head: "TASK", want: 30, min: 12}, {head: "ALLOC"},
		{head: "MEM GiB", right: true}, {head: "PRED LEFT", right: true},
	}}
	for _, r := range sortedTasks(gpus, key) {
		a := r.alloc
		t.add("", intOrDash(r.gpu.Index), orDash(strings.Join(heldSlices(r.gpu, a), ",")), taskName(a), shortID(a.AllocID),
			gib(a.MemoryUsedMiB, nil), predLeft(a.Prediction))
	}
	return t
}

// heldSlices names the slices of g that a holds: MIG instances by short
// UUID, MPS shares as "share 1,2".
func heldSlices(g *GPU, a AllocRef) []string {
	var out, shares []string
	for _, s := range g.Slices {
		if s.Alloc == nil || s.Alloc.AllocID != a.AllocID || s.Alloc.Task != a.Task {
			continue
		}
		if _, n, ok := contract.ParseShareID(s.ID); ok && s.Type == contract.SliceMPS {
			shares = append(shares, strconv.Itoa(n))
		} else {
			out = append(out, sliceID(s))
		}
	}
	if len(shares) > 0 {
		out = append(out, "share "+strings.Join(shares, ","))
	}
	return out
}

// taskName is job/group/task, with the namespace first when it is not
// "default".
func taskName(a AllocRef) string {
	return withNamespace(a.Namespace, a.Job+"/"+a.Group+"/"+a.Task)
}

// withNamespace puts a namespace other than "default" before s, cut short
// so that a long one leaves room for the job's name.
func withNamespace(ns, s string) string {
	if ns == "" || ns == "default" {
		return s
	}
	return Cut(ns, 12) + ":" + s
}

// predLeft is a task's predicted time left, "~12m00s", or "-" when there
// is none: unknown, resting on elapsed time alone, or a finished task.
func predLeft(p *Prediction) string {
	if p == nil || p.RemainingSeconds == nil || p.Basis == sizing.BasisFinished {
		return "-"
	}
	return "~" + FormatWait(*p.RemainingSeconds)
}

func writeQueue(b *strings.Builder, q []QueueEntry, width int) {
	b.WriteString("\nQUEUE")
	if len(q) == 0 {
		b.WriteString("  no GPU work waiting\n")
		return
	}
	b.WriteString("\n")
	t := &textTable{indent: "  ", cols: []column{
		{head: "JOB", want: 24, min: 10}, {head: "STATE"}, {head: "DEVICES", want: 20, min: 8},
		{head: "COUNT", right: true}, {head: "WAIT", right: true}, {head: "PRED WAIT", right: true}, {head: "PRED RUN", right: true},
	}}
	for _, e := range q {
		asks := make([]string, len(e.Devices))
		for i, d := range e.Devices {
			asks[i] = fmt.Sprintf("%s x%d", shortDeviceName(d.Name), d.Count)
		}
		t.add(e.Reason, withNamespace(e.Namespace, e.Job+"/"+e.Group), e.State, strings.Join(asks, ", "), strconv.Itoa(e.Count), FormatWait(e.WaitingSeconds),
			predSeconds(e.PredictedWaitSeconds), predSeconds(e.PredictedRuntimeSeconds))
	}
	t.write(b, width)
}

// writeController is who leads the controller and the jobs it raised:
// in force, to what and until when; or waiting for their replacement.
func writeController(b *strings.Builder, v *View, width int) {
	switch {
	case v.ControllerError != "":
		b.WriteString("\n" + Cut("CONTROLLER  unknown: "+v.ControllerError, width) + "\n")
		return
	case v.Controller == nil:
		return
	}
	c := v.Controller
	leader := "no leader: nothing protects preempted jobs"
	if c.Leading {
		leader = "leader " + c.Leader
	}
	b.WriteString("\n" + Cut("CONTROLLER  "+leader, width) + "\n")
	if h := c.Hold; h != nil {
		b.WriteString(Cut("  "+holdText(*h), width) + "\n")
	}
	writeRaises(b, c.Raises, width)
	writeMoves(b, c.Moves, width)
	writeGangs(b, c.Gangs, v.GeneratedAt, width)
	writeQueues(b, c.Queues, width)
}

// writeQueues is the teams' queues: GPU-equivalents used of the nominal
// quota, borrowed beyond it and lent of it, the fair-share standing of
// an active queue (1: its weighted share of the recent use), and the
// allocations waiting.
func writeQueues(b *strings.Builder, qs []controller.QueueStatus, width int) {
	if len(qs) == 0 {
		return
	}
	t := &textTable{indent: "  ", cols: []column{
		{head: "TEAM QUEUE", want: 20, min: 8}, {head: "USED", right: true}, {head: "BORROWED", right: true}, {head: "LENT", right: true},
		{head: "FAIR SHARE", right: true}, {head: "WAITING", right: true},
	}}
	for _, q := range qs {
		standing := "-"
		if q.Active {
			standing = strconv.FormatFloat(q.Standing, 'f', 2, 64)
		}
		t.add("", q.Name, gpuEq(q.Use)+"/"+gpuEq(q.Nominal), gpuEq(q.Borrowed), gpuEq(q.Lent), standing, strconv.Itoa(q.Waiting))
	}
	t.write(b, width)
}

// gpuEq writes GPU-equivalents: "6", "0.5", "2.25".
func gpuEq(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// writeGangs is the gangs: their state, members placed and running of
// those wanted, since when, and why one waits.
func writeGangs(b *strings.Builder, gangs []controller.GangStatus, now time.Time, width int) {
	if len(gangs) == 0 {
		return
	}
	t := &textTable{indent: "  ", cols: []column{
		{head: "GANG", want: 24, min: 10}, {head: "STATE"}, {head: "PLACED", right: true}, {head: "RUNNING", right: true}, {head: "FOR", right: true}, {head: "WHY", want: 40, min: 10},
	}}
	for _, g := range gangs {
		since := "-"
		if !g.Since.IsZero() && !now.IsZero() {
			since = FormatWait(int64(max(0, now.Sub(g.Since).Seconds())))
		}
		t.add("", withNamespace(g.Namespace, g.Job), g.State, fmt.Sprintf("%d/%d", g.Placed, g.Wanted), fmt.Sprintf("%d/%d", g.Running, g.Wanted), since, g.Reason)
	}
	t.write(b, width)
}

// holdText says what the controller holds, and why.
func holdText(h controller.Hold) string {
	since := h.Since.UTC().Format("15:04:05")
	switch {
	case h.GPU == "":
		return fmt.Sprintf("node %s held ineligible since %s while work moved off it is placed elsewhere", h.NodeName, since)
	case h.Stop != nil:
		return fmt.Sprintf("GPU %s on %s held since %s: alloc %s moves off it once the servers see it held", h.GPU, h.NodeName, since, shortID(h.Stop.Alloc))
	}
	return fmt.Sprintf("GPU %s on %s held since %s while work moved off it is placed elsewhere", h.GPU, h.NodeName, since)
}

// writeRaises is the jobs the controller raised.
func writeRaises(b *strings.Builder, raises []controller.JobRaise, width int) {
	if len(raises) == 0 {
		return
	}
	t := &textTable{indent: "  ", cols: []column{
		{head: "JOB", want: 24, min: 10}, {head: "PRIORITY", right: true}, {head: "UNTIL"}, {head: "WHY", want: 40, min: 10},
	}}
	for _, r := range raises {
		prio, until := fmt.Sprintf("%d → %d", r.Own, r.Priority), "-"
		switch {
		case !r.InForce:
			prio, until = fmt.Sprintf("%d (→ %d)", r.Own, r.Priority), "waits"
		case r.Until != nil:
			until = r.Until.UTC().Format("15:04:05")
		}
		t.add("", withNamespace(r.Namespace, r.Job), prio, until, r.Reason)
	}
	t.write(b, width)
}

// writeMoves is the allocations the controller moved in the last 24
// hours: still moving (their job not yet running again) first, then the
// newest done.
func writeMoves(b *strings.Builder, moves []controller.MoveRecord, width int) {
	if len(moves) == 0 {
		return
	}
	t := &textTable{indent: "  ", cols: []column{
		{head: "MOVED", want: 24, min: 10}, {head: "ALLOC"}, {head: "GPUS", right: true}, {head: "FROM"}, {head: "AT"}, {head: "STATE"}, {head: "WHY", want: 40, min: 10},
	}}
	for _, m := range moves {
		state := "moving"
		if !m.Resumed.IsZero() {
			state = "runs again after " + FormatWait(int64(m.Resumed.Sub(m.At).Seconds()))
		}
		gpus := strconv.Itoa(m.GPUs)
		if m.Shares > 0 {
			gpus = fmt.Sprintf("%d/%d", m.Shares, m.SharesPerGPU)
		}
		t.add("", withNamespace(m.Namespace, m.Job), shortID(m.Alloc), gpus, m.From, m.At.UTC().Format("15:04:05"), state, m.For)
	}
	t.write(b, width)
}

// predSeconds is a predicted duration, "~5m00s", or "-" when unknown.
func predSeconds(s *int64) string {
	if s == nil {
		return "-"
	}
	return "~" + FormatWait(*s)
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

func health(ok bool) string {
	if ok {
		return "ok"
	}
	return "UNHEALTHY"
}

func pct(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", *p)
}

// unit is a figure rounded, with its unit: "45C", "300W"; "-" unknown.
func unit(p *float64, u string) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%s", *p, u)
}

func intOrDash(p *int) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(*p)
}

// gib writes MiB figures as GiB with one decimal: "29.3/80.0", "-/80.0",
// "29.3" without a total; "-" when neither is known.
func gib(used, total *int64) string {
	f := func(p *int64) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatFloat(float64(*p)/1024, 'f', 1, 64)
	}
	switch {
	case used == nil && total == nil:
		return "-"
	case total == nil:
		return f(used)
	}
	return f(used) + "/" + f(total)
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

// shortDeviceName shortens a device request for the queue: no "nvidia/"
// vendor, and the GPU UUID naming an MPS group (nvidia/mps/GPU-…) cut.
func shortDeviceName(name string) string {
	name = strings.TrimPrefix(name, contract.Vendor+"/")
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
