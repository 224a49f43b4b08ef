package gpu

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// migChanger is a backend whose MIG instances other processes of the node
// must see changed (the sim: sim.Server.ChangeMIG); on real hardware NVML's
// MIG state is the host's already.
type migChanger interface {
	ChangeMIG(gpuUUID string, change func() error) error
}

// SetMIGGeometry replaces every GPU and compute instance of the GPU in MIG mode named by gpuUUID
// with one GPU instance per listed profile (names as gpu.MIGProfile.Name / nvidia-smi write them,
// e.g. "1g.10gb", "3g.40gb"), each with one compute instance spanning all its slices.
// An empty list leaves the GPU in MIG mode with no instances. MIG mode itself is never changed.
//
// Every name is checked before anything is destroyed. The new instances are
// made largest first, so NVML's placement does not fragment the GPU. If an
// instance cannot be destroyed (a process uses it: errors.As gives an
// *NVMLError with ERROR_IN_USE) or made, what this call changed is undone as
// far as NVML allows, and the error says so. The next Snapshot shows the
// GPU's instances as they are.
func (i *Inventory) SetMIGGeometry(gpuUUID string, profiles []string) error {
	i.life.RLock()
	defer i.life.RUnlock()
	if i.closed {
		return ErrClosed
	}
	dev, catalog, err := i.migGPU(gpuUUID)
	if err != nil {
		return err
	}
	want, err := newGeometry(gpuUUID, profiles, catalog)
	if err != nil {
		return err
	}
	change := func() error { return regroup(dev, gpuUUID, catalog, want) }
	if c, ok := i.lib.(migChanger); ok {
		err = c.ChangeMIG(gpuUUID, change)
	} else {
		err = change()
	}
	i.forgetMIG(gpuUUID)
	if err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	return nil
}

// forgetMIG drops the cached facts of a GPU's MIG devices. Real NVML gives
// every new instance a new UUID, but the sim gives a remade instance its
// old one; reading a few instances again is cheaper than being wrong.
func (i *Inventory) forgetMIG(gpuUUID string) {
	i.snapMu.Lock()
	defer i.snapMu.Unlock()
	for uuid, f := range i.migs {
		if f.mig.ParentUUID == gpuUUID {
			delete(i.migs, uuid)
		}
	}
}

// migGPU is the GPU in MIG mode of that UUID and the GPU instance profiles
// it can make.
func (i *Inventory) migGPU(uuid string) (nvml.Device, []migProfileInfo, error) {
	dev, ret := i.lib.DeviceGetHandleByUUID(uuid)
	if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
		return nil, nil, fmt.Errorf("gpu: GPU %s: %w", uuid, ErrUnknownDevice)
	}
	if ret != nvml.SUCCESS {
		return nil, nil, fmt.Errorf("gpu: GPU %s: %w", uuid, nvmlErr("device handle", ret))
	}
	if isMIG, ret := dev.IsMigDeviceHandle(); ret == nvml.SUCCESS && isMIG {
		return nil, nil, fmt.Errorf("gpu: %s is a MIG instance; a MIG geometry belongs to its GPU", uuid)
	}
	mode, _, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS && !absent(ret) {
		return nil, nil, fmt.Errorf("gpu: GPU %s: %w", uuid, nvmlErr("MIG mode", ret))
	}
	if ret != nvml.SUCCESS || mode != nvml.DEVICE_MIG_ENABLE {
		return nil, nil, fmt.Errorf("gpu: GPU %s is not in MIG mode; nomad-gpu never toggles MIG mode (an operator enables it: nvidia-smi -i %s -mig 1)", uuid, uuid)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, nil, fmt.Errorf("gpu: GPU %s: %w", uuid, nvmlErr("memory info", ret))
	}
	return dev, migProfileInfos(dev, mem.Total), nil
}

// newGeometry turns profile names into the GPU instance profiles to make,
// largest first, refusing names the GPU lacks and more instances of a
// profile, or more slices, than it has.
func newGeometry(uuid string, names []string, catalog []migProfileInfo) ([]migProfileInfo, error) {
	var want []migProfileInfo
	count := map[string]int{}
	total, most := 0, 0
	for _, n := range names {
		k := slicesIndex(catalog, n)
		if k < 0 {
			return nil, fmt.Errorf("gpu: GPU %s: %q is not a MIG profile of this GPU; allowed: %s", uuid, n, strings.Join(profileNames(catalog), ", "))
		}
		p := catalog[k]
		if count[n]++; count[n] > p.Max {
			return nil, fmt.Errorf("gpu: GPU %s: %d instances of %s; it holds at most %d", uuid, count[n], n, p.Max)
		}
		total += p.Slices
		want = append(want, p)
	}
	for _, p := range catalog {
		most = max(most, p.Slices)
	}
	if total > most {
		return nil, fmt.Errorf("gpu: GPU %s: %s take %d compute slices; it has %d", uuid, strings.Join(names, ", "), total, most)
	}
	sortLargestFirst(want)
	return want, nil
}

func slicesIndex(catalog []migProfileInfo, name string) int {
	return slices.IndexFunc(catalog, func(p migProfileInfo) bool { return p.Name == name })
}

func profileNames(catalog []migProfileInfo) []string {
	out := make([]string, len(catalog))
	for k, p := range catalog {
		out[k] = p.Name
	}
	return out
}

func sortLargestFirst(ps []migProfileInfo) {
	slices.SortStableFunc(ps, func(a, b migProfileInfo) int {
		return cmp.Or(cmp.Compare(b.Slices, a.Slices), cmp.Compare(b.MemoryMiB, a.MemoryMiB))
	})
}

// giState is a GPU instance with its compute instances, found on the GPU
// or to be made; a nil handle is one not there (yet, or any more).
type giState struct {
	profile migProfileInfo
	// placement is where a found instance was, to put it back there;
	// nil for a new one, which NVML places.
	placement *nvml.GpuInstancePlacement
	gi        nvml.GpuInstance
	cis       []ciState // empty until made for a new instance
}

type ciState struct {
	profile nvml.ComputeInstanceProfileInfo
	ci      nvml.ComputeInstance
}

// regroup destroys the GPU's instances and makes want's; on failure it
// undoes what it did as far as NVML lets it.
func regroup(dev nvml.Device, uuid string, catalog []migProfileInfo, want []migProfileInfo) error {
	old, err := findInstances(dev, catalog)
	if err != nil {
		return fmt.Errorf("GPU %s: %w", uuid, err)
	}
	if err := destroy(old); err != nil {
		return fmt.Errorf("GPU %s: %w; %s", uuid, err, restore(dev, nil, old))
	}
	made := make([]*giState, len(want))
	for k, p := range want {
		made[k] = &giState{profile: p}
	}
	if err := create(dev, made); err != nil {
		return fmt.Errorf("GPU %s: %w; %s", uuid, err, restore(dev, made, old))
	}
	return nil
}

// restore destroys what was made and makes again what was destroyed of
// the old instances, and says how that went.
func restore(dev nvml.Device, made, old []*giState) string {
	err := destroy(made)
	if err == nil {
		err = create(dev, old)
	}
	if err != nil {
		return fmt.Sprintf("the previous geometry (%s) could not be restored: %v", geometryString(old), err)
	}
	return fmt.Sprintf("the previous geometry (%s) is restored", geometryString(old))
}

func geometryString(gis []*giState) string {
	if len(gis) == 0 {
		return "no instances"
	}
	names := make([]string, len(gis))
	for k, g := range gis {
		names[k] = g.profile.Name
	}
	return strings.Join(names, ", ")
}

// findInstances lists the GPU's instances (GetGpuInstances of every
// profile it has) with their compute instances.
func findInstances(dev nvml.Device, catalog []migProfileInfo) ([]*giState, error) {
	var out []*giState
	for _, p := range catalog {
		gis, ret := dev.GetGpuInstances(&p.info)
		if ret != nvml.SUCCESS {
			return nil, nvmlErr("GPU instances of "+p.Name, ret)
		}
		for _, gi := range gis {
			info, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, nvmlErr("GPU instance info", ret)
			}
			g := &giState{profile: p, placement: &info.Placement, gi: gi}
			for id := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
				ciProf, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
				if ret != nvml.SUCCESS {
					continue // a profile this GPU instance does not have
				}
				cis, ret := gi.GetComputeInstances(&ciProf)
				if ret != nvml.SUCCESS {
					return nil, nvmlErr("compute instances of a "+p.Name+" GPU instance", ret)
				}
				for _, ci := range cis {
					g.cis = append(g.cis, ciState{profile: ciProf, ci: ci})
				}
			}
			out = append(out, g)
		}
	}
	return out, nil
}

// destroy destroys every compute instance, then every GPU instance (NVML
// refuses a GPU instance that has compute instances), stopping at the
// first failure.
func destroy(gis []*giState) error {
	for _, g := range gis {
		for k := range g.cis {
			c := &g.cis[k]
			if c.ci == nil {
				continue
			}
			if ret := c.ci.Destroy(); ret != nvml.SUCCESS {
				return busyErr("destroying a compute instance of a "+g.profile.Name+" GPU instance", ret)
			}
			c.ci = nil
		}
	}
	for _, g := range gis {
		if g.gi == nil {
			continue
		}
		if ret := g.gi.Destroy(); ret != nvml.SUCCESS {
			return busyErr("destroying a "+g.profile.Name+" GPU instance", ret)
		}
		g.gi = nil
	}
	return nil
}

func busyErr(op string, ret nvml.Return) error {
	err := nvmlErr(op, ret)
	if ret == nvml.ERROR_IN_USE {
		return fmt.Errorf("busy, a process uses its instances (%w)", err)
	}
	return err
}

// create makes the GPU instances not there and their compute instances,
// in order; a new GPU instance gets one compute instance spanning it.
func create(dev nvml.Device, gis []*giState) error {
	for k, g := range gis {
		if g.gi == nil {
			var gi nvml.GpuInstance
			var ret nvml.Return
			if g.placement != nil {
				gi, ret = dev.CreateGpuInstanceWithPlacement(&g.profile.info, g.placement)
			} else {
				gi, ret = dev.CreateGpuInstance(&g.profile.info)
			}
			if ret != nvml.SUCCESS {
				return nvmlErr(fmt.Sprintf("creating GPU instance %d of %d (%s)", k+1, len(gis), g.profile.Name), ret)
			}
			g.gi = gi
		}
		if len(g.cis) == 0 {
			ciProf, err := spanningCI(g.gi, g.profile)
			if err != nil {
				return err
			}
			g.cis = []ciState{{profile: ciProf}}
		}
		for c := range g.cis {
			if g.cis[c].ci != nil {
				continue
			}
			ci, ret := g.gi.CreateComputeInstance(&g.cis[c].profile)
			if ret != nvml.SUCCESS {
				return nvmlErr("creating the compute instance of a "+g.profile.Name+" GPU instance", ret)
			}
			g.cis[c].ci = ci
		}
	}
	return nil
}

// spanningCI is the compute instance profile with all of a GPU instance's
// slices.
func spanningCI(gi nvml.GpuInstance, p migProfileInfo) (nvml.ComputeInstanceProfileInfo, error) {
	for id := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.SUCCESS && int(info.SliceCount) == p.Slices {
			return info, nil
		}
	}
	return nvml.ComputeInstanceProfileInfo{}, errors.New("a " + p.Name + " GPU instance has no compute instance profile spanning its " + fmt.Sprint(p.Slices) + " slices")
}
