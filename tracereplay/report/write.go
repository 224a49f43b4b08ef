package report

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/internal/snapshot"
	"github.com/nomad-gpu/nomad-gpu/tracereplay"
)

// Run is one `make bench-trace` run: the trace, and what each engine
// measured for each configuration.
type Run struct {
	Title string
	// Trace's Source and jobs go into the method section.
	Trace tracereplay.Trace
	Seed  int64
	// Attribution is printed verbatim (the trace's licence asks for it).
	Attribution string
	// Real are the results of engine "nomad", one per configuration, the
	// first being the baseline; empty for a model-only run.
	Real []tracereplay.Result
	// Model are the results of engine "model", one per configuration.
	Model []tracereplay.Result
	// Started and Elapsed are the run's, in wall-clock time.
	Started time.Time
	Elapsed time.Duration
}

// Write writes dir/report.md and the PNG plots it links to, creating dir.
func Write(dir string, run Run) error {
	if len(run.Real) == 0 && len(run.Model) == 0 {
		return errors.New("report: the run has no results")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	title := run.Title
	if title == "" {
		title = "Trace replay"
	}
	fmt.Fprintf(&b, "# %s\n\n", title)
	writeMethod(&b, run)

	main, mainWho := run.Real, "Real cluster (engine nomad)"
	if len(main) == 0 {
		main, mainWho = run.Model, "Model (engine model; no real run)"
	}
	fmt.Fprintf(&b, "## Results: %s\n\n", mainWho)
	writeTable(&b, main, nil)
	b.WriteString(definitions)

	if len(run.Real) > 0 && len(run.Model) > 0 {
		b.WriteString("## Model\n\n")
		b.WriteString("Each cell is the model's figure with its calibration error against the real run of the same configuration: percentage points for ratios, the relative error |model − real| / real for the rest (the absolute difference where the real figure is 0).\n\n")
		writeTable(&b, run.Model, run.Real)
		writeCalibration(&b, run.Model, run.Real)
	}

	b.WriteString("## Plots\n\n")
	for _, set := range []struct {
		prefix, who string
		rs          []tracereplay.Result
	}{{"real", "Real cluster", run.Real}, {"model", "Model", run.Model}} {
		if len(set.rs) == 0 {
			continue
		}
		rs := set.rs[:min(len(set.rs), snapshot.MaxSeries)]
		fmt.Fprintf(&b, "### %s\n\n", set.who)
		if len(rs) < len(set.rs) {
			fmt.Fprintf(&b, "The plots show the first %d of %d configurations; the tables have them all.\n\n", len(rs), len(set.rs))
		}
		plots, err := writePlots(dir, set.prefix, set.who, rs)
		if err != nil {
			return err
		}
		for _, p := range plots {
			fmt.Fprintf(&b, "![%s](%s)\n\n", p.Caption, p.File)
		}
	}
	writeNotes(&b, run)
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644)
}

const definitions = `Utilisation is ∫allocated (or busy) GPU-equivalents dt / ∫ready GPUs dt over [0, horizon]; fragmentation is the time mean of the share of free device instances no queued request can use. Integrals are step integrals of the sampled timeline (each sample holds until the next). A wait runs from arrival to first start; jobs never started count with their wait until the horizon (censored, so wait figures are lower bounds when "unstarted" is not 0). JCT is finish − arrival of completed jobs. All times are trace time.

`

func writeMethod(b *strings.Builder, run Run) {
	all := slices.Concat(run.Real, run.Model)
	c := all[0].Cluster
	b.WriteString("## Method\n\n")
	fmt.Fprintf(b, "- Cluster: %s.\n", clusterShape(c))
	for _, r := range all[1:] {
		if !reflect.DeepEqual(r.Cluster, c) {
			fmt.Fprintf(b, "- Warning: %s %q ran on a different cluster: %s.\n", r.Engine, r.Config.Name, clusterShape(r.Cluster))
		}
	}
	fmt.Fprintf(b, "- Trace: %s; %d jobs, last arrival at %s; seed %d.\n", orNone(run.Trace.Source), len(run.Trace.Jobs), Human(run.Trace.Span()), run.Seed)
	for _, set := range []struct {
		engine string
		rs     []tracereplay.Result
	}{{"nomad", run.Real}, {"model", run.Model}} {
		if len(set.rs) == 0 {
			continue
		}
		var versions, compressions, horizons []string
		for _, r := range set.rs {
			versions = appendNew(versions, orNone(r.Version))
			compressions = appendNew(compressions, fmt.Sprintf("%g×", r.Compression))
			horizons = appendNew(horizons, Human(r.Horizon))
		}
		verb := "ran at"
		if set.engine == "model" {
			verb = "calibrated for"
		}
		fmt.Fprintf(b, "- Engine %s: version %s, %d configurations; %s compression %s (trace seconds per wall-clock second); horizon %s.\n",
			set.engine, strings.Join(versions, ", "), len(set.rs), verb, strings.Join(compressions, ", "), strings.Join(horizons, ", "))
	}
	if run.Started.IsZero() {
		fmt.Fprintf(b, "- Run: took %s (wall clock).\n", Human(run.Elapsed))
	} else {
		fmt.Fprintf(b, "- Run: started %s, took %s (wall clock).\n", run.Started.UTC().Format("2006-01-02 15:04:05 UTC"), Human(run.Elapsed))
	}
	b.WriteString("\n| configuration | slices | preemption | autoscale |\n|---|---|---|---|\n")
	seen := map[string]bool{}
	for _, r := range all {
		if seen[r.Config.Name] {
			continue
		}
		seen[r.Config.Name] = true
		f := r.Config.Features
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", cellText(r.Config.Name), yesNo(f.Slices), yesNo(f.Preemption), orNone(f.Autoscale))
	}
	b.WriteString("\n")
	if run.Attribution != "" {
		fmt.Fprintf(b, "%s\n\n", run.Attribution)
	}
}

func clusterShape(c tracereplay.Cluster) string {
	s := fmt.Sprintf("%s (autoscaled configurations: %d to %d), %s per node", plural(c.Nodes, "node"), c.MinNodes, c.MaxNodes, plural(c.GPUsPerNode, "GPU"))
	var with []string
	if c.MPSGPUs > 0 {
		with = append(with, fmt.Sprintf("%s as %d MPS shares each", plural(c.MPSGPUs, "GPU"), c.MPSShares))
	}
	if c.MIGGPUs > 0 {
		with = append(with, fmt.Sprintf("%s in MIG mode as %s", plural(c.MIGGPUs, "GPU"), strings.Join(c.MIGProfiles, " + ")))
	}
	if len(with) == 0 {
		return s + "; no MPS or MIG"
	}
	return s + "; with slices, per node " + strings.Join(with, " and ") + fmt.Sprintf(", %d whole", c.WholeGPUs(tracereplay.Features{Slices: true}))
}

// writeTable writes one row per figure and one column per result; with
// real results, each cell has its calibration error against the real
// result of the same configuration, where there is one.
func writeTable(b *strings.Builder, rs, real []tracereplay.Result) {
	b.WriteString("| figure |")
	for _, r := range rs {
		fmt.Fprintf(b, " %s |", cellText(r.Config.Name))
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(rs)) + "\n")
	fs := make([]Figures, len(rs))
	refs := make([]*Figures, len(rs))
	for i, r := range rs {
		fs[i] = Compute(r)
		if j := indexOf(real, r.Config.Name); j >= 0 {
			f := Compute(real[j])
			refs[i] = &f
		}
	}
	for _, rw := range rows {
		fmt.Fprintf(b, "| %s |", rw.name)
		for i := range rs {
			if refs[i] != nil {
				fmt.Fprintf(b, " %s |", rw.calibrated(fs[i], *refs[i]))
			} else {
				fmt.Fprintf(b, " %s |", rw.cell(fs[i]))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func writeCalibration(b *strings.Builder, model, real []tracereplay.Result) {
	b.WriteString("### Calibration\n\n")
	b.WriteString("Mean relative error |model − real| / real over the figures whose real value is not 0, per configuration:\n\n")
	for _, m := range model {
		j := indexOf(real, m.Config.Name)
		if j < 0 {
			fmt.Fprintf(b, "- %s: no real run to compare with.\n", m.Config.Name)
			continue
		}
		mean, n, worst, worstErr := calibration(Compute(m), Compute(real[j]))
		if n == 0 {
			fmt.Fprintf(b, "- %s: every real figure is 0; see the absolute differences above.\n", m.Config.Name)
			continue
		}
		fmt.Fprintf(b, "- %s: %s over %d figures; worst %s (%s).\n", m.Config.Name, percent(mean), n, worst, percent(worstErr))
	}
	b.WriteString("\n")
}

// calibration is the mean relative error of model figures m against real
// figures r over the n figures where r is not 0, and the worst of them.
func calibration(m, r Figures) (mean float64, n int, worst string, worstErr float64) {
	var sum float64
	for _, rw := range rows {
		e, ok := relativeError(rw.get(m), rw.get(r))
		if !ok {
			continue
		}
		sum += e
		n++
		if worst == "" || e > worstErr {
			worst, worstErr = rw.name, e
		}
	}
	if n > 0 {
		mean = sum / float64(n)
	}
	return mean, n, worst, worstErr
}

func writeNotes(b *strings.Builder, run Run) {
	var notes []string
	for _, r := range slices.Concat(run.Real, run.Model) {
		for _, n := range r.Notes {
			notes = append(notes, fmt.Sprintf("- %s, %s: %s\n", r.Engine, r.Config.Name, n))
		}
	}
	if len(notes) == 0 {
		return
	}
	b.WriteString("## Notes\n\nWhat the engines saw that the figures do not show.\n\n")
	b.WriteString(strings.Join(notes, ""))
	b.WriteString("\n")
}

func indexOf(rs []tracereplay.Result, name string) int {
	return slices.IndexFunc(rs, func(r tracereplay.Result) bool { return r.Config.Name == name })
}

func appendNew(ss []string, s string) []string {
	if slices.Contains(ss, s) {
		return ss
	}
	return append(ss, s)
}

// cellText keeps a configuration name from breaking a Markdown table.
func cellText(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
