package topview

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// WaitTableOptions say how WriteWaitTable draws a report.
type WaitTableOptions struct {
	// Width is the line length to fit, in columns; 0 is DefaultWidth.
	// Reasons are wrapped to it, never cut.
	Width int
	// Location is the zone of predicted start times (nil: time.Local).
	Location *time.Location
}

// WriteWaitTable draws the report as text: a header line, the waiting
// jobs with each one's reason on the lines beneath, then the queues.
func WriteWaitTable(w io.Writer, r WaitReport, opt WaitTableOptions) error {
	width := opt.Width
	if width <= 0 {
		width = DefaultWidth
	}
	loc := opt.Location
	if loc == nil {
		loc = time.Local
	}
	var b strings.Builder
	writeWaitHeader(&b, r, width)
	writeWaitingJobs(&b, r, loc, width)
	writeQueueAccounts(&b, r, width)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeWaitHeader(b *strings.Builder, r WaitReport, width int) {
	held, allocs := 0, 0
	for _, j := range r.Jobs {
		allocs += j.Count
		if j.State == StateHeld {
			held++
		}
	}
	parts := []string{"nomad-gpu queue", r.GeneratedAt.UTC().Format("2006-01-02 15:04:05 UTC"),
		fmt.Sprintf("%s waiting (%d held), %s", counted(len(r.Jobs), "job"), held, counted(allocs, "allocation"))}
	writeWrapped(b, parts, width, "")
	switch {
	case r.ControllerError != "":
		writeNote(b, "controller unknown (held jobs' reasons and places too): "+r.ControllerError, width)
	case r.Leading != nil && !*r.Leading && held > 0:
		writeNote(b, "no controller leads: no held job is admitted until one does", width)
	}
	if r.HistoryError != "" {
		writeNote(b, "predictions unknown: "+r.HistoryError, width)
	}
}

// writeWaitingJobs is the jobs table: place, queue, job, asks, wait,
// predicted start and the reason's kind (left out first on a narrow
// line: the reason beneath says it).
func writeWaitingJobs(b *strings.Builder, r WaitReport, loc *time.Location, width int) {
	if len(r.Jobs) == 0 {
		b.WriteString("\nno GPU work waiting\n")
		return
	}
	b.WriteString("\n")
	t := &textTable{wrapNotes: true, cols: []column{
		{head: "POS", right: true}, {head: "QUEUE", want: 12, min: 5}, {head: "JOB", want: 28, min: 10},
		{head: "ASKS", want: 24, min: 8}, {head: "WAITING", right: true}, {head: "PREDICTED START"}, {head: "KIND", drop: 1},
	}}
	for _, j := range r.Jobs {
		pos := "-"
		if j.Position > 0 {
			pos = strconv.Itoa(j.Position)
		}
		t.add(j.Reason, pos, orDash(j.Queue), j.Namespace+"/"+j.Job, asksText(j.Asks), FormatWait(j.WaitingSeconds),
			startText(j, r.GeneratedAt, loc), j.Kind)
	}
	t.write(b, width)
}

// asksText is a job's asks, group by group: allocations × what one asks
// for, "2×(gpu x4) + 1×(mps/GPU-5c3b… x1)".
func asksText(asks []GroupAsk) string {
	parts := make([]string, 0, len(asks))
	for _, a := range asks {
		devs := make([]string, len(a.Devices))
		for i, d := range a.Devices {
			devs[i] = fmt.Sprintf("%s x%d", shortDeviceName(d.Name), d.Count)
		}
		parts = append(parts, fmt.Sprintf("%d×(%s)", a.Count, strings.Join(devs, ", ")))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " + ")
}

// startText is a predicted start, "~14:05 (in 12m)", "~now" when it
// fits now, "~Dec 04 06:00" when not today; "unknown" when not predicted,
// and "-" for pending work (placed, its start the client's).
func startText(j WaitingJob, now time.Time, loc *time.Location) string {
	switch {
	case j.State == StatePending:
		return "-"
	case j.PredictedStart == nil || j.PredictedWaitSeconds == nil:
		return "unknown"
	case *j.PredictedWaitSeconds <= 0:
		return "~now"
	}
	at, today := j.PredictedStart.In(loc), now.In(loc)
	if at.YearDay() != today.YearDay() || at.Year() != today.Year() {
		return "~" + at.Format("Jan 02 15:04")
	}
	return fmt.Sprintf("~%s (in %s)", at.Format("15:04"), inText(*j.PredictedWaitSeconds))
}

// inText is a wait as short as a glance wants it: 45s, 12m, 2h05m.
func inText(s int64) string {
	if s >= 60 && s < 3600 {
		return fmt.Sprintf("%dm", s/60)
	}
	return FormatWait(s)
}

// writeQueueAccounts is the team queues: GPU-equivalents used, nominal,
// borrowed and lent, the fair-share standing of an active queue, and
// the allocations waiting.
func writeQueueAccounts(b *strings.Builder, r WaitReport, width int) {
	if len(r.Queues) == 0 {
		return
	}
	b.WriteString("\n")
	t := &textTable{cols: []column{
		{head: "QUEUE", want: 20, min: 8}, {head: "USED", right: true}, {head: "NOMINAL", right: true},
		{head: "BORROWED", right: true}, {head: "LENT", right: true}, {head: "FAIR SHARE", right: true}, {head: "WAITING", right: true},
	}}
	for _, q := range r.Queues {
		standing := "-"
		if q.Active {
			standing = strconv.FormatFloat(q.Standing, 'f', 2, 64)
		}
		t.add("", q.Name, gpuEq(q.Use), gpuEq(q.Nominal), gpuEq(q.Borrowed), gpuEq(q.Lent), standing, strconv.Itoa(q.Waiting))
	}
	t.write(b, width)
}

// writeNote writes s wrapped to width.
func writeNote(b *strings.Builder, s string, width int) {
	for _, l := range wrapWords(s, width) {
		b.WriteString(l + "\n")
	}
}

// counted is n of a thing, "1 job", "3 jobs".
func counted(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
