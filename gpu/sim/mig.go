package sim

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/nomad-gpu/nomad-gpu/gpu/internal/migprofile"
)

// MIG instances.
//
// GPU and compute instances live in the go-nvml mock's own maps
// (server.Device.GpuInstances, server.GpuInstance.ComputeInstances, each
// guarded by its owner's RWMutex); the sim answers the NVML calls that make,
// list and destroy them itself, because the mock neither places instances,
// nor refuses to destroy one in use, nor knows about MIG device handles.
//
// A GPU instance's id is its placement's start: coexisting instances never
// overlap, so starts are unique, and an instance of the same profile at the
// same place gets the same id, and the same MIG UUID (migUUID), in every
// process of the node and after every rebuild. The sim makes one compute
// instance per GPU instance (id 0), as layouts and the inventory do.
//
// Every change to compute instances rebuilds the GPU's MIG device handles
// (Device.migs) and Server.byUUID under Server.migMu. MIG devices are
// indexed in the order their GPU instances were made (Device.made), so a
// layout's instances keep its order, and a geometry made in the same order
// in another process gets the same indexes.

// GpuInstance is a GPU instance handle of the sim.
type GpuInstance struct {
	*server.GpuInstance
	dev *Device
}

var _ nvml.GpuInstance = (*GpuInstance)(nil)

// ComputeInstance is a compute instance handle of the sim.
type ComputeInstance struct {
	*server.ComputeInstance
	gi *GpuInstance
}

var _ nvml.ComputeInstance = (*ComputeInstance)(nil)

// profileByID is the system's GPU instance profile of that NVML id.
func (s *system) profileByID(id uint32) (giProfile, bool) {
	for _, p := range s.profiles() {
		if p.info.Id == id {
			return p, true
		}
	}
	return giProfile{}, false
}

// placements are a profile's possible placements, lowest start first.
func (s *system) placements(p giProfile) []nvml.GpuInstancePlacement {
	ps := slices.Clone(s.gpu.MIGProfiles.GpuInstancePlacements[int(p.info.Id)])
	slices.SortFunc(ps, func(a, b nvml.GpuInstancePlacement) int { return cmp.Compare(a.Start, b.Start) })
	return ps
}

// slots is the bit mask of the memory/compute slots a placement takes.
func slots(pl nvml.GpuInstancePlacement) uint64 { return (uint64(1)<<pl.Size - 1) << pl.Start }

// migReady is what an instance call answers on a GPU that cannot take it.
func (d *Device) migReady() nvml.Return {
	if d.lost() {
		return nvml.ERROR_GPU_IS_LOST
	}
	if !d.migEnabled() {
		return nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.SUCCESS
}

// CreateGpuInstance places the instance on the lowest free placement of its
// profile, as plan does, so creating a layout's profiles in its order gives
// the placements (and MIG UUIDs) the layout gets from the config.
func (d *Device) CreateGpuInstance(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
	return d.createGpuInstance(info, nil)
}

// CreateGpuInstanceWithPlacement refuses a placement the profile does not
// have (ERROR_INVALID_ARGUMENT) or one that is taken
// (ERROR_INSUFFICIENT_RESOURCES).
func (d *Device) CreateGpuInstanceWithPlacement(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	if pl == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return d.createGpuInstance(info, pl)
}

func (d *Device) createGpuInstance(info *nvml.GpuInstanceProfileInfo, want *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	if ret := d.migReady(); ret != nvml.SUCCESS {
		return nil, ret
	}
	if info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	p, ok := d.srv.sys.profileByID(info.Id)
	if !ok {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	d.Device.Lock()
	defer d.Device.Unlock()
	var used uint64
	n := 0
	for gi := range d.Device.GpuInstances {
		used |= slots(gi.Info.Placement)
		if gi.Info.ProfileId == p.info.Id {
			n++
		}
	}
	if n >= int(p.info.InstanceCount) {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	ret := nvml.ERROR_INSUFFICIENT_RESOURCES
	if want != nil {
		ret = nvml.ERROR_INVALID_ARGUMENT
	}
	for _, pl := range d.srv.sys.placements(p) {
		if want != nil && pl != *want {
			continue
		}
		if used&slots(pl) != 0 {
			ret = nvml.ERROR_INSUFFICIENT_RESOURCES
			continue
		}
		gi := server.NewGpuInstanceFromInfo(nvml.GpuInstanceInfo{Device: d, Id: pl.Start, ProfileId: p.info.Id, Placement: pl}, d.Config.MIGProfiles)
		d.Device.GpuInstances[gi] = struct{}{}
		d.madeN++
		d.made[gi] = d.madeN
		return &GpuInstance{GpuInstance: gi, dev: d}, nvml.SUCCESS
	}
	return nil, ret
}

// gpuInstances are the GPU's instances, in the order they were made; all
// of them for a nil profile.
func (d *Device) gpuInstances(profile *nvml.GpuInstanceProfileInfo) []*GpuInstance {
	d.Device.RLock()
	defer d.Device.RUnlock()
	var out []*GpuInstance
	for gi := range d.Device.GpuInstances {
		if profile == nil || gi.Info.ProfileId == profile.Id {
			out = append(out, &GpuInstance{GpuInstance: gi, dev: d})
		}
	}
	slices.SortFunc(out, func(a, b *GpuInstance) int { return cmp.Compare(d.made[a.GpuInstance], d.made[b.GpuInstance]) })
	return out
}

func (d *Device) GetGpuInstances(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
	if ret := d.migReady(); ret != nvml.SUCCESS {
		return nil, ret
	}
	if info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	var out []nvml.GpuInstance
	for _, gi := range d.gpuInstances(info) {
		out = append(out, gi)
	}
	return out, nvml.SUCCESS
}

// GetGpuInstanceById finds an instance among those of the GPU.
func (d *Device) GetGpuInstanceById(id int) (nvml.GpuInstance, nvml.Return) {
	if ret := d.migReady(); ret != nvml.SUCCESS {
		return nil, ret
	}
	for _, gi := range d.gpuInstances(nil) {
		if int(gi.Info.Id) == id {
			return gi, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// GetInfo names the sim's handles, as NVML names the caller's.
func (g *GpuInstance) GetInfo() (nvml.GpuInstanceInfo, nvml.Return) { return g.Info, nvml.SUCCESS }

// exists says whether the instance is still on its GPU.
func (g *GpuInstance) exists() bool {
	g.dev.Device.RLock()
	defer g.dev.Device.RUnlock()
	_, ok := g.dev.Device.GpuInstances[g.GpuInstance]
	return ok
}

// Destroy fails with ERROR_IN_USE while the instance has compute
// instances, as NVML does.
func (g *GpuInstance) Destroy() nvml.Return {
	if g.dev.lost() {
		return nvml.ERROR_GPU_IS_LOST
	}
	if len(g.computeInstances(nil)) > 0 {
		return nvml.ERROR_IN_USE
	}
	g.dev.Device.Lock()
	defer g.dev.Device.Unlock()
	if _, ok := g.dev.Device.GpuInstances[g.GpuInstance]; !ok {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	delete(g.dev.Device.GpuInstances, g.GpuInstance)
	delete(g.dev.made, g.GpuInstance)
	return nvml.SUCCESS
}

// CreateComputeInstance makes the instance's one compute instance; a
// second is refused with ERROR_INSUFFICIENT_RESOURCES.
func (g *GpuInstance) CreateComputeInstance(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
	if g.dev.lost() {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	if info == nil || !g.exists() {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	known, ok := g.MIGProfiles.ComputeInstanceProfiles[int(g.Info.ProfileId)][int(info.Id)]
	if !ok || known.SliceCount != info.SliceCount {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	g.Lock()
	if len(g.ComputeInstances) > 0 {
		g.Unlock()
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	ci := server.NewComputeInstanceFromInfo(nvml.ComputeInstanceInfo{Device: g.dev, GpuInstance: g, Id: 0, ProfileId: info.Id})
	g.ComputeInstances[ci] = struct{}{}
	g.Unlock()
	g.dev.refreshMIG()
	return &ComputeInstance{ComputeInstance: ci, gi: g}, nvml.SUCCESS
}

// computeInstances are the instance's compute instances of a profile (all
// for nil), by id.
func (g *GpuInstance) computeInstances(profile *nvml.ComputeInstanceProfileInfo) []*ComputeInstance {
	g.RLock()
	defer g.RUnlock()
	var out []*ComputeInstance
	for ci := range g.ComputeInstances {
		if profile == nil || ci.Info.ProfileId == profile.Id {
			out = append(out, &ComputeInstance{ComputeInstance: ci, gi: g})
		}
	}
	slices.SortFunc(out, func(a, b *ComputeInstance) int { return cmp.Compare(a.Info.Id, b.Info.Id) })
	return out
}

func (g *GpuInstance) GetComputeInstances(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
	if g.dev.lost() {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	if info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	var out []nvml.ComputeInstance
	for _, ci := range g.computeInstances(info) {
		out = append(out, ci)
	}
	return out, nvml.SUCCESS
}

func (c *ComputeInstance) GetInfo() (nvml.ComputeInstanceInfo, nvml.Return) {
	return c.Info, nvml.SUCCESS
}

// Destroy fails with ERROR_IN_USE while a process runs on the instance's
// MIG device (the control file's processes, live loads of known pid), as
// NVML does: that is how a test makes a GPU busy.
func (c *ComputeInstance) Destroy() nvml.Return {
	if c.gi.dev.lost() {
		return nvml.ERROR_GPU_IS_LOST
	}
	if c.busy() {
		return nvml.ERROR_IN_USE
	}
	return c.destroy()
}

// destroy removes the compute instance whether or not it is busy.
func (c *ComputeInstance) destroy() nvml.Return {
	g := c.gi
	g.Lock()
	_, ok := g.ComputeInstances[c.ComputeInstance]
	delete(g.ComputeInstances, c.ComputeInstance)
	g.Unlock()
	if !ok {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	g.dev.refreshMIG()
	return nvml.SUCCESS
}

func (c *ComputeInstance) busy() bool {
	d := c.gi.dev
	d.srv.migMu.RLock()
	defer d.srv.migMu.RUnlock()
	procs := d.srv.view.Load().procs
	for _, m := range d.migs {
		if m.gi == c.gi.Info.Id && m.ci == c.Info.Id && len(procs[m.uuid]) > 0 {
			return true
		}
	}
	return false
}

// refreshMIG rebuilds the GPU's MIG device handles from its compute
// instances: one per compute instance, in the order of their GPU
// instances.
func (d *Device) refreshMIG() {
	s := d.srv
	s.migMu.Lock()
	defer s.migMu.Unlock()
	for _, m := range d.migs {
		delete(s.byUUID, m.uuid)
	}
	d.migs = nil
	for _, gi := range d.gpuInstances(nil) {
		p, _ := s.sys.profileByID(gi.Info.ProfileId)
		for _, ci := range gi.computeInstances(nil) {
			m := d.newMigDevice(len(d.migs), gi.Info, p, gi.MIGProfiles.ComputeInstanceProfiles[int(p.info.Id)][int(ci.Info.ProfileId)], ci.Info.Id)
			d.migs = append(d.migs, m)
			s.byUUID[m.uuid] = m
		}
	}
}

func (d *Device) newMigDevice(index int, gi nvml.GpuInstanceInfo, p giProfile, ci nvml.ComputeInstanceProfileInfo, ciID uint32) *MigDevice {
	name := p.name
	if ci.SliceCount != p.info.SliceCount {
		name = migprofile.Name(int(p.info.Id), int(p.info.SliceCount), int(ci.SliceCount), p.info.MemorySizeMB, d.srv.sys.memoryBytes())
	}
	return &MigDevice{
		Device:    &mock.Device{},
		parent:    d,
		index:     index,
		uuid:      migUUID(d.srv.sys.name, d.srv.seed, d.Index, name, gi.Placement.Start),
		gi:        gi.Id,
		ci:        ciID,
		profile:   name,
		giProfile: p.info,
		ciProfile: ci,
	}
}

// geometry is the profiles of the GPU's instances, in the order they were
// made;
// empty, not nil, without any, so the control file says [] for it.
func (d *Device) geometry() []string {
	out := []string{}
	for _, gi := range d.gpuInstances(nil) {
		p, _ := d.srv.sys.profileByID(gi.Info.ProfileId)
		out = append(out, p.name)
	}
	return out
}

// build creates the profiles' instances where plan puts them, each with a
// compute instance spanning it, on a GPU in MIG mode with no instances.
func (d *Device) build(profiles []string) error {
	insts, err := d.srv.sys.plan(profiles)
	if err != nil {
		return err
	}
	for _, in := range insts {
		giProf, ciProf, pl := in.profile.info, in.profile.ci, in.placement
		gi, ret := d.CreateGpuInstanceWithPlacement(&giProf, &pl)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("create GPU instance %s: %v", in.profile.name, ret)
		}
		if _, ret := gi.CreateComputeInstance(&ciProf); ret != nvml.SUCCESS {
			return fmt.Errorf("create compute instance on %s: %v", in.profile.name, ret)
		}
	}
	return nil
}

// rebuild replaces every instance of the GPU by the geometry's, busy or
// not: another process of the node already changed it (on real hardware
// MIG state is the host's).
func (d *Device) rebuild(profiles []string) error {
	if _, err := d.srv.sys.plan(profiles); err != nil {
		return err
	}
	for _, gi := range d.gpuInstances(nil) {
		for _, ci := range gi.computeInstances(nil) {
			ci.destroy()
		}
		gi.Destroy()
	}
	return d.build(profiles)
}

// errUnchanged makes Control.update leave the file as it is.
var errUnchanged = errors.New("unchanged")

// ChangeMIG runs change, which remakes the MIG instances of the GPU
// gpuUUID through this server's NVML calls, as one step for every sim
// server of the node (the device plugin's, the driver's): under the control
// file's writers' lock, starting from the geometry the file holds, and
// recording the geometry the GPU has afterwards (mig_geometry) with the
// node's devices, so the other servers rebuild it at their next poll. An
// unchanged geometry writes nothing. Without a control file the geometry
// lives in this process only. It returns change's error, joined with the
// file's.
func (s *Server) ChangeMIG(gpuUUID string, change func() error) error {
	d := s.gpuByUUID(gpuUUID)
	if d == nil {
		return fmt.Errorf("sim: %s is no GPU of this node", gpuUUID)
	}
	s.geoMu.Lock()
	defer s.geoMu.Unlock()
	if s.ctlPath == "" {
		return change()
	}
	var changeErr error
	err := OpenControl(s.ctlPath).update(func(st *ControlState) error {
		s.applyGeometry(st.MIGGeometry)
		before := d.geometry()
		changeErr = change()
		after := d.geometry()
		if slices.Equal(before, after) {
			return errUnchanged
		}
		if st.MIGGeometry == nil {
			st.MIGGeometry = map[string][]string{}
		}
		st.MIGGeometry[gpuUUID] = after
		s.recordNode(st, time.Time{})
		return nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return errors.Join(changeErr, err)
}

func (s *Server) gpuByUUID(uuid string) *Device {
	for _, d := range s.devices {
		if d.uuid == uuid {
			return d
		}
	}
	return nil
}

// applyGeometry rebuilds each GPU of this node whose instances differ from
// the geometry the control file gives it. Callers hold geoMu.
func (s *Server) applyGeometry(geo map[string][]string) {
	for uuid, profiles := range geo {
		d := s.gpuByUUID(uuid)
		if d == nil || slices.Equal(d.geometry(), profiles) {
			continue // another node's GPU, or nothing to do
		}
		if !d.migEnabled() {
			s.logger.Warn("ignoring the control file's MIG geometry of a GPU not in MIG mode", "gpu", uuid)
			continue
		}
		if err := d.rebuild(profiles); err != nil {
			s.logger.Warn("cannot apply the control file's MIG geometry", "gpu", uuid, "profiles", profiles, "error", err)
		}
	}
}

// recordNode replaces the node's list of devices in st; opened, when not
// zero, is when the node opened.
func (s *Server) recordNode(st *ControlState, opened time.Time) {
	key := s.sys.name + "/" + s.seed
	n := st.Nodes[key]
	n.System, n.Seed = s.sys.name, s.seed
	if !opened.IsZero() || n.Opened.IsZero() {
		n.Opened = cmp.Or(opened, time.Now().UTC())
	}
	n.Devices = nil
	s.migMu.RLock()
	for _, d := range s.devices {
		n.Devices = append(n.Devices, d.uuid)
		for _, m := range d.migs {
			n.Devices = append(n.Devices, m.uuid)
		}
	}
	s.migMu.RUnlock()
	if st.Nodes == nil {
		st.Nodes = map[string]NodeDevices{}
	}
	st.Nodes[key] = n
}
