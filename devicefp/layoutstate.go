package devicefp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/nomad-gpu/nomad-gpu/contract/gpulayout"
	"github.com/nomad-gpu/nomad-gpu/internal/atomicfile"
)

// The layout state file (layout.state_file) keeps the whole and MPS
// layouts the plugin applied that differ from its mps blocks. Read before
// the first fingerprint, it keeps an agent restart from offering whole a
// GPU whose shares allocations hold (or the reverse). MIG geometries need
// no record: they are on the GPU, read back through NVML.

// layoutStateVersion is the version this plugin writes and reads.
const layoutStateVersion = 1

type layoutStateFile struct {
	Version int `json:"version"`
	// GPUs maps a GPU UUID to its layout as gpulayout.Layout.String
	// writes it ("whole", "mps:8").
	GPUs map[string]string `json:"gpus"`
}

// loadLayoutState reads the state file; a missing one is empty. Errors name
// the key, for SetConfig.
func loadLayoutState(path string) (map[string]gpulayout.Layout, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]gpulayout.Layout{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("layout.state_file: %v", err)
	}
	var f layoutStateFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("layout.state_file: %s does not parse (%v); remove it to start from the mps blocks' layouts", path, err)
	}
	switch {
	case f.Version > layoutStateVersion:
		return nil, fmt.Errorf("layout.state_file: %s has version %d; this plugin reads version %d (a newer nomad-gpu wrote it)", path, f.Version, layoutStateVersion)
	case f.Version < 1:
		return nil, fmt.Errorf("layout.state_file: %s has no version; remove it to start from the mps blocks' layouts", path)
	}
	out := make(map[string]gpulayout.Layout, len(f.GPUs))
	for uuid, text := range f.GPUs {
		l, err := gpulayout.Parse(text)
		if err == nil && l.Kind == gpulayout.MIG {
			err = errors.New("MIG geometries are not kept here")
		}
		if err != nil {
			return nil, fmt.Errorf("layout.state_file: %s: GPU %s: %v", path, uuid, err)
		}
		out[uuid] = l
	}
	return out, nil
}

// saveLayoutState replaces the state file with applied, durably, making its
// directory if need be.
func saveLayoutState(path string, applied map[string]gpulayout.Layout) error {
	f := layoutStateFile{Version: layoutStateVersion, GPUs: map[string]string{}}
	for _, uuid := range slices.Sorted(maps.Keys(applied)) {
		f.GPUs[uuid] = applied[uuid].String()
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o644)
}
