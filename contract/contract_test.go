package contract

import (
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestShareID(t *testing.T) {
	const u = "GPU-8b48e0f2-0000-4000-8000-000000000001"
	tests := []struct {
		gpu  string
		n    int
		want string
	}{
		{u, 0, u + "-mps-0"},
		{u, 3, u + "-mps-3"},
		{u, 47, u + "-mps-47"},
		{"GPU-a", 1, "GPU-a-mps-1"},
	}
	for _, tc := range tests {
		got := ShareID(tc.gpu, tc.n)
		if got != tc.want {
			t.Errorf("ShareID(%q, %d) = %q, want %q", tc.gpu, tc.n, got, tc.want)
		}
		g, n, ok := ParseShareID(got)
		if !ok || g != tc.gpu || n != tc.n {
			t.Errorf("ParseShareID(%q) = %q, %d, %v; want the round trip %q, %d", got, g, n, ok, tc.gpu, tc.n)
		}
	}
}

func TestParseShareIDMalformed(t *testing.T) {
	for _, id := range []string{
		"",
		"GPU-8b48e0f2-0000-4000-8000-000000000001", // a whole GPU
		"MIG-8b48e0f2-0000-4000-8000-000000000001", // a MIG instance
		"MIG-8b48e0f2-mps-0",                       // not a GPU- UUID
		"-mps-0",                                   // no UUID
		"GPU--mps-0",                               // empty UUID
		"GPU-a-mps-",                               // no number
		"GPU-a-mps--1",                             // negative
		"GPU-a-mps-+1",                             // sign
		"GPU-a-mps-01",                             // leading zero: ShareID never writes it
		"GPU-a-mps-1x",                             // trailing junk
		"GPU-a-mps-1 ",                             // blank
		"GPU-a-mps-99999999999999999999999999",     // overflows int
		"GPU-a,GPU-b-mps-0",                        // a list, not an ID
		"GPU-a/../x-mps-0",                         // path
		"gpu-a-mps-0",                              // case matters
		"GPU-a-MPS-0",                              // case matters
		"nvidia/mps/GPU-a-mps-0",                   // a device name, not an ID
		"GPU-a-mps-0-mps-",                         // the last infix counts
	} {
		if g, n, ok := ParseShareID(id); ok {
			t.Errorf("ParseShareID(%q) = %q, %d, true; want not ok", id, g, n)
		}
	}
	// The last infix separates: a UUID containing "-mps-" still round-trips.
	if g, n, ok := ParseShareID("GPU-a-mps-0-mps-2"); !ok || g != "GPU-a-mps-0" || n != 2 {
		t.Errorf("ParseShareID nested = %q, %d, %v", g, n, ok)
	}
}

func TestLists(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{",", nil},
		{"GPU-a", []string{"GPU-a"}},
		{"GPU-a,GPU-b", []string{"GPU-a", "GPU-b"}},
		{" GPU-a , ,GPU-b,", []string{"GPU-a", "GPU-b"}},
	}
	for _, tc := range tests {
		if got := SplitList(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitList(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if tc.want != nil {
			if got := SplitList(JoinList(tc.want)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("round trip of %q = %q", tc.want, got)
			}
		}
	}
}

func TestFormatPinnedMemLimit(t *testing.T) {
	tests := []struct {
		in   map[int]uint64
		want string
	}{
		{nil, ""},
		{map[int]uint64{}, ""},
		{map[int]uint64{0: 20480}, "0=20480M"},
		{map[int]uint64{1: 40960, 0: 20389}, "0=20389M,1=40960M"},
		{map[int]uint64{0: 0, 10: 1, 2: 3}, "0=0M,2=3M,10=1M"},
	}
	for _, tc := range tests {
		got := FormatPinnedMemLimit(tc.in)
		if got != tc.want {
			t.Errorf("FormatPinnedMemLimit(%v) = %q, want %q", tc.in, got, tc.want)
		}
		back, err := ParsePinnedMemLimit(got)
		want := tc.in
		if want == nil {
			want = map[int]uint64{}
		}
		if err != nil || !maps.Equal(back, want) {
			t.Errorf("ParsePinnedMemLimit(%q) = %v, %v; want the round trip %v", got, back, err, want)
		}
	}
}

func TestParsePinnedMemLimit(t *testing.T) {
	tests := []struct {
		in      string
		want    map[int]uint64
		wantErr string
	}{
		{in: "", want: map[int]uint64{}},
		{in: "  ", want: map[int]uint64{}},
		{in: "0=20480M", want: map[int]uint64{0: 20480}},
		{in: "0=1G,1=512MB", want: map[int]uint64{0: 1024, 1: 512}},
		{in: " 0 = 8g , 2=4096m ", want: map[int]uint64{0: 8192, 2: 4096}},
		{in: "0=1T", want: map[int]uint64{0: 1 << 20}},
		{in: "0=2048K,1=1536K,2=1KB", want: map[int]uint64{0: 2, 1: 2, 2: 1}}, // partial MiB rounds up
		{in: "0=4GiB,1=100MiB", want: map[int]uint64{0: 4096, 1: 100}},
		{in: "0=0M", want: map[int]uint64{0: 0}},
		{in: "0=1024", wantErr: `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: "0=1024": size "1024" has no unit (K, M, G or T, e.g. 1024M)`},
		{in: "0=12X", wantErr: `"0=12X": size "12X": unit "X" is not one of K, M, G, T`},
		{in: "0=1.5G", wantErr: `"0=1.5G": size "1.5G": unit ".5G" is not one of`},
		{in: "0=G", wantErr: `"0=G": size "G" does not start with a whole number`},
		{in: "0=", wantErr: `size "" does not start with a whole number`},
		{in: "0=-1G", wantErr: `does not start with a whole number`},
		{in: "1G", wantErr: `"1G": want <device ordinal>=<size>, e.g. 0=1G`},
		{in: "x=1G", wantErr: `"x=1G": device ordinal "x" is not a number`},
		{in: "=1G", wantErr: `device ordinal "" is not a number`},
		{in: "-1=1G", wantErr: `device ordinal "-1" is not a number`},
		{in: "0=1G,0=2G", wantErr: `"0=2G": device ordinal 0 is given twice`},
		{in: "0=1G,,1=1G", wantErr: `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: "0=1G,,1=1G" has an empty entry`},
		{in: "0=1G,", wantErr: `has an empty entry`},
		{in: "0=99999999999999999999G", wantErr: `value out of range`},
		{in: "0=99999999999T", wantErr: `is too large`},
	}
	for _, tc := range tests {
		got, err := ParsePinnedMemLimit(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParsePinnedMemLimit(%q) error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParsePinnedMemLimit(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestMPSPipeDir(t *testing.T) {
	if got := MPSPipeDir(DefaultMPSPipeRoot, "GPU-a"); got != "/run/nomad-gpu/mps/GPU-a" {
		t.Errorf("MPSPipeDir = %q", got)
	}
	if got := MPSPipeDir("/x/", "GPU-a"); got != "/x/GPU-a" {
		t.Errorf("MPSPipeDir = %q", got)
	}
}

// The values are the contract: a change here must be a deliberate,
// documented breaking change (docs/contracts.md), not a refactoring.
func TestValuesAreTheDocumentedOnes(t *testing.T) {
	got := map[string]string{
		"Vendor": Vendor, "SliceGPU": SliceGPU, "SliceMIG": SliceMIG, "SliceMPS": SliceMPS,
		"EnvCUDAVisibleDevices": EnvCUDAVisibleDevices, "EnvNvidiaVisibleDevices": EnvNvidiaVisibleDevices,
		"EnvMPSPipeDirectory": EnvMPSPipeDirectory, "EnvMPSThreadPercentage": EnvMPSThreadPercentage,
		"EnvMPSPinnedMemLimit": EnvMPSPinnedMemLimit, "EnvDeviceIDs": EnvDeviceIDs, "EnvSliceType": EnvSliceType,
		"NvidiaVisibleDevicesNone": NvidiaVisibleDevicesNone,
		"AttrMemory":               AttrMemory, "AttrComputeCapability": AttrComputeCapability,
		"AttrArchitecture": AttrArchitecture, "AttrDriverVersion": AttrDriverVersion, "AttrCUDAVersion": AttrCUDAVersion,
		"AttrMultiprocessors": AttrMultiprocessors, "AttrMIGProfile": AttrMIGProfile,
		"AttrParentProduct": AttrParentProduct, "AttrParentMemory": AttrParentMemory, "AttrParentIndex": AttrParentIndex,
		"AttrMPSShares": AttrMPSShares, "AttrMPSThreadPercent": AttrMPSThreadPercent, "AttrMPSMemoryLimit": AttrMPSMemoryLimit,
		"DefaultMPSPipeRoot": DefaultMPSPipeRoot, "ShareUsageFile": ShareUsageFile,
	}
	want := map[string]string{
		"Vendor": "nvidia", "SliceGPU": "gpu", "SliceMIG": "mig", "SliceMPS": "mps",
		"EnvCUDAVisibleDevices": "CUDA_VISIBLE_DEVICES", "EnvNvidiaVisibleDevices": "NVIDIA_VISIBLE_DEVICES",
		"EnvMPSPipeDirectory": "CUDA_MPS_PIPE_DIRECTORY", "EnvMPSThreadPercentage": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
		"EnvMPSPinnedMemLimit": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "EnvDeviceIDs": "NOMAD_GPU_DEVICE_IDS", "EnvSliceType": "NOMAD_GPU_SLICE_TYPE",
		"NvidiaVisibleDevicesNone": "void",
		"AttrMemory":               "memory", "AttrComputeCapability": "compute_capability",
		"AttrArchitecture": "architecture", "AttrDriverVersion": "driver_version", "AttrCUDAVersion": "cuda_version",
		"AttrMultiprocessors": "multiprocessors", "AttrMIGProfile": "mig_profile",
		"AttrParentProduct": "parent_product", "AttrParentMemory": "parent_memory", "AttrParentIndex": "parent_index",
		"AttrMPSShares": "mps_shares", "AttrMPSThreadPercent": "mps_thread_percentage", "AttrMPSMemoryLimit": "mps_memory_limit",
		"DefaultMPSPipeRoot": "/run/nomad-gpu/mps", "ShareUsageFile": "nomad-gpu-share-usage.json",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %q; the contract says %q", k, got[k], w)
		}
	}
}

// Both plugins import this package, so it must stay a leaf.
func TestImportsNothingOfOurs(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			if strings.HasPrefix(strings.Trim(imp.Path.Value, `"`), "github.com/nomad-gpu/") {
				t.Errorf("%s imports %s; package contract must import nothing of this module", f, imp.Path.Value)
			}
		}
	}
}

// The gang names are what jobspecs and tasks already use (docs/design/gangs.md).
func TestGangNamesAreTheDocumentedOnes(t *testing.T) {
	for got, want := range map[string]string{
		MetaGang: "nomad_gpu_gang", MetaGangMembers: "nomad_gpu_gang_members", MetaGangLocality: "nomad_gpu_gang_locality",
		MetaGangPinned: "nomad_gpu_gang_pinned", MetaGangCheckpoint: "nomad_gpu_gang_checkpoint",
		EventDetailStep: "step", EnvCheckpointCommit: "NOMAD_GPU_CHECKPOINT_COMMIT",
		EnvGangRank: "NOMAD_GPU_GANG_RANK", EnvGangWorldSize: "NOMAD_GPU_GANG_WORLD_SIZE",
		EnvGangMasterAddr: "NOMAD_GPU_GANG_MASTER_ADDR", EnvGangMasterPort: "NOMAD_GPU_GANG_MASTER_PORT",
		EnvGangHostfile: "NOMAD_GPU_GANG_HOSTFILE", GangRendezvousPort: "rendezvous",
	} {
		if got != want {
			t.Errorf("%q; the contract says %q", got, want)
		}
	}
}
