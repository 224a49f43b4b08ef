package mps

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
	"github.com/nomad-gpu/nomad-gpu/internal/atomicfile"
)

// stateVersion is the format version of the files under Config.StateDir.
//
//	1: clients with their limits; the daemon by pid and start ticks.
//	2: clients also with uid and user name; the daemon also by boot ID.
//
// Version 1 files read as version 2 ones whose clients are of unknown uid
// (conflicting with nobody) and whose daemon is of this boot.
const stateVersion = 2

// daemonState is what survives a restart of the driver plugin, one JSON file
// per GPU: <StateDir>/<GPU-UUID>.json. The tasks keep running while the
// plugin is away, so who uses which daemon, and which process that daemon
// is, must be read back rather than rebuilt.
type daemonState struct {
	Version int    `json:"version"`
	GPU     string `json:"gpu_uuid"`
	// Identity is the control daemon (PID 0 when none runs): its pid,
	// start time and boot, so neither a recycled pid nor a reboot is taken
	// for the daemon. Embedded, so the JSON keys stay version 1's pid and
	// start_ticks, with boot_id beside them.
	procfs.Identity
	PipeDir string `json:"pipe_dir"`
	LogDir  string `json:"log_dir"`
	// Clients are the tasks holding shares of this GPU, by task ID.
	Clients map[string]clientState `json:"clients"`
	// Ceiling is what was last set on the running daemon; nil after a
	// (re)start, when the daemon has its built-in defaults.
	Ceiling  *Limits `json:"ceiling,omitempty"`
	Restarts int     `json:"restarts,omitempty"`
}

// clientState is one client task. Its JSON is version 1's Limits object
// with uid and user added.
type clientState struct {
	Limits
	// UID is the user the task runs as; nil for a client recorded by
	// version 1, whose user is unknown: it conflicts with nobody until the
	// task acquires again (recovery does) and so records it.
	UID  *uint32 `json:"uid,omitempty"`
	User string  `json:"user,omitempty"`
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
	if err := atomicfile.Write(statePath(dir, st.GPU), append(data, '\n'), 0o600); err != nil {
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
			st.Clients = map[string]clientState{}
		}
		out = append(out, &st)
	}
	return out, errs
}
