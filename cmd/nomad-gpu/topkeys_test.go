package main

import (
	"slices"
	"testing"

	"github.com/nomad-gpu/nomad-gpu/topview"
)

// Key handling is a function of the state and a key: each case types its
// keys from the state given and expects the state reached.
func TestTopUIPress(t *testing.T) {
	start := topUI{sort: topview.SortNode}
	tests := []struct {
		name string
		from topUI
		keys string
		want topUI
	}{
		{"q quits", start, "q", topUI{sort: "node", quit: true}},
		{"Ctrl-C quits", start, "\x03", topUI{sort: "node", quit: true}},
		{"sort by utilisation", start, "u", topUI{sort: "util"}},
		{"sort by memory, then wait, then node", start, "mwn", topUI{sort: "node"}},
		{"sort by wait", start, "w", topUI{sort: "wait"}},
		{"unbound keys do nothing", start, "xZ1 \t", start},
		{"/ starts a filter", start, "/", topUI{sort: "node", editing: true}},
		{"a filter is typed, Enter keeps it", start, "/gpu-1\r", topUI{sort: "node", filter: "gpu-1"}},
		{"a newline keeps it too", start, "/gpu\n", topUI{sort: "node", filter: "gpu"}},
		{"q and sort keys are text in a filter", start, "/qunm", topUI{sort: "node", filter: "qunm", editing: true}},
		{"Ctrl-C quits while typing", start, "/tr\x03", topUI{sort: "node", filter: "tr", editing: true, quit: true}},
		{"Backspace deletes", start, "/trainx\x7f\r", topUI{sort: "node", filter: "train"}},
		{"Ctrl-H deletes", start, "/ab\x08\x08\x08\r", topUI{sort: "node"}},
		{"Backspace deletes a whole rune", start, "/zü\x7f\r", topUI{sort: "node", filter: "z"}},
		{"Esc while typing clears", start, "/train\x1b", topUI{sort: "node"}},
		{"Esc clears a kept filter", topUI{sort: "util", filter: "train"}, "\x1b", topUI{sort: "util"}},
		{"/ edits the kept filter", topUI{sort: "util", filter: "train"}, "/2\r", topUI{sort: "util", filter: "train2"}},
		{"control keys are no text", start, "/a\x01\x02b\r", topUI{sort: "node", filter: "ab"}},
		{"the filter is bounded", start, "/" + string(slices.Repeat([]rune("x"), maxFilter+5)), topUI{sort: "node", filter: string(slices.Repeat([]rune("x"), maxFilter)), editing: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.from
			for _, k := range tc.keys {
				u = u.press(k)
			}
			if u != tc.want {
				t.Errorf("after %q: %+v, want %+v", tc.keys, u, tc.want)
			}
		})
	}
}

func TestKeysOf(t *testing.T) {
	tests := []struct {
		chunk string
		want  []rune
	}{
		{"q", []rune{'q'}},
		{"ab/", []rune{'a', 'b', '/'}},
		{"\x1b", []rune{0x1b}},
		{"\x1b[A", nil}, // up arrow
		{"\x1bOP", nil}, // F1
		{"zü", []rune{'z', 'ü'}},
		{"a\xffb", []rune{'a', 'b'}},
	}
	for _, tc := range tests {
		if got := keysOf([]byte(tc.chunk)); !slices.Equal(got, tc.want) {
			t.Errorf("keysOf(%q) = %q, want %q", tc.chunk, got, tc.want)
		}
	}
}

func TestTopUIFooter(t *testing.T) {
	tests := []struct {
		ui   topUI
		want string
	}{
		{topUI{}, "[n]ode [u]til [m]em [w]ait: node  / filter  q quit"},
		{topUI{sort: "memory"}, "[n]ode [u]til [m]em [w]ait: memory  / filter  q quit"},
		{topUI{sort: "memory", filter: "tr"}, "[n]ode [u]til [m]em [w]ait: memory  / filter  Esc unfilter  q quit"},
		{topUI{filter: "tr", editing: true}, "filter: tr_   Enter keeps it, Esc clears it"},
	}
	for _, tc := range tests {
		if got := tc.ui.footer(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.ui, got, tc.want)
		}
		if n := len([]rune(tc.ui.footer())); n > minTopWidth {
			t.Errorf("%+v: footer of %d columns, over %d", tc.ui, n, minTopWidth)
		}
	}
}
