package main

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/nomad-gpu/nomad-gpu/topview"
)

// Keys of interactive top other than letters. The terminal is in raw mode,
// so Ctrl-C arrives as a key, not as SIGINT.
const (
	keyCtrlC     = 0x03
	keyCtrlH     = 0x08 // backspace on some terminals
	keyEnter     = '\r'
	keyNewline   = '\n'
	keyEsc       = 0x1b
	keyBackspace = 0x7f
)

// sortKeys are the keys that sort, and what by.
var sortKeys = map[rune]topview.SortKey{
	'n': topview.SortNode, 'u': topview.SortUtil, 'm': topview.SortMemory, 'w': topview.SortWait,
}

// maxFilter bounds the filter typed, which is drawn in the header.
const maxFilter = 40

// topUI is what the operator chose in interactive top.
type topUI struct {
	sort    topview.SortKey
	filter  string
	editing bool // the filter is being typed
	quit    bool
}

// press is the UI after key k. q and Ctrl-C quit; n, u, m and w sort by
// node, utilisation, memory and wait; / starts typing a filter, which
// applies as it is typed, Enter keeps it and Esc clears it; Esc also clears
// a filter kept. While a filter is typed every printable key is text (q
// too); only Ctrl-C quits.
func (u topUI) press(k rune) topUI {
	if k == keyCtrlC {
		u.quit = true
		return u
	}
	if u.editing {
		switch {
		case k == keyEnter || k == keyNewline:
			u.editing = false
		case k == keyEsc:
			u.editing, u.filter = false, ""
		case k == keyBackspace || k == keyCtrlH:
			if _, size := utf8.DecodeLastRuneInString(u.filter); size > 0 {
				u.filter = u.filter[:len(u.filter)-size]
			}
		case unicode.IsPrint(k) && utf8.RuneCountInString(u.filter) < maxFilter:
			u.filter += string(k)
		}
		return u
	}
	switch {
	case k == 'q':
		u.quit = true
	case k == '/':
		u.editing = true
	case k == keyEsc:
		u.filter = ""
	case sortKeys[k] != "":
		u.sort = sortKeys[k]
	}
	return u
}

// keysOf splits what one read from the terminal returned into keys. A read
// that starts with Esc and goes on is an escape sequence (an arrow key, a
// function key, Alt with a key), none of which top binds: it is dropped
// whole rather than read as Esc and letters.
func keysOf(chunk []byte) []rune {
	if len(chunk) > 1 && chunk[0] == keyEsc {
		return nil
	}
	var out []rune
	for len(chunk) > 0 {
		r, size := utf8.DecodeRune(chunk)
		chunk = chunk[size:]
		if r != utf8.RuneError {
			out = append(out, r)
		}
	}
	return out
}

// footer is the help line under an interactive frame: the keys, or the
// filter being typed. It fits the narrowest -width.
func (u topUI) footer() string {
	if u.editing {
		return fmt.Sprintf("filter: %s_   Enter keeps it, Esc clears it", u.filter)
	}
	sort := u.sort
	if sort == "" {
		sort = topview.SortNode
	}
	unfilter := ""
	if u.filter != "" {
		unfilter = "  Esc unfilter"
	}
	return fmt.Sprintf("[n]ode [u]til [m]em [w]ait: %s  / filter%s  q quit", sort, unfilter)
}
