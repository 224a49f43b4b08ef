package mps

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// stateVersion is the format version of the files under Config.StateDir.
const stateVersion = 1

// daemonState is what survives a restart of the driver plugin, one JSON file
// per GPU: <StateDir>/<GPU-UUID>.json. The tasks keep running while the
// plugin is away, so who uses which daemon, and which process that daemon
// is, must be read back rather than rebuilt.
type daemonState struct {
	Version int    `json:"version"`
	GPU     string `json:"gpu_uuid"`
	// PID and StartTicks identify the control daemon (0 when none runs);
	// the start time guards against a recycled pid.
	PID        int    `json:"pid,omitempty"`
	StartTicks uint64 `json:"start_ticks,omitempty"`
	PipeDir    string `json:"pipe_dir"`
	LogDir     string `json:"log_dir"`
	// Clients are the tasks holding shares of this GPU, with their limits.
	Clients map[string]Limits `json:"clients"`
	// Ceiling is what was last set on the running daemon; nil after a
	// (re)start, when the daemon has its built-in defaults.
	Ceiling  *Limits `json:"ceiling,omitempty"`
	Restarts int     `json:"restarts,omitempty"`
}

func statePath(dir, uuid string) string { return filepath.Join(dir, uuid+".json") }

// saveState replaces the file atomically so a crash leaves the old or the
// new bookkeeping, never half of one.
func saveState(dir string, st *daemonState) error {
	st.Version = stateVersion
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+st.GPU+".*.tmp")
	if err != nil {
		return fmt.Errorf("mps state: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, statePath(dir, st.GPU))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("mps state: %w", err)
	}
	return nil
}

func removeState(dir, uuid string) error {
	if err := os.Remove(statePath(dir, uuid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("mps state: %w", err)
	}
	return nil
}

// loadStates reads every GPU's file; unreadable ones are reported, not
// fatal, so one bad file does not stop the others' daemons being adopted.
func loadStates(dir string) ([]*daemonState, []error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, []error{fmt.Errorf("mps state: %w", err)}
	}
	var out []*daemonState
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
			continue
		}
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("mps state %s: %w", path, err))
			continue
		}
		var st daemonState
		if err := json.Unmarshal(data, &st); err != nil {
			errs = append(errs, fmt.Errorf("mps state %s: %w", path, err))
			continue
		}
		if st.Version > stateVersion {
			errs = append(errs, fmt.Errorf("mps state %s: version %d is newer than this build understands (%d)", path, st.Version, stateVersion))
			continue
		}
		if st.GPU != strings.TrimSuffix(name, ".json") {
			errs = append(errs, fmt.Errorf("mps state %s: names GPU %q", path, st.GPU))
			continue
		}
		if st.Clients == nil {
			st.Clients = map[string]Limits{}
		}
		out = append(out, &st)
	}
	return out, errs
}
