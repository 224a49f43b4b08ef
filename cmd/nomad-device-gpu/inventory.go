package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/devicefp"
	"github.com/nomad-gpu/nomad-gpu/gpu"
	"github.com/nomad-gpu/nomad-gpu/wire/device"
	"github.com/nomad-gpu/nomad-gpu/wire/schema"
)

type inventoryGroup struct {
	Device     string            `json:"device"`
	Vendor     string            `json:"vendor"`
	Type       string            `json:"type"`
	Name       string            `json:"name"`
	Attributes map[string]string `json:"attributes"`
	Instances  []inventoryDevice `json:"instances"`
}

type inventoryDevice struct {
	ID                string `json:"id"`
	Healthy           bool   `json:"healthy"`
	HealthDescription string `json:"health_description,omitempty"`
	PCIBusID          string `json:"pci_bus_id,omitempty"`
}

// runInventory prints what the plugin would report to Nomad, with the same
// code path the agent drives, so it is the first check on a new GPU box.
func runInventory(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inventory", flag.ContinueOnError)
	fs.SetOutput(stderr)
	simSystem := fs.String("sim", "", "use a simulated node instead of NVML: dgxa100, dgxh100, dgxh200 or dgxb200")
	seed := fs.String("seed", "", "sim: node identity for stable UUIDs (default: hostname)")
	migGPUs := fs.String("mig-gpus", "", "sim: comma-separated GPU indexes in MIG mode")
	migProfiles := fs.String("mig-profiles", "", "sim: comma-separated MIG profiles created on each of --mig-gpus")
	mpsGPUs := fs.String("mps-gpus", "", "GPUs offered as MPS shares: indexes, GPU- UUIDs or all")
	mpsShares := fs.Int("mps-shares", 2, "MPS shares per shared GPU")
	ignored := fs.String("ignore", "", "comma-separated GPU indexes or UUIDs to leave out")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := fs.Parse(args); err != nil {
		return 2
	}

	cfg := &devicefp.Config{}
	if err := schema.Decode(nil, cfg); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *simSystem != "" {
		cfg.Backend = "sim"
		cfg.Sim.System = *simSystem
		cfg.Sim.Seed = *seed
		if *migGPUs != "" || *migProfiles != "" {
			var gpus []int
			for _, s := range splitList(*migGPUs) {
				n, err := strconv.Atoi(s)
				if err != nil {
					fmt.Fprintf(stderr, "--mig-gpus: %q is not a GPU index\n", s)
					return 2
				}
				gpus = append(gpus, n)
			}
			cfg.Sim.MIG = []gpu.MIGLayout{{GPUs: gpus, Profiles: splitList(*migProfiles)}}
		}
	}
	if *mpsGPUs != "" {
		cfg.MPS = []devicefp.MPSConfig{{GPUs: splitList(*mpsGPUs), Shares: *mpsShares}}
	}
	cfg.IgnoredGPUIDs = splitList(*ignored)

	p := devicefp.New(hclog.NewNullLogger())
	defer p.Close()
	if err := p.SetConfig(cfg, nil); err != nil {
		fmt.Fprintf(stderr, "config: %v\n", err)
		return 1
	}
	fp, err := p.CurrentFingerprint()
	if err != nil {
		fmt.Fprintf(stderr, "GPU inventory failed: %v\n", err)
		return 1
	}
	groups := toInventory(fp)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(groups); err != nil {
			return 1
		}
		return 0
	}
	printInventory(stdout, groups)
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func toInventory(fp *device.Fingerprint) []inventoryGroup {
	out := make([]inventoryGroup, 0, len(fp.Groups))
	for _, g := range fp.Groups {
		ig := inventoryGroup{
			Device: g.Vendor + "/" + g.Type + "/" + g.Name,
			Vendor: g.Vendor, Type: g.Type, Name: g.Name,
			Attributes: map[string]string{},
		}
		for k, a := range g.Attributes {
			ig.Attributes[k] = a.Text()
		}
		for _, d := range g.Devices {
			ig.Instances = append(ig.Instances, inventoryDevice{ID: d.ID, Healthy: d.Healthy, HealthDescription: d.HealthDescription, PCIBusID: d.PCIBusID})
		}
		out = append(out, ig)
	}
	return out
}

func printInventory(w io.Writer, groups []inventoryGroup) {
	if len(groups) == 0 {
		fmt.Fprintln(w, "No GPUs found.")
		return
	}
	for i, g := range groups {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if g.Type == contract.SliceLayout {
			fmt.Fprintf(w, "%s  (the GPU's layout; nothing is placed on it)\n", g.Device)
		} else {
			fmt.Fprintf(w, "%s  (%d instances; jobspec: device \"%s/%s\" or \"%s\")\n", g.Device, len(g.Instances), g.Vendor, g.Type, g.Device)
		}
		keys := make([]string, 0, len(g.Attributes))
		for k := range g.Attributes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
		for _, k := range keys {
			fmt.Fprintf(tw, "  %s\t= %s\n", k, g.Attributes[k])
		}
		tw.Flush()
		if g.Type == contract.SliceLayout {
			continue
		}
		tw = tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "  ID\tHEALTHY\tPCI BUS ID\tHEALTH DESCRIPTION")
		for _, d := range g.Instances {
			fmt.Fprintf(tw, "  %s\t%t\t%s\t%s\n", d.ID, d.Healthy, d.PCIBusID, d.HealthDescription)
		}
		tw.Flush()
	}
}
