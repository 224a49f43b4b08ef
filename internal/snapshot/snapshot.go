// Package snapshot renders dashboard panels (time series with a Grafana
// unit and legend) to PNG with gonum/plot, for `make dashboard-snapshot`.
package snapshot

import (
	"bufio"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Width and Height are the PNG's size in pixels.
const (
	Width  = 800
	Height = 400
	dpi    = 96
)

// MaxSeries is the most series a panel shows: those with the largest peak.
const MaxSeries = 8

// Point is one sample.
type Point struct {
	T time.Time
	V float64
}

// Series is one line of a panel.
type Series struct {
	Label  string
	Points []Point
}

// Panel is what one PNG shows.
type Panel struct {
	Title string
	// Unit is the Grafana unit: percent, percentunit, bytes, watt,
	// celsius, s, short.
	Unit string
	// Start is the X axis' zero; End its end (zero: the last sample).
	Start, End time.Time
	Series     []Series
}

// unitScale is how a Grafana unit is shown: a factor and the axis label.
func unitScale(unit string) (float64, string) {
	switch unit {
	case "percent":
		return 1, "%"
	case "percentunit":
		return 100, "%"
	case "bytes":
		return 1 / float64(1<<30), "GiB"
	case "watt":
		return 1, "W"
	case "celsius":
		return 1, "°C"
	case "s":
		return 1, "seconds"
	case "short", "":
		return 1, "count"
	}
	return 1, unit
}

var legendVar = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// Legend is a Grafana legendFormat with the series' labels put in; with no
// format, the labels themselves.
func Legend(format string, labels map[string]string) string {
	if format == "" {
		var ks []string
		for k := range labels {
			if k != "__name__" {
				ks = append(ks, k)
			}
		}
		sort.Strings(ks)
		var parts []string
		for _, k := range ks {
			parts = append(parts, k+"="+labels[k])
		}
		return strings.Join(parts, " ")
	}
	s := legendVar.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendVar.FindStringSubmatch(m)[1]]
	})
	return strings.Join(strings.Fields(s), " ")
}

// abbreviate shortens long words (device UUIDs) so the legend fits.
func abbreviate(label string) string {
	ws := strings.Fields(label)
	for i, w := range ws {
		if r := []rune(w); len(r) > 16 && strings.Contains(w, "-") {
			ws[i] = string(r[:9]) + "…" + string(r[len(r)-5:])
		}
	}
	return strings.Join(ws, " ")
}

// keepLargest is at most n series, those with the largest peak, in their
// order.
func keepLargest(ss []Series, n int) []Series {
	if len(ss) <= n {
		return ss
	}
	peak := func(s Series) float64 {
		m := math.Inf(-1)
		for _, p := range s.Points {
			m = math.Max(m, p.V)
		}
		return m
	}
	idx := make([]int, len(ss))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return peak(ss[idx[a]]) > peak(ss[idx[b]]) })
	idx = idx[:n]
	sort.Ints(idx)
	out := make([]Series, 0, n)
	for _, i := range idx {
		out = append(out, ss[i])
	}
	return out
}

// mmss ticks the time axis (seconds since Start) as mm:ss.
type mmss struct{}

func (mmss) Ticks(min, max float64) []plot.Tick {
	span := max - min
	step := 5.0
	for _, s := range []float64{5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600} {
		step = s
		if span/s <= 10 {
			break
		}
	}
	var ts []plot.Tick
	for v := math.Ceil(min/step) * step; v <= max+1e-9; v += step {
		sec := int(math.Round(v))
		ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprintf("%02d:%02d", sec/60, sec%60)})
		for m := 1; m < 5 && step >= 10; m++ {
			if mv := v + float64(m)*step/5; mv <= max {
				ts = append(ts, plot.Tick{Value: mv})
			}
		}
	}
	return ts
}

// nice ticks the value axis at 1, 2 or 5 × 10^k steps, labelled without
// trailing zeros (counts as integers).
type nice struct{}

func (nice) Ticks(min, max float64) []plot.Tick {
	span := max - min
	if span <= 0 {
		span = 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(span/5)))
	step := mag
	for _, f := range []float64{1, 2, 5, 10} {
		step = f * mag
		if span/step <= 6 {
			break
		}
	}
	prec := int(math.Max(0, -math.Floor(math.Log10(step)+1e-9)))
	var ts []plot.Tick
	for v := math.Ceil(min/step) * step; v <= max+step*1e-9; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', prec, 64)})
		if mv := v + step/2; mv <= max {
			ts = append(ts, plot.Tick{Value: mv})
		}
	}
	return ts
}

// Render writes the panel as a Width×Height PNG.
func Render(w io.Writer, pn Panel) error {
	scale, unit := unitScale(pn.Unit)
	p := plot.New()
	p.Title.Text = pn.Title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.X.Label.Text = "time since start (mm:ss)"
	p.Y.Label.Text = unit
	p.X.Tick.Marker = mmss{}
	p.Y.Tick.Marker = nice{}
	p.Title.Padding = vg.Points(6)
	p.Add(plotter.NewGrid())
	p.X.Min = 0
	end := pn.End
	p.Y.Min = 0
	p.Y.Max = 1
	if pn.Unit == "percent" || pn.Unit == "percentunit" {
		p.Y.Max = 100
	}
	leg := plot.NewLegend()
	leg.Top = true
	leg.Left = true
	leg.TextStyle.Font.Size = vg.Points(8.5)
	leg.ThumbnailWidth = vg.Points(20)
	ss := keepLargest(pn.Series, MaxSeries)
	for i, s := range ss {
		xys := make(plotter.XYs, 0, len(s.Points))
		for _, pt := range s.Points {
			if math.IsNaN(pt.V) || math.IsInf(pt.V, 0) {
				continue
			}
			v := pt.V * scale
			xys = append(xys, plotter.XY{X: pt.T.Sub(pn.Start).Seconds(), Y: v})
			p.Y.Max = math.Max(p.Y.Max, v)
			p.Y.Min = math.Min(p.Y.Min, v)
			if pt.T.After(end) {
				end = pt.T
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.6)
		l.Dashes = plotutil.Dashes(i % 3)
		p.Add(l)
		leg.Add(abbreviate(s.Label), l)
	}
	if p.Y.Max > 1 && pn.Unit != "percent" && pn.Unit != "percentunit" {
		p.Y.Max *= 1.08
	}
	p.X.Max = math.Max(end.Sub(pn.Start).Seconds(), 10)
	if len(ss) == 0 {
		leg.Add("(no data)")
	}

	wpt, hpt := vg.Length(Width)*72/dpi, vg.Length(Height)*72/dpi
	img := vgimg.NewWith(vgimg.UseWH(wpt, hpt), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	// The legend gets a column on the right, as wide as its longest entry.
	var lw vg.Length
	for _, s := range ss {
		lw = max(lw, leg.TextStyle.Width(abbreviate(s.Label)))
	}
	lw = min(max(lw+leg.ThumbnailWidth+vg.Points(14), vg.Points(70)), wpt/2)
	plotC := draw.Crop(dc, 0, -lw, 0, 0)
	legC := draw.Crop(dc, wpt-lw+vg.Points(4), 0, vg.Points(6), -vg.Points(28))
	p.Draw(plotC)
	leg.Draw(legC)
	png := vgimg.PngCanvas{Canvas: img}
	bw := bufio.NewWriter(w)
	if _, err := png.WriteTo(bw); err != nil {
		return err
	}
	return bw.Flush()
}

// WriteFile renders the panel to path.
func WriteFile(path string, pn Panel) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Render(f, pn); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Slug is a file name for a panel title: lower case, words joined by -.
func Slug(title string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(title) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		} else {
			dash = true
		}
	}
	return b.String()
}
