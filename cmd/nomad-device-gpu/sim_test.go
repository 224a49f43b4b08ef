package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nomad-gpu/nomad-gpu/gpu"
)

// simNode opens a sim node on a new control file, as the running plugin
// does, and returns the file and the node's first two GPU UUIDs.
func simNode(t *testing.T) (string, []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sim.json")
	inv, err := gpu.Open(gpu.Config{Backend: "sim", Sim: gpu.SimConfig{System: "dgxh100", Seed: "cli", ControlFile: path}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	inv.Close()
	st, err := gpu.ReadControl(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, st.Devices()
}

// Every sim command refuses what would drive nothing (a control file no
// node made, a device no node has, an XID NVIDIA does not define) with an
// error naming the flag, and exit status 2; a unique prefix of a UUID is
// taken for the whole UUID, which the command prints.
func TestSimRefusesBadInput(t *testing.T) {
	file, uuids := simNode(t)
	missing := filepath.Join(t.TempDir(), "typo.json")
	short := uuids[0][:len("GPU-")+8] // as nomad-gpu top shows it
	cases := []struct {
		name   string
		args   []string
		code   int
		output string   // on stderr when code != 0, else on stdout
		stored []string // what the control file must then hold
	}{
		{"missing control file", []string{"--control-file", missing, "clear"}, 2,
			"sim clear: --control-file " + missing + " does not exist; a running sim node creates it", nil},
		{"unknown device", []string{"--control-file", file, "xid", "--device", "GPU-bogus", "--xid", "79"}, 2,
			`sim xid: --device: "GPU-bogus" is no device of the sim node(s) of this control file; allowed: a GPU- or MIG- UUID, or a unique prefix of one, of ` + uuids[0], nil},
		{"XID beyond NVIDIA's", []string{"--control-file", file, "xid", "--device", uuids[0], "--xid", "9999"}, 2,
			"sim xid: --xid 9999 is not an XID; allowed: 1 to 176", nil},
		{"XID missing", []string{"--control-file", file, "xid", "--device", uuids[0]}, 2, "sim xid: --xid is required", nil},
		{"ambiguous prefix", []string{"--control-file", file, "util", "--device", "GPU-", "--gpu", "50"}, 2,
			`sim util: --device: "GPU-" is a prefix of 8 devices (` + uuids[0] + ", " + uuids[1], nil},
		{"utilisation over 100", []string{"--control-file", file, "util", "--device", uuids[0], "--mem", "101"}, 2,
			"sim util: --mem 101 is out of range; allowed: 0 to 100", nil},
		{"proc on an unknown device", []string{"--control-file", file, "proc", "--device", "MIG-nope", "--pid", "7", "--mib", "1"}, 2,
			`sim proc: --device: "MIG-nope" is no device`, nil},
		{"XID on a short ID", []string{"--control-file", file, "xid", "--device", short, "--xid", "79"}, 0,
			"XID 79 (GPU has fallen off the bus) injected on " + uuids[0], []string{`"uuid": "` + uuids[0] + `"`, `"xid": 79`}},
		{"proc on a short ID", []string{"--control-file", file, "proc", "--device", strings.ToUpper(short), "--pid", "7", "--mib", "3"}, 0,
			uuids[0] + ": process 7 uses 3 MiB", []string{`"pid": 7`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, _ := gpu.ReadControl(file)
			var stdout, stderr bytes.Buffer
			code := runSim(c.args, &stdout, &stderr)
			out := stdout.String()
			if c.code != 0 {
				out = stderr.String()
			}
			if code != c.code || !strings.Contains(out, c.output) {
				t.Fatalf("exit %d, output %q %q; want exit %d and %q", code, stdout.String(), stderr.String(), c.code, c.output)
			}
			after, _ := gpu.ReadControl(file)
			if c.code != 0 {
				if !equalState(before, after) {
					t.Errorf("a refused command changed the control file: %+v", after)
				}
				return
			}
			var shown bytes.Buffer
			runSim([]string{"--control-file", file, "show"}, &shown, &stderr)
			for _, s := range c.stored {
				if !strings.Contains(shown.String(), s) {
					t.Errorf("control file lacks %s:\n%s", s, shown.String())
				}
			}
		})
	}
}

func equalState(a, b gpu.ControlState) bool {
	return a.LastEventID == b.LastEventID && len(a.XIDEvents) == len(b.XIDEvents) &&
		len(a.Utilization) == len(b.Utilization) && slices.Equal(a.Processes, b.Processes)
}

// docs/install.md's XID example and make dev's banner name a GPU of the dev node
// itself, so the command works as pasted: the sim node's UUIDs derive
// from its seed, which internal/devscript/dev.sh sets.
func TestDevNodeExamplesNameItsGPU(t *testing.T) {
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	dev, readme := read("internal/devscript/dev.sh"), read("docs/install.md")
	field := func(name string) string {
		m := regexp.MustCompile(`(?m)^\s*` + name + `\s*=\s*"([^"]+)"`).FindStringSubmatch(dev)
		if m == nil {
			t.Fatalf("internal/devscript/dev.sh sets no sim %s", name)
		}
		return m[1]
	}
	path := filepath.Join(t.TempDir(), "sim.json")
	inv, err := gpu.Open(gpu.Config{Backend: "sim", Sim: gpu.SimConfig{System: field("system"), Seed: field("seed"), ControlFile: path}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	inv.Close()
	st, err := gpu.ReadControl(path)
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`xid --device (GPU-[0-9a-f-]+)`).FindAllStringSubmatch(readme, -1)
	if g := regexp.MustCompile(`(?m)^DEV_GPU0="(GPU-[0-9a-f-]+)"`).FindStringSubmatch(dev); g != nil {
		named = append(named, g)
	} else {
		t.Error("internal/devscript/dev.sh sets no DEV_GPU0")
	}
	if len(named) < 2 {
		t.Fatalf("docs/install.md names no device in an xid example")
	}
	for _, m := range named {
		if _, err := st.ResolveDevice(m[1]); err != nil {
			t.Errorf("%s is no GPU of make dev's node: %v", m[1], err)
		}
	}
}
