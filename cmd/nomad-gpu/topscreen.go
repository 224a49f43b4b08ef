package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"

	"github.com/nomad-gpu/nomad-gpu/topview"
)

// topScreen is where top draws.
type topScreen struct {
	out io.Writer
	// width is the line length to fit now (a terminal may be resized);
	// nil is topview.DefaultWidth.
	width func() int
	// keys are what the operator types, one read each; nil when stdin is
	// no terminal.
	keys <-chan []byte
}

func (s topScreen) lineWidth() int {
	if s.width == nil {
		return topview.DefaultWidth
	}
	return s.width()
}

// draw clears the screen and draws a frame with a footer: the keys when
// interactive, else how often it refreshes.
func (s topScreen) draw(f topFrame, ui topUI, interval time.Duration) error {
	width := s.lineWidth()
	var b bytes.Buffer
	b.WriteString(ansiClear)
	if f.err != nil {
		fmt.Fprintf(&b, "nomad-gpu top  %s\n\n%s\n", time.Now().UTC().Format("2006-01-02 15:04:05 UTC"), topview.Cut("error: "+f.err.Error(), width))
	} else {
		_ = topview.WriteTable(&b, f.view, topview.TableOptions{Width: width, Sort: ui.sort, Filter: ui.filter})
	}
	footer := fmt.Sprintf("refresh every %v; Ctrl-C quits", interval)
	if s.keys != nil {
		footer = ui.footer()
	}
	b.WriteString("\n" + topview.Cut(footer, width) + "\n")
	_, err := s.out.Write(b.Bytes())
	return err
}

// openScreen is the screen on stdout: as wide as -width, else as the
// terminal stdout is (80 columns when it is none). When top redraws and
// stdin and stdout are terminals it reads keys too: stdin is put in raw
// mode, which restore undoes; restore must run on every way out.
func openScreen(o *topOptions, stdin *os.File, stdout io.Writer) (scr topScreen, restore func(), err error) {
	scr, restore = topScreen{out: stdout}, func() {}
	outFd, outTTY := terminalFd(stdout)
	switch {
	case o.width > 0:
		scr.width = func() int { return o.width }
	case outTTY:
		scr.width = func() int { return terminalWidth(outFd) }
	}
	inFd := int(stdin.Fd())
	if o.json || o.once || !outTTY || !term.IsTerminal(inFd) {
		return scr, restore, nil
	}
	state, err := term.MakeRaw(inFd)
	if err != nil {
		return scr, restore, fmt.Errorf("reading keys: %w", err)
	}
	restore = func() { _ = term.Restore(inFd, state) }
	// Raw mode also stops the terminal turning "\n" into "\r\n".
	scr.out = crlfWriter{stdout}
	scr.keys = readKeys(stdin)
	return scr, restore, nil
}

// terminalFd is w's file descriptor when w is a terminal.
func terminalFd(w io.Writer) (int, bool) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	return int(f.Fd()), true
}

// terminalWidth is the width of terminal fd now, topview.DefaultWidth
// when it cannot say.
func terminalWidth(fd int) int {
	if w, _, err := term.GetSize(fd); err == nil && w > 0 {
		return w
	}
	return topview.DefaultWidth
}

// readKeys sends what each read of r returns until it fails, then closes
// the channel. It outlives the watch loop blocked in a read; the process
// ends it.
func readKeys(r io.Reader) <-chan []byte {
	keys := make(chan []byte)
	go func() {
		defer close(keys)
		buf := make([]byte, 64)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				keys <- bytes.Clone(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	return keys
}

// crlfWriter ends lines with "\r\n", as a terminal in raw mode needs.
type crlfWriter struct{ w io.Writer }

func (c crlfWriter) Write(p []byte) (int, error) {
	if _, err := c.w.Write(bytes.ReplaceAll(p, []byte("\n"), []byte("\r\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}
