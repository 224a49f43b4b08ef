package snapshot

import (
	"bufio"
	"image/color"
	"io"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Chart is a line chart in its own axis units. Render draws a Panel as
// one; packages whose X axis is not wall-clock time (the trace replay
// report) draw theirs directly, so that every PNG of the repository has
// the same size, fonts and legend column.
type Chart struct {
	Title, XLabel, YLabel string
	// XTicks marks the X axis; nil marks it at 1, 2 or 5 × 10^k steps,
	// as the Y axis is.
	XTicks plot.Ticker
	// The axes' ranges: the caller knows what its data should be seen
	// against (0–100 for percentages), so nothing is fitted here.
	XMin, XMax, YMin, YMax float64
	Lines                  []Line
}

// Line is one series of a Chart.
type Line struct {
	Label string
	XYs   plotter.XYs
	// Color and Dashes index plotutil's colours and dash patterns, so
	// that related lines (one configuration's allocated and busy GPUs)
	// can share a colour.
	Color, Dashes int
	// Step draws each point's Y until the next point's X: how a sampled
	// state that only changes at events is read.
	Step bool
}

// Render writes the chart as a Width×Height PNG.
func (c Chart) Render(w io.Writer) error {
	p := plot.New()
	p.Title.Text = c.Title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	p.X.Tick.Marker = c.XTicks
	if p.X.Tick.Marker == nil {
		p.X.Tick.Marker = nice{}
	}
	p.Y.Tick.Marker = nice{}
	p.Add(plotter.NewGrid())
	p.X.Min, p.X.Max = c.XMin, c.XMax
	p.Y.Min, p.Y.Max = c.YMin, c.YMax

	leg := plot.NewLegend()
	leg.Top = true
	leg.Left = true
	leg.TextStyle.Font.Size = vg.Points(8.5)
	leg.ThumbnailWidth = vg.Points(20)
	// The legend gets a column on the right, as wide as its longest entry.
	var lw vg.Length
	for i, ln := range c.Lines {
		l, err := plotter.NewLine(ln.XYs)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(ln.Color)
		l.Width = vg.Points(1.6)
		l.Dashes = plotutil.Dashes(ln.Dashes)
		if ln.Step {
			l.StepStyle = plotter.PostStep
		}
		p.Add(l)
		leg.Add(c.Lines[i].Label, l)
		lw = max(lw, leg.TextStyle.Width(ln.Label))
	}
	if len(c.Lines) == 0 {
		leg.Add("(no data)")
	}

	wpt, hpt := vg.Length(Width)*72/dpi, vg.Length(Height)*72/dpi
	img := vgimg.NewWith(vgimg.UseWH(wpt, hpt), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	lw = min(max(lw+leg.ThumbnailWidth+vg.Points(14), vg.Points(70)), wpt/2)
	p.Draw(draw.Crop(dc, 0, -lw, 0, 0))
	leg.Draw(draw.Crop(dc, wpt-lw+vg.Points(4), 0, vg.Points(6), -vg.Points(28)))
	bw := bufio.NewWriter(w)
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(bw); err != nil {
		return err
	}
	return bw.Flush()
}

// WriteFile renders the chart to path.
func (c Chart) WriteFile(path string) error { return writeFile(path, c.Render) }

func writeFile(path string, render func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := render(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
