package nomadview

import (
	"strings"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// DeviceSpec is a device name as Nomad parses a job's device request:
// "type", "vendor/type" or "vendor/type/name". An empty field matches any.
type DeviceSpec struct {
	Vendor, Type, Name string
}

func (d DeviceSpec) String() string {
	switch {
	case d.Vendor == "" && d.Name == "":
		return d.Type
	case d.Name == "":
		return d.Vendor + "/" + d.Type
	}
	return d.Vendor + "/" + d.Type + "/" + d.Name
}

// Compatible reports whether a device request d could be satisfied by a
// device the filter f selects: every field both name must be equal.
// A request "gpu" is compatible with the filter nvidia/gpu, and so is
// "nvidia/gpu/H100"; "nvidia/mig/2g.20gb" is not compatible with
// nvidia/mig/1g.10gb.
func (f DeviceSpec) Compatible(d DeviceSpec) bool {
	eq := func(a, b string) bool { return a == "" || b == "" || a == b }
	return eq(f.Vendor, d.Vendor) && eq(f.Type, d.Type) && eq(f.Name, d.Name)
}

// ParseRequest parses a job's device request name leniently, as Nomad
// does: split into at most three parts, the last being the name.
func ParseRequest(name string) DeviceSpec {
	parts := strings.SplitN(name, "/", 3)
	switch len(parts) {
	case 1:
		return DeviceSpec{Type: parts[0]}
	case 2:
		return DeviceSpec{Vendor: parts[0], Type: parts[1]}
	}
	return DeviceSpec{Vendor: parts[0], Type: parts[1], Name: parts[2]}
}

// IsGPUAsk reports whether a device request or group can be our GPUs, MIG
// instances or MPS shares: vendor nvidia (or none named, as a jobspec may
// say "gpu") and type gpu, mig or mps.
func IsGPUAsk(d DeviceSpec) bool {
	if d.Vendor != "" && d.Vendor != contract.Vendor {
		return false
	}
	switch d.Type {
	case contract.SliceGPU, contract.SliceMIG, contract.SliceMPS:
		return true
	}
	return false
}

// DeviceAsk is one device request of an allocation: what it asks for and
// how many.
type DeviceAsk struct {
	Device DeviceSpec
	Count  int
}

// GPUEquivalents is what the ask weighs in whole GPUs: Count times
// GPUWeight; an MPS share weighs 1 over its GPU's shares, which the ask
// alone does not say, so sharesPerGPU gives it (below 1 counts a share as
// a whole GPU). An ask that is no GPU ask weighs 0.
func (a DeviceAsk) GPUEquivalents(sharesPerGPU int) float64 {
	if !IsGPUAsk(a.Device) || a.Count <= 0 {
		return 0
	}
	w := GPUWeight(a.Device)
	if a.Device.Type == contract.SliceMPS && sharesPerGPU > 1 {
		w = 1 / float64(sharesPerGPU)
	}
	return w * float64(a.Count)
}

// addAsk adds n of device to asks, summing asks of the same name and
// keeping first-seen order.
func addAsk(asks []DeviceAsk, d DeviceSpec, n int) []DeviceAsk {
	for i := range asks {
		if asks[i].Device == d {
			asks[i].Count += n
			return asks
		}
	}
	return append(asks, DeviceAsk{Device: d, Count: n})
}

// GPUWeight is one instance of device group g in GPU-equivalents: 1 for
// a whole GPU; for a MIG instance its profile's compute slices over 7
// ("3g.40gb": 3/7, the compute instance "1c.3g.40gb": 1/7; 1 when the
// group's name is no profile). An MPS share is 1 over its GPU's shares,
// which the group alone does not say (GPUWeight gives 1).
func GPUWeight(g DeviceSpec) float64 {
	if g.Type != contract.SliceMIG {
		return 1
	}
	return contract.MIGWeight(g.Name)
}
