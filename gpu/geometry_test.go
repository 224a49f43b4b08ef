package gpu

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func geometrySim(t *testing.T, ctl string) *Inventory {
	t.Helper()
	return openSim(t, SimConfig{System: "dgxh100", Seed: "geometry", ControlFile: ctl, ControlPoll: 5 * time.Millisecond,
		MIG: []MIGLayout{{GPUs: []int{1}, Profiles: []string{"3g.40gb", "3g.40gb"}}}})
}

// migLayout is a GPU's MIG devices as "profile UUID", by index.
func migLayout(g GPU) []string {
	var out []string
	for _, m := range g.MIG {
		out = append(out, m.Profile+" "+m.UUID)
	}
	return out
}

func profilesOf(g GPU) []string {
	var out []string
	for _, m := range g.MIG {
		out = append(out, m.Profile)
	}
	return out
}

func TestSetMIGGeometry(t *testing.T) {
	inv := geometrySim(t, filepath.Join(t.TempDir(), "ctl.json"))
	s := snapshot(t, inv)
	gpu, whole := s.GPUs[1].UUID, s.GPUs[0].UUID
	start := migLayout(s.GPUs[1])
	seven := slices.Repeat([]string{"1g.10gb"}, 7)
	tests := []struct {
		name     string
		gpu      string
		profiles []string
		wantErr  []string // substrings; nil: succeeds
		want     []string // profiles after, by MIG device index
	}{
		{"seven 1g", gpu, seven, nil, seven},
		{"none", gpu, []string{}, nil, nil},
		{"mixed, made largest first", gpu, []string{"1g.10gb", "2g.20gb", "4g.40gb"}, nil, []string{"4g.40gb", "2g.20gb", "1g.10gb"}},
		{"back", gpu, []string{"3g.40gb", "3g.40gb"}, nil, []string{"3g.40gb", "3g.40gb"}},
		{"not in MIG mode", whole, nil, []string{whole, "not in MIG mode", "never toggles MIG mode"}, []string{"3g.40gb", "3g.40gb"}},
		{"unknown profile", gpu, []string{"1g.10gb", "5g.50gb"}, []string{`"5g.50gb" is not a MIG profile`, "allowed: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"}, []string{"3g.40gb", "3g.40gb"}},
		{"too many of a profile", gpu, []string{"3g.40gb", "3g.40gb", "3g.40gb"}, []string{"3 instances of 3g.40gb", "at most 2"}, []string{"3g.40gb", "3g.40gb"}},
		{"too many slices", gpu, []string{"3g.40gb", "3g.40gb", "1g.10gb", "1g.10gb"}, []string{"8 compute slices", "it has 7"}, []string{"3g.40gb", "3g.40gb"}},
		// 3g at 0 leaves one 2g placement: NVML fails the second, and the
		// instances come back where they were.
		{"does not fit", gpu, []string{"2g.20gb", "2g.20gb", "3g.40gb"}, []string{"creating GPU instance 3 of 3 (2g.20gb)", "previous geometry (3g.40gb, 3g.40gb) is restored"}, []string{"3g.40gb", "3g.40gb"}},
		{"unknown GPU", "GPU-nope", seven, []string{"GPU-nope", ErrUnknownDevice.Error()}, []string{"3g.40gb", "3g.40gb"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := inv.SetMIGGeometry(tc.gpu, tc.profiles)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("SetMIGGeometry: %v", err)
			case tc.wantErr != nil && err == nil:
				t.Fatal("SetMIGGeometry succeeded")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			g := snapshot(t, inv).GPUs[1]
			if got := profilesOf(g); !slices.Equal(got, tc.want) || g.Err != nil || !g.MIGEnabled {
				t.Errorf("GPU 1 has %v (MIG %v, err %v), want %v", got, g.MIGEnabled, g.Err, tc.want)
			}
			if slices.Equal(tc.want, []string{"3g.40gb", "3g.40gb"}) && !slices.Equal(migLayout(g), start) {
				t.Errorf("the same geometry got other UUIDs:\n %v\nwant\n %v", migLayout(g), start)
			}
		})
	}
}

// A busy instance stops the change: the error says so and the GPU keeps
// its instances, with their UUIDs.
func TestSetMIGGeometryBusy(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "ctl.json")
	inv := geometrySim(t, ctl)
	before := snapshot(t, inv).GPUs[1]
	// The second instance is destroyed second: the first must come back.
	busy := before.MIG[1].UUID
	if err := OpenControl(ctl).SetProcessMemory(4242, busy, 1024); err != nil {
		t.Fatal(err)
	}
	eventually(t, "process on "+busy, func() error {
		if ps, err := inv.Processes(busy); err != nil || len(ps) != 1 {
			return fmt.Errorf("processes %v, %v", ps, err)
		}
		return nil
	})
	err := inv.SetMIGGeometry(before.UUID, slices.Repeat([]string{"1g.10gb"}, 7))
	var ne *NVMLError
	if !errors.As(err, &ne) || ne.Return != nvml.ERROR_IN_USE {
		t.Fatalf("SetMIGGeometry on a busy GPU: %v, want an NVMLError with ERROR_IN_USE", err)
	}
	for _, w := range []string{before.UUID, "busy", "previous geometry (3g.40gb, 3g.40gb) is restored"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if after := snapshot(t, inv).GPUs[1]; fmt.Sprint(after.MIG) != fmt.Sprint(before.MIG) {
		t.Errorf("after a refused change:\n %+v\nwant\n %+v", after.MIG, before.MIG)
	}
}

// The device plugin and the driver each open the node: a geometry one sets
// reaches the other's inventory on its next poll.
func TestSetMIGGeometrySharedByTheNodesProcesses(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "ctl.json")
	plugin, driver := geometrySim(t, ctl), geometrySim(t, ctl)
	gpu := snapshot(t, plugin).GPUs[1].UUID
	for _, profiles := range [][]string{{"7g.80gb"}, {}, {"4g.40gb", "3g.40gb"}} {
		if err := plugin.SetMIGGeometry(gpu, profiles); err != nil {
			t.Fatal(err)
		}
		want := migLayout(snapshot(t, plugin).GPUs[1])
		eventually(t, fmt.Sprintf("driver sees %v", profiles), func() error {
			if got := migLayout(snapshot(t, driver).GPUs[1]); !slices.Equal(got, want) {
				return fmt.Errorf("%v, want %v", got, want)
			}
			return nil
		})
	}
}
