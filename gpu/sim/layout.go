package sim

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Config describes a simulated node.
//
// The hcl tags make this struct the `sim { }` block of the device plugin's
// and the driver's config (package wire/schema reads them).
type Config struct {
	// System is the simulated machine: "dgxa100", "dgxh100", "dgxh200" or
	// "dgxb200" (eight GPUs each).
	System string `hcl:"system" default:"dgxh100"`
	// Seed is the node's identity: GPU and MIG UUIDs derive from (System,
	// Seed, GPU index, MIG placement), so the same seed gives the same UUIDs
	// across restarts and different seeds give different nodes. Empty means
	// the host name.
	Seed string `hcl:"seed"`
	// MIG lists the GPUs that run in MIG mode and the instances on them.
	MIG []MIGLayout `hcl:"mig,blocks"`
	// ControlFile is the path of the sim control file (see ControlState);
	// empty means the node cannot be driven from outside.
	ControlFile string `hcl:"control_file"`
	// ControlPoll is how often the control file is checked for changes;
	// 0 means 250ms.
	ControlPoll time.Duration
}

// MIGLayout enables MIG on some GPUs and creates instances on each of them.
type MIGLayout struct {
	// GPUs are the indexes of the GPUs this layout applies to.
	GPUs []int `hcl:"gpus"`
	// Profiles are the GPU instance profiles to create, e.g. "1g.10gb" or
	// "3g.40gb"; each gets one compute instance spanning all its slices.
	Profiles []string `hcl:"profiles"`
}

// Validate checks the config without building anything. Each problem is one
// line naming its field, e.g. `mig[0].gpus[1]: GPU 9 does not exist (dgxh100
// has GPUs 0-7)`; several problems are joined.
func (c Config) Validate() error {
	sys, ok := systems[c.System]
	if !ok {
		if c.System == "" {
			return fmt.Errorf("system: required; allowed: %s", strings.Join(Systems(), ", "))
		}
		return fmt.Errorf("system: %q is not a simulated system; allowed: %s", c.System, strings.Join(Systems(), ", "))
	}
	var errs []error
	if c.ControlFile != "" && !filepath.IsAbs(c.ControlFile) {
		// The device plugin and the driver run from different working
		// directories and must find the same file.
		errs = append(errs, fmt.Errorf("control_file: %q must be an absolute path", c.ControlFile))
	}
	if c.ControlPoll < 0 {
		errs = append(errs, fmt.Errorf("control_poll: %s is negative", c.ControlPoll))
	}
	owner := map[int]int{}
	for i, l := range c.MIG {
		if len(l.GPUs) == 0 {
			errs = append(errs, fmt.Errorf("mig[%d].gpus: empty; list the indexes of the GPUs this layout applies to", i))
		}
		for j, g := range l.GPUs {
			switch prev, dup := owner[g]; {
			case g < 0 || g >= len(sys.busIDs):
				errs = append(errs, fmt.Errorf("mig[%d].gpus[%d]: GPU %d does not exist (%s has GPUs 0-%d)", i, j, g, sys.name, len(sys.busIDs)-1))
			case dup && prev == i:
				errs = append(errs, fmt.Errorf("mig[%d].gpus[%d]: GPU %d is listed twice", i, j, g))
			case dup:
				errs = append(errs, fmt.Errorf("mig[%d].gpus[%d]: GPU %d is already in mig[%d]; a GPU has one layout", i, j, g, prev))
			default:
				owner[g] = i
			}
		}
		if _, err := sys.plan(l.Profiles); err != nil {
			var pe *profileError
			if errors.As(err, &pe) {
				errs = append(errs, fmt.Errorf("mig[%d].profiles[%d]: %w", i, pe.index, err))
			} else {
				errs = append(errs, fmt.Errorf("mig[%d].profiles: %w", i, err))
			}
		}
	}
	return errors.Join(errs...)
}

// profileError is a layout problem caused by a single entry.
type profileError struct {
	index int
	msg   string
}

func (e *profileError) Error() string { return e.msg }

// instance is one GPU instance of a planned layout.
type instance struct {
	profile   giProfile
	placement nvml.GpuInstancePlacement
}

// plan places the profiles on one GPU the way nvidia-smi would accept them:
// every instance on one of its profile's possible placements, no two
// overlapping, no profile used more often than its instance count. It keeps
// the given order and tries placements lowest first, so a layout always
// gets the same placements (and therefore the same MIG UUIDs).
func (s *system) plan(names []string) ([]instance, error) {
	insts := make([]instance, len(names))
	count := map[string]int{}
	for i, n := range names {
		p, ok := s.profileByName(n)
		if !ok {
			return nil, &profileError{i, fmt.Sprintf("%q is not a MIG profile of %s; allowed: %s",
				n, s.productName(), strings.Join(ProfileNames(s.name), ", "))}
		}
		insts[i].profile = p
		count[n]++
		if count[n] > int(p.info.InstanceCount) {
			return nil, &profileError{i, fmt.Sprintf("%q: at most %d instance(s) of this profile fit on %s", n, p.info.InstanceCount, s.productName())}
		}
	}
	placements := make([][]nvml.GpuInstancePlacement, len(insts))
	for i, in := range insts {
		placements[i] = s.placements(in.profile)
	}
	var used uint64 // bit k: memory/compute slot k is taken
	var place func(i int) bool
	place = func(i int) bool {
		if i == len(insts) {
			return true
		}
		for _, pl := range placements[i] {
			// Identical profiles are interchangeable; placing them in
			// increasing order prunes permutations of the same solution.
			if j := prevSame(insts, i); j >= 0 && pl.Start <= insts[j].placement.Start {
				continue
			}
			mask := slots(pl)
			if used&mask != 0 {
				continue
			}
			used |= mask
			insts[i].placement = pl
			if place(i + 1) {
				return true
			}
			used &^= mask
		}
		return false
	}
	if !place(0) {
		return nil, fmt.Errorf("%s do not fit together on one %s (no non-overlapping placement exists)",
			strings.Join(names, ", "), s.productName())
	}
	return insts, nil
}

func prevSame(insts []instance, i int) int {
	for j := i - 1; j >= 0; j-- {
		if insts[j].profile.info.Id == insts[i].profile.info.Id {
			return j
		}
	}
	return -1
}
