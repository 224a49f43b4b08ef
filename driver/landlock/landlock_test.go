package landlock

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	good := []struct {
		in   string
		want Rule
	}{
		{"r:/data/models", Rule{"/data/models", Read}},
		{"rw:/scratch", Rule{"/scratch", Read | Write}},
		{"wr:/scratch", Rule{"/scratch", Read | Write}},
		{"x:/opt/bin/tool", Rule{"/opt/bin/tool", Exec}},
		{"rwx:/", Rule{"/", Read | Write | Exec}},
		{"rx:/usr/lib", Rule{"/usr/lib", Read | Exec}},
		{"w:/dev/nvidia0", Rule{"/dev/nvidia0", Write}},
		// Only the first colon separates; a path may hold more.
		{"r:/data/a:b", Rule{"/data/a:b", Read}},
	}
	for _, tc := range good {
		got, err := ParseRule(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}

	bad := []struct {
		in      string
		wantErr string // the whole message, or a part of it after "…"
	}{
		{"rw/data", `"rw/data": want "<modes>:<absolute path>", e.g. "r:/data/models"`},
		{"", `"": want "<modes>:<absolute path>", e.g. "r:/data/models"`},
		{"r:", `"r:": want "<modes>:<absolute path>"`},
		{"r:data", `"r:data": want "<modes>:<absolute path>"`},
		{"/data", `"/data": want "<modes>:<absolute path>"`},
		{":/data", `":/data": no modes before ":", want a non-empty subset of "rwx"`},
		{"rz:/data", `"rz:/data": unknown mode 'z', want a subset of "rwx"`},
		{"R:/data", `"R:/data": unknown mode 'R'`},
		{" r:/data", `" r:/data": unknown mode ' '`},
		{"rr:/data", `"rr:/data": mode 'r' given twice`},
		{"r:/data/", `"r:/data/": path "/data/" is not clean, want "/data"`},
		{"r:/data/../etc", `path "/data/../etc" is not clean, want "/etc"`},
		{"r://data", `path "//data" is not clean, want "/data"`},
		{"r:/data/./x", `path "/data/./x" is not clean, want "/data/x"`},
		{"r:/da\x00ta", `path holds a NUL byte`},
	}
	for _, tc := range bad {
		got, err := ParseRule(tc.in)
		if err == nil {
			t.Errorf("ParseRule(%q) = %+v, want an error", tc.in, got)
			continue
		}
		if !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ParseRule(%q) error %q, want it to contain %q", tc.in, err, tc.wantErr)
		}
	}
}

func TestAccessString(t *testing.T) {
	for _, tc := range []struct {
		a    Access
		want string
	}{
		{0, "none"},
		{Read, "r"},
		{Write, "w"},
		{Exec, "x"},
		{Read | Write, "rw"},
		{Read | Exec, "rx"},
		{Write | Exec, "wx"},
		{Read | Write | Exec, "rwx"},
		{1 << 3, "Access(0x8)"},
		{Read | 1<<7, "Access(0x81)"},
	} {
		if got := tc.a.String(); got != tc.want {
			t.Errorf("Access(%#x).String() = %q, want %q", uint8(tc.a), got, tc.want)
		}
	}
}

// The shim gets its rules as JSON and the plugin logs them as strings; both
// must come back unchanged.
func TestRuleRoundTrip(t *testing.T) {
	for _, s := range []string{"r:/data/models", "rw:/scratch", "rwx:/", "x:/bin/sh", "wx:/a:b"} {
		r, err := ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		if r.String() != s {
			t.Errorf("ParseRule(%q).String() = %q", s, r.String())
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Rule
		if err := json.Unmarshal(b, &back); err != nil || back != r {
			t.Errorf("JSON %s came back as %+v, %v", b, back, err)
		}
	}
}

func TestRestrictThreadRejectsBadRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Rule
		want string
	}{
		{"relative", Rule{"data", Read}, "want an absolute path"},
		{"empty path", Rule{"", Read}, "want an absolute path"},
		{"no access", Rule{"/data", 0}, "want a non-empty subset of rwx"},
		{"unknown access", Rule{"/data", 1 << 5}, "want a non-empty subset of rwx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Rejected before anything touches the thread, so it is safe
			// to call from a test goroutine.
			_, err := RestrictThread([]Rule{{"/", Read}, tc.r}, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RestrictThread error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestAllows(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	rules := []Rule{
		{Path: "/opt", Access: Read},
		{Path: "/opt/tool", Access: Exec},
		{Path: "/data/file", Access: Read | Write},
		{Path: link, Access: Read | Exec},
	}
	cases := []struct {
		path string
		a    Access
		want bool
	}{
		{"/opt/tool/bin/run", Read | Exec, true}, // rights of the rules above add up
		{"/opt/other/run", Read | Exec, false},
		{"/opt", Read, true},
		{"/optional/run", Read, false}, // a name that starts like a rule's is not beneath it
		{"/data/file", Write, true},
		{"/data/file2", Read, false},
		{filepath.Join(real, "x"), Read | Exec, true}, // the rule binds the link's target
		{filepath.Join(link, "x"), Read | Exec, true},
	}
	for _, c := range cases {
		if got := Allows(rules, c.path, c.a); got != c.want {
			t.Errorf("Allows(%s, %v) = %v, want %v", c.path, c.a, got, c.want)
		}
	}
	if !Allows([]Rule{{Path: "/", Access: Read}}, "/etc/passwd", Read) {
		t.Error("a rule on / does not cover /etc/passwd")
	}
}
