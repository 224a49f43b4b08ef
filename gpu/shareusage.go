package gpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/internal/atomicfile"
)

// The task driver knows which processes belong to which MPS share (the
// task's) and the device plugin reports per-device stats to Nomad: the
// driver publishes each share's GPU memory in the GPU's MPS pipe directory,
// which both plugins already share, so `nomad alloc status -stats` shows
// what a task really uses of its share.

// ShareUsageFile is the file name inside <mps pipe root>/<GPU-UUID>/
// (contract.ShareUsageFile).
const ShareUsageFile = contract.ShareUsageFile

// maxShareUsageSize bounds what ReadShareUsage reads: 48 shares' figures
// take a few KiB.
const maxShareUsageSize = 1 << 20

// ShareUsage maps Nomad device IDs of MPS shares to the GPU memory (MiB)
// their task's processes use, split evenly over the task's shares, and to
// their task's utilisation of its slice.
//
// Util is each share's task's utilisation of the SMs its shares give it
// (contract's nomad_gpu_task_gpu_utilization_percent on this GPU), in
// percent: the same figure for every share of one task. A share whose task
// is not measured (NVML samples no per-process utilisation) is absent. The
// driver always writes the key ("util": {} when nothing was measured), so a
// nil Util after reading means a file from a driver that does not measure
// utilisation. Readers that do not know the key ignore it; files without
// it read with Util nil.
type ShareUsage struct {
	UpdatedAt time.Time          `json:"updated_at"`
	Shares    map[string]uint64  `json:"shares"`
	Util      map[string]float64 `json:"util"`
}

func ShareUsagePath(pipeRoot, gpuUUID string) string {
	return filepath.Join(contract.MPSPipeDir(pipeRoot, gpuUUID), ShareUsageFile)
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
	// Rewritten every few seconds and worthless after a crash: no fsync.
	return atomicfile.Replace(path, b, 0o644)
}

// ReadShareUsage reads the file; a missing file is no usage, not an error.
//
// The pipe directory belongs to the user whose tasks hold the GPU's MPS
// shares, so what lies there is not trusted: only a regular file owned by
// the reader's own user (the driver and the device plugin both run as root)
// and of sane size is read. A symlink, a FIFO (which would block the
// reader), a file the tasks' user put there or replaced is an error.
func ReadShareUsage(path string) (ShareUsage, error) {
	var u ShareUsage
	f, err := openNoFollow(path)
	if errors.Is(err, fs.ErrNotExist) {
		return u, nil
	}
	if err != nil {
		return u, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return u, err
	}
	if !fi.Mode().IsRegular() {
		return u, fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Geteuid() {
		return u, fmt.Errorf("%s: owned by uid %d, not by this process's uid %d; not written by the driver", path, uid, os.Geteuid())
	}
	if fi.Size() > maxShareUsageSize {
		return u, fmt.Errorf("%s: %d bytes is too large for share usage", path, fi.Size())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxShareUsageSize+1))
	if err != nil {
		return u, err
	}
	if err := json.Unmarshal(b, &u); err != nil {
		return u, fmt.Errorf("%s: %w", path, err)
	}
	return u, nil
}
