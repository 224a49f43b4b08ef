package gpu

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// The task driver knows which processes belong to which MPS share (the
// task's) and the device plugin reports per-device stats to Nomad: the
// driver publishes each share's GPU memory in the GPU's MPS pipe directory,
// which both plugins already share, so `nomad alloc status -stats` shows
// what a task really uses of its share.

// ShareUsageFile is the file name inside <mps pipe root>/<GPU-UUID>/.
const ShareUsageFile = "nomad-gpu-share-usage.json"

// ShareUsage maps Nomad device IDs of MPS shares to the GPU memory (MiB)
// their task's processes use, split evenly over the task's shares.
type ShareUsage struct {
	UpdatedAt time.Time         `json:"updated_at"`
	Shares    map[string]uint64 `json:"shares"`
}

func ShareUsagePath(pipeRoot, gpuUUID string) string {
	return filepath.Join(pipeRoot, gpuUUID, ShareUsageFile)
}

// WriteShareUsage replaces the file atomically, so a reader never sees half of it.
func WriteShareUsage(path string, u ShareUsage) error {
	b, err := json.Marshal(u)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".share-usage-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// ReadShareUsage reads the file; a missing file is no usage, not an error.
func ReadShareUsage(path string) (ShareUsage, error) {
	var u ShareUsage
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return u, nil
	}
	if err != nil {
		return u, err
	}
	if err := json.Unmarshal(b, &u); err != nil {
		return u, fmt.Errorf("%s: %w", path, err)
	}
	return u, nil
}
