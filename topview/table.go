package topview

import (
	"strings"
	"unicode/utf8"
)

// column is one column of a textTable.
type column struct {
	head  string
	right bool // aligned right, as numbers are
	// want > 0 makes the column elastic: its cells are cut to want
	// characters (with "…") before optional columns are dropped, and down
	// to min (at least the header's width) after; room left over widens
	// it again.
	want, min int
	// drop > 0 makes the column optional: when the table is too wide the
	// optional columns go, highest drop first; extra ones before elastic
	// columns are cut below want, the others only when cutting them to min
	// is not enough.
	drop  int
	extra bool
}

// tableRow is one row of cells, and a note drawn on its own line beneath
// it.
type tableRow struct {
	cells []string
	note  string
}

// textTable is a table drawn to fit a width.
type textTable struct {
	indent string
	cols   []column
	rows   []tableRow
	// wrapNotes wraps notes to the width instead of cutting them: for
	// notes that are the answer (why a job waits), not a detail.
	wrapNotes bool
}

func (t *textTable) add(note string, cells ...string) {
	t.rows = append(t.rows, tableRow{cells: cells, note: note})
}

// textWidth is how many columns s takes on a terminal: one per rune, which
// holds for the text drawn here (ASCII, box drawing, "…").
func textWidth(s string) int { return utf8.RuneCountInString(s) }

// Cut shortens s to n columns, ending it with "…" when it loses any: a
// line fitted to a width as WriteTable fits its own.
func Cut(s string, n int) string {
	r := []rune(s)
	switch {
	case len(r) <= n:
		return s
	case n <= 0:
		return ""
	}
	return string(r[:n-1]) + "…"
}

// layout picks the columns kept and their widths so that a line fits
// width where it can.
func (t *textTable) layout(width int) (keep []bool, w []int) {
	n := len(t.cols)
	keep, w = make([]bool, n), make([]int, n)
	natural := make([]int, n)
	for i, c := range t.cols {
		keep[i] = true
		natural[i] = textWidth(c.head)
		for _, r := range t.rows {
			natural[i] = max(natural[i], textWidth(r.cells[i]))
		}
		w[i] = natural[i]
		if c.want > 0 {
			w[i] = min(natural[i], max(c.want, textWidth(c.head)))
		}
	}
	total := func() int {
		sum, k := textWidth(t.indent), 0
		for i := range w {
			if keep[i] {
				sum, k = sum+w[i], k+1
			}
		}
		return sum + 2*max(k-1, 0)
	}
	dropWhileWide := func(extra bool) {
		for total() > width {
			i := t.nextDrop(keep, extra)
			if i < 0 {
				return
			}
			keep[i] = false
		}
	}
	dropWhileWide(true)
	for excess := total() - width; excess > 0; excess-- {
		if !t.resize(keep, w, func(i int) bool { return w[i] > max(t.cols[i].min, textWidth(t.cols[i].head)) }, -1) {
			break
		}
	}
	dropWhileWide(false)
	for room := width - total(); room > 0; room-- {
		if !t.resize(keep, w, func(i int) bool { return w[i] < natural[i] }, +1) {
			break
		}
	}
	return keep, w
}

// nextDrop is the kept optional column, extra or not, to drop first; -1
// when none is left.
func (t *textTable) nextDrop(keep []bool, extra bool) int {
	best := -1
	for i, c := range t.cols {
		if keep[i] && c.drop > 0 && c.extra == extra && (best < 0 || c.drop > t.cols[best].drop) {
			best = i
		}
	}
	return best
}

// resize narrows (by -1) the widest, or widens (+1) the narrowest, kept
// elastic column that may change; false when none may.
func (t *textTable) resize(keep []bool, w []int, may func(int) bool, by int) bool {
	best := -1
	for i, c := range t.cols {
		if !keep[i] || c.want == 0 || !may(i) {
			continue
		}
		if best < 0 || w[i]*by < w[best]*by {
			best = i
		}
	}
	if best < 0 {
		return false
	}
	w[best] += by
	return true
}

// write draws the table within width columns where it can: optional
// columns dropped, elastic ones cut, notes cut. A table whose fixed
// columns alone are wider is drawn as narrow as it gets.
func (t *textTable) write(b *strings.Builder, width int) {
	keep, w := t.layout(width)
	line := make([]string, 0, len(t.cols))
	draw := func(cells []string) {
		line = line[:0]
		for i, c := range cells {
			if !keep[i] {
				continue
			}
			s := Cut(c, w[i])
			pad := strings.Repeat(" ", w[i]-textWidth(s))
			if t.cols[i].right {
				s = pad + s
			} else {
				s += pad
			}
			line = append(line, s)
		}
		b.WriteString(strings.TrimRight(t.indent+strings.Join(line, "  "), " ") + "\n")
	}
	heads := make([]string, len(t.cols))
	for i, c := range t.cols {
		heads[i] = c.head
	}
	draw(heads)
	for _, r := range t.rows {
		draw(r.cells)
		switch {
		case r.note == "":
		case t.wrapNotes:
			for _, l := range wrapWords(r.note, width-textWidth(t.indent)-2) {
				b.WriteString(t.indent + "  " + l + "\n")
			}
		default:
			b.WriteString(Cut(t.indent+"  "+r.note, width) + "\n")
		}
	}
}

// writeWrapped writes parts joined by two spaces, starting a new line,
// indented by cont, where the next part would pass width; a part wider
// than a line is cut.
func writeWrapped(b *strings.Builder, parts []string, width int, cont string) {
	line := ""
	for _, p := range parts {
		switch {
		case line == "":
			line = Cut(p, width)
		case textWidth(line)+2+textWidth(p) <= width:
			line += "  " + p
		default:
			b.WriteString(line + "\n")
			line = Cut(cont+p, width)
		}
	}
	b.WriteString(line + "\n")
}

// wrapWords breaks s into lines of at most width columns at spaces; a
// word wider than a line has one of its own, whole.
func wrapWords(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case textWidth(line)+1+textWidth(w) <= width:
			line += " " + w
		default:
			lines = append(lines, line)
			line = w
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
