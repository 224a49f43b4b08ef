package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A node records its devices in its control file when it opens, creating
// the file; another node adds its own, a reopened node replaces its
// record, and Clear keeps them all.
func TestNodesRecordTheirDevices(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctl.json")
	open := func(seed string, mig []MIGLayout) *Server {
		t.Helper()
		srv, err := New(Config{System: "dgxh100", Seed: seed, MIG: mig, ControlFile: path}, nil)
		if err != nil {
			t.Fatal(err)
		}
		srv.Shutdown()
		return srv
	}
	open("a", nil)
	open("b", nil)
	a := open("a", []MIGLayout{{GPUs: []int{1}, Profiles: []string{"3g.40gb", "3g.40gb"}}})
	if err := OpenControl(path).Clear(); err != nil {
		t.Fatal(err)
	}
	st, err := ReadControl(path)
	if err != nil {
		t.Fatal(err)
	}
	if keys := slices.Sorted(func(yield func(string) bool) {
		for k := range st.Nodes {
			yield(k)
		}
	}); !slices.Equal(keys, []string{"dgxh100/a", "dgxh100/b"}) {
		t.Fatalf("nodes %v, want dgxh100/a and dgxh100/b", keys)
	}
	var want []string
	for _, d := range a.devices {
		want = append(want, d.uuid)
		for _, m := range d.migs {
			want = append(want, m.uuid)
		}
	}
	if got := st.Nodes["dgxh100/a"]; !slices.Equal(got.Devices, want) || got.Seed != "a" || got.Opened.IsZero() {
		t.Fatalf("node a recorded %+v, want devices %v", got, want)
	}
	if len(want) != 10 || !strings.HasPrefix(want[2], "MIG-") {
		t.Fatalf("want 8 GPUs and GPU 1's 2 MIG instances after it, got %v", want)
	}
}

func TestResolveDevice(t *testing.T) {
	node := NodeDevices{Devices: []string{"GPU-1c0d2a3b-0000-8000-8000-000000000001", "GPU-1c0d9999-0000-8000-8000-000000000002", "MIG-6a2f0000-0000-8000-8000-000000000003"}}
	st := ControlState{Nodes: map[string]NodeDevices{"dgxh100/a": node}}
	many := ControlState{Nodes: map[string]NodeDevices{"dgxh100/a": {}}}
	for i := range 10 {
		n := many.Nodes["dgxh100/a"]
		n.Devices = append(n.Devices, fmt.Sprintf("GPU-%08d", i))
		many.Nodes["dgxh100/a"] = n
	}
	cases := []struct {
		name, id string
		st       ControlState
		want     string // the UUID, or what the error says
		err      bool
	}{
		{"whole UUID", node.Devices[2], st, node.Devices[2], false},
		{"other case", strings.ToUpper(node.Devices[0]), st, node.Devices[0], false},
		{"short form of nomad-gpu top", "GPU-1c0d2a3b", st, node.Devices[0], false},
		{"unique MIG prefix", "MIG-6", st, node.Devices[2], false},
		{"ambiguous prefix", "GPU-1c0d", st, `"GPU-1c0d" is a prefix of 2 devices (` + node.Devices[0] + ", " + node.Devices[1] + "); give more of the UUID", true},
		{"unknown", "GPU-bogus", st, `"GPU-bogus" is no device of the sim node(s) of this control file; allowed: a GPU- or MIG- UUID, or a unique prefix of one, of ` + strings.Join(node.Devices, ", "), true},
		{"longer than any UUID", node.Devices[0] + "0", st, "is no device", true},
		{"many devices listed in part", "GPU-x", many, "GPU-00000007 and 2 more (`sim show` lists them all)", true},
		{"no node recorded", "GPU-1", ControlState{}, "the control file lists no node's devices", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.st.ResolveDevice(c.id)
			if c.err {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("ResolveDevice(%q) = %q, %v; want an error saying %q", c.id, got, err, c.want)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("ResolveDevice(%q) = %q, %v; want %q", c.id, got, err, c.want)
			}
		})
	}
}

// A node whose control file's directory does not exist yet (a fresh
// machine's /var/lib/nomad-gpu) makes it, 0755, and records its devices.
func TestNodeMakesItsControlFilesDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "var", "lib", "nomad-gpu")
	path := filepath.Join(dir, "sim.json")
	srv, err := New(Config{System: "dgxh100", Seed: "fresh", ControlFile: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	st, err := ReadControl(path)
	if err != nil || len(st.Nodes["dgxh100/fresh"].Devices) != 8 {
		t.Fatalf("control file %s: nodes %v, %v; want the node's 8 GPUs", path, st.Nodes, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("%s: %v, %v; want a directory of mode 0755", dir, fi, err)
	}
}
