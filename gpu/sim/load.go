package sim

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/internal/atomicfile"
)

// The load directory, its records and the load model are documented in the
// package comment ("Simulated work").

// EnvLoadDir is the task environment variable that names the load directory
// of the sim node the task's devices are on; the device plugin sets it on a
// sim node with a control file, and `nomad-gpu sim-load` reads it.
const EnvLoadDir = "NOMAD_GPU_SIM_LOAD_DIR"

// LoadDir is the load directory of the sim node with this control file,
// "<controlFile>.load"; "" without a control file.
func LoadDir(controlFile string) string {
	if controlFile == "" {
		return ""
	}
	return filepath.Clean(controlFile) + ".load"
}

// LoadDir is the node's load directory; "" when it has no control file.
func (c Config) LoadDir() string { return LoadDir(c.ControlFile) }

// LoadVersion is the record format version StartLoad writes.
const LoadVersion = 1

// DefaultLoadHeartbeat is how often StartLoad's caller should Refresh.
const DefaultLoadHeartbeat = 2 * time.Second

const (
	loadStaleBeats = 3               // heartbeats missed before a record is dead
	maxLoadBeat    = 5 * time.Minute // longest heartbeat interval a record may declare
	maxLoadRecord  = 64 << 10        // bytes read of a record file
	maxLoadDevices = 64              // device entries per record
	maxLoadFiles   = 4096            // directory entries looked at per poll
	loadGCAge      = time.Minute     // age at which dead files are removed
	loadFilePrefix = "load-"
	loadRecordExt  = ".json"
	loadLockExt    = ".lock"
)

// LoadRecord is the content of a load-<id>.json file (JSON):
//
//	{
//	  "version": 1,
//	  "start": "2025-06-01T10:00:00Z",
//	  "heartbeat": "2025-06-01T10:00:04Z",
//	  "heartbeat_ms": 2000,
//	  "until": "2025-06-01T10:05:00Z",
//	  "ramp_ms": 10000,
//	  "devices": [
//	    {"uuid": "MIG-6a2f…", "util_percent": 80, "mem_util_percent": 40, "memory_bytes": 21474836480},
//	    {"uuid": "GPU-1c0d…", "util_percent": 25, "memory_percent": 50}
//	  ]
//	}
//
// until absent: until the writer stops; ramp_ms absent: full load at once.
// A device entry has memory_bytes or memory_percent (of that device's
// memory), or neither. Times are the writer's wall clock, which is the
// node's: a PID or mount namespace does not change it.
type LoadRecord struct {
	Version     int          `json:"version"`
	Start       time.Time    `json:"start"`
	Heartbeat   time.Time    `json:"heartbeat"`
	HeartbeatMS int64        `json:"heartbeat_ms"`
	Until       time.Time    `json:"until,omitzero"`
	RampMS      int64        `json:"ramp_ms,omitempty"`
	Devices     []DeviceLoad `json:"devices"`
}

// DeviceLoad is the work a record puts on one device. Percentages are of
// the device named: a MIG instance's own SMs, the whole GPU's for a GPU-
// UUID (an MPS client scales its share to the whole GPU before writing).
type DeviceLoad struct {
	UUID           string  `json:"uuid"`
	UtilPercent    float64 `json:"util_percent"`
	MemUtilPercent float64 `json:"mem_util_percent,omitempty"`
	MemoryBytes    uint64  `json:"memory_bytes,omitempty"`
	MemoryPercent  float64 `json:"memory_percent,omitempty"`
}

// Validate checks a record as readers do. Errors name the key.
func (r *LoadRecord) Validate() error {
	switch {
	case r.Version < 1 || r.Version > LoadVersion:
		return fmt.Errorf("version: %d is not a load record version this build understands (1 to %d)", r.Version, LoadVersion)
	case r.Start.IsZero():
		return errors.New("start: missing")
	case r.Heartbeat.IsZero():
		return errors.New("heartbeat: missing")
	case r.HeartbeatMS <= 0 || time.Duration(r.HeartbeatMS)*time.Millisecond > maxLoadBeat:
		return fmt.Errorf("heartbeat_ms: %d is out of range; allowed: 1 to %d", r.HeartbeatMS, maxLoadBeat.Milliseconds())
	case r.RampMS < 0:
		return fmt.Errorf("ramp_ms: %d is negative", r.RampMS)
	case !r.Until.IsZero() && r.Until.Before(r.Start):
		return errors.New("until: before start")
	case len(r.Devices) == 0:
		return errors.New("devices: empty")
	case len(r.Devices) > maxLoadDevices:
		return fmt.Errorf("devices: %d entries; at most %d", len(r.Devices), maxLoadDevices)
	}
	seen := map[string]bool{}
	for i, d := range r.Devices {
		pct := func(key string, v float64) error {
			if math.IsNaN(v) || v < 0 || v > 100 {
				return fmt.Errorf("devices[%d].%s: %v is out of range; allowed: 0 to 100", i, key, v)
			}
			return nil
		}
		switch {
		case !strings.HasPrefix(d.UUID, "GPU-") && !strings.HasPrefix(d.UUID, "MIG-"):
			return fmt.Errorf("devices[%d].uuid: %q is not a GPU- or MIG- UUID", i, d.UUID)
		case seen[d.UUID]:
			return fmt.Errorf("devices[%d].uuid: %s is listed twice", i, d.UUID)
		case d.MemoryBytes > 0 && d.MemoryPercent > 0:
			return fmt.Errorf("devices[%d]: memory_bytes and memory_percent are exclusive", i)
		}
		seen[d.UUID] = true
		for _, err := range []error{pct("util_percent", d.UtilPercent), pct("mem_util_percent", d.MemUtilPercent), pct("memory_percent", d.MemoryPercent)} {
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *LoadRecord) heartbeat() time.Duration {
	return time.Duration(r.HeartbeatMS) * time.Millisecond
}

// lockState is what a reader knows of a record's writer from its lock file.
type lockState int

const (
	lockUnknown lockState = iota // no lock file, or locks cannot be checked here
	lockHeld                     // the writer runs
	lockFree                     // the lock file exists and nobody holds it: the writer is gone
)

// liveAt says whether the record counts at now (see the package's load
// rules).
func (r *LoadRecord) liveAt(now time.Time, lock lockState) bool {
	if lock == lockFree {
		return false
	}
	if !r.Until.IsZero() && !now.Before(r.Until) {
		return false
	}
	stale := loadStaleBeats * r.heartbeat()
	age := now.Sub(r.Heartbeat)
	// A heartbeat far in the future would make a record immortal.
	return age <= stale && age >= -stale
}

// rampAt is the fraction of its utilisation the record applies at now.
func (r *LoadRecord) rampAt(now time.Time) float64 {
	if r.RampMS <= 0 {
		return 1
	}
	f := float64(now.Sub(r.Start)) / float64(time.Duration(r.RampMS)*time.Millisecond)
	return max(0, min(1, f))
}

// bytesOn is the memory the entry holds on a device of that many bytes.
func (d *DeviceLoad) bytesOn(total uint64) uint64 {
	b := d.MemoryBytes
	if d.MemoryPercent > 0 {
		b = uint64(d.MemoryPercent / 100 * float64(total))
	}
	return min(b, total)
}

// liveLoad is a record that counts now, and its writer's pid (0: unknown).
type liveLoad struct {
	name string
	rec  *LoadRecord
	pid  uint32
}

// loadScanner reads a node's load directory. It is used by the node's watch
// goroutine only.
type loadScanner struct {
	dir    string
	logger hclog.Logger
	lock   func(path string) (lockState, uint32)
	files  map[string]*loadFile // by record file name
	// hadLive: the last scan found live loads, so the view must be derived
	// again even if this one finds none.
	hadLive bool
}

type loadFile struct {
	stamp fileStamp
	rec   *LoadRecord // nil: unreadable or invalid
}

// loadLockState is how scanners check a lock file; tests replace it.
var loadLockState = lockHolder

func newLoadScanner(dir string, logger hclog.Logger) *loadScanner {
	return &loadScanner{dir: dir, logger: logger, lock: loadLockState, files: map[string]*loadFile{}}
}

// PrepareLoadDir makes a load directory, or takes the one there, mode 1777
// (like /tmp: anyone may add records, and remove only their own). It
// refuses a symlink or a file in its place, and does not make its parent.
// The device plugin calls it when it reserves devices of a sim node for a
// task, `nomad-gpu sim-load --load-dir` when run outside Nomad. A node does
// not make its own: it only reads it, and a missing one means no loads.
func PrepareLoadDir(dir string) error {
	if err := prepareLoadDir(dir); err != nil {
		return fmt.Errorf("sim load directory %s: %w", dir, err)
	}
	return nil
}

// scan returns the records that count at now, in file name order.
func (sc *loadScanner) scan(now time.Time) []liveLoad {
	entries, err := readDirLimited(sc.dir, maxLoadFiles)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			sc.logger.Debug("cannot read sim load directory", "path", sc.dir, "error", err)
		}
		clear(sc.files)
		return nil
	}
	var live []liveLoad
	seen := make(map[string]bool, len(entries))
	records := map[string]bool{}
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, loadFilePrefix) && strings.HasSuffix(n, loadRecordExt) {
			records[strings.TrimSuffix(n, loadRecordExt)] = true
		}
	}
	gc := func(name string, fi fs.FileInfo) {
		if fi != nil && now.Sub(fi.ModTime()) > loadGCAge {
			if err := os.Remove(filepath.Join(sc.dir, name)); err == nil {
				sc.logger.Debug("removed a dead sim load file", "file", name)
			}
		}
	}
	for _, e := range entries {
		name := e.Name()
		fi, _ := e.Info()
		switch {
		case strings.HasPrefix(name, "."+loadFilePrefix) && strings.Contains(name, ".tmp-"):
			gc(name, fi) // a writer died mid-write
			continue
		case strings.HasPrefix(name, loadFilePrefix) && strings.HasSuffix(name, loadLockExt):
			if !records[strings.TrimSuffix(name, loadLockExt)] {
				if st, _ := sc.lock(filepath.Join(sc.dir, name)); st != lockHeld {
					gc(name, fi)
				}
			}
			continue
		case !strings.HasPrefix(name, loadFilePrefix) || !strings.HasSuffix(name, loadRecordExt):
			continue
		}
		if fi == nil || !fi.Mode().IsRegular() {
			continue
		}
		seen[name] = true
		st := fileStamp{exists: true, mtime: fi.ModTime(), size: fi.Size(), ino: inode(fi)}
		f := sc.files[name]
		if f == nil || f.stamp != st {
			f = &loadFile{stamp: st}
			sc.files[name] = f
			rec, err := readLoadRecord(filepath.Join(sc.dir, name))
			if err != nil {
				sc.logger.Warn("ignoring a sim load record", "file", filepath.Join(sc.dir, name), "error", err)
			} else {
				f.rec = rec
			}
		}
		base := strings.TrimSuffix(name, loadRecordExt)
		lock, pid := sc.lock(filepath.Join(sc.dir, base+loadLockExt))
		if f.rec != nil && f.rec.liveAt(now, lock) {
			live = append(live, liveLoad{name: name, rec: f.rec, pid: pid})
			continue
		}
		if lock != lockHeld {
			gc(name, fi) // its lock file goes at a later scan, as an orphan
		}
	}
	for name := range sc.files {
		if !seen[name] {
			delete(sc.files, name)
		}
	}
	return live
}

// readDirLimited lists up to n entries of a directory, sorted by name.
func readDirLimited(dir string, n int) ([]fs.DirEntry, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(n)
	if err == io.EOF {
		err = nil
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

// readLoadRecord reads and validates a record file. The directory is
// writable by everyone, so only a regular file with one link and of sane
// size is read, and symlinks are not followed.
func readLoadRecord(path string) (*LoadRecord, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxLoadRecord+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxLoadRecord {
		return nil, fmt.Errorf("larger than %d bytes", maxLoadRecord)
	}
	var rec LoadRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("not a load record: %w", err)
	}
	if err := rec.Validate(); err != nil {
		return nil, err
	}
	return &rec, nil
}

// loadSum is what the live loads put on one device before caps.
type loadSum struct {
	gpu, mem float64 // percent
	bytes    uint64
}

// pidUtil is what one writer pid puts on one device, in percent.
type pidUtil struct{ sm, mem float64 }

// sumLoads adds up the live loads per device of this node and lists the
// processes they stand for, with the utilisation each such process puts on
// each device (a MIG instance's also on its parent, weighted by the
// instance's share of the GPU's compute slices). Entries naming no device
// of the node are ignored. The caller holds migMu (derive).
func (s *Server) sumLoads(loads []liveLoad, now time.Time) (map[string]*loadSum, map[string][]nvml.ProcessInfo, map[string]map[uint32]*pidUtil) {
	sums := map[string]*loadSum{}
	procs := map[string][]nvml.ProcessInfo{}
	utils := map[string]map[uint32]*pidUtil{}
	addUtil := func(uuid string, pid uint32, sm, mem float64) {
		m := utils[uuid]
		if m == nil {
			m = map[uint32]*pidUtil{}
			utils[uuid] = m
		}
		u := m[pid]
		if u == nil {
			u = &pidUtil{}
			m[pid] = u
		}
		u.sm += sm
		u.mem += mem
	}
	for _, l := range loads {
		r := l.rec.rampAt(now)
		for i := range l.rec.Devices {
			e := &l.rec.Devices[i]
			var total uint64
			var mig *MigDevice
			switch d := s.byUUID[e.UUID].(type) {
			case *Device:
				total = d.Config.MemoryMB << 20
			case *MigDevice:
				total, mig = d.giProfile.MemorySizeMB<<20, d
			default:
				continue
			}
			a := sums[e.UUID]
			if a == nil {
				a = &loadSum{}
				sums[e.UUID] = a
			}
			b := e.bytesOn(total)
			a.gpu += r * e.UtilPercent
			a.mem += r * e.MemUtilPercent
			a.bytes += b
			if l.pid == 0 {
				continue
			}
			pi := nvml.ProcessInfo{Pid: l.pid, UsedGpuMemory: b, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}
			sm, mem := min(100, r*e.UtilPercent), min(100, r*e.MemUtilPercent)
			if mig != nil {
				pi.GpuInstanceId, pi.ComputeInstanceId = mig.gi, mig.ci
				procs[mig.parent.uuid] = append(procs[mig.parent.uuid], pi)
				w := float64(mig.giProfile.SliceCount) / maxSlices
				addUtil(mig.parent.uuid, l.pid, sm*w, mem*w)
			}
			procs[e.UUID] = append(procs[e.UUID], pi)
			addUtil(e.UUID, l.pid, sm, mem)
		}
	}
	return sums, procs, utils
}

// utilSamples turns what each writer pid puts on a device into the samples
// GetProcessUtilization reports, one per pid, stamped at (the view's) now
// in microseconds as NVML stamps them; sorted by pid.
func utilSamples(utils map[uint32]*pidUtil, now time.Time) []nvml.ProcessUtilizationSample {
	out := make([]nvml.ProcessUtilizationSample, 0, len(utils))
	pct := func(x float64) uint32 { return uint32(min(100, math.Round(x))) }
	for pid, u := range utils {
		out = append(out, nvml.ProcessUtilizationSample{Pid: pid, TimeStamp: uint64(now.UnixMicro()), SmUtil: pct(u.sm), MemUtil: pct(u.mem)})
	}
	slices.SortFunc(out, func(a, b nvml.ProcessUtilizationSample) int { return cmp.Compare(a.Pid, b.Pid) })
	return out
}

// withLoad is base plus a load, rounded and capped at 100 %.
func withLoad(base nvml.Utilization, gpu, mem float64) nvml.Utilization {
	add := func(b uint32, x float64) uint32 { return uint32(min(100, math.Round(float64(b)+x))) }
	return nvml.Utilization{Gpu: add(base.Gpu, gpu), Memory: add(base.Memory, mem)}
}

// LoadWriter keeps one load record in a load directory; see StartLoad.
type LoadWriter struct {
	mu       sync.Mutex
	path     string
	lockPath string
	lock     *os.File
	rec      LoadRecord
	closed   bool
}

// StartLoad puts simulated work on the devices of rec in a node's load
// directory dir, until Close. Version and Heartbeat are set here, Start
// (when zero) to now and HeartbeatMS (when zero) to DefaultLoadHeartbeat.
// The caller must Refresh at least every heartbeat interval; readers drop
// a record not refreshed for 3 intervals.
func StartLoad(dir string, rec LoadRecord) (*LoadWriter, error) {
	now := time.Now()
	rec.Version = LoadVersion
	if rec.Start.IsZero() {
		rec.Start = now
	}
	rec.Heartbeat = now
	if rec.HeartbeatMS == 0 {
		rec.HeartbeatMS = DefaultLoadHeartbeat.Milliseconds()
	}
	if err := rec.Validate(); err != nil {
		return nil, fmt.Errorf("sim load: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("sim load: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("sim load: %s is not a directory", dir)
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("sim load: %w", err)
	}
	base := filepath.Join(dir, loadFilePrefix+hex.EncodeToString(id[:]))
	w := &LoadWriter{path: base + loadRecordExt, lockPath: base + loadLockExt, rec: rec}
	// The lock first: a reader that sees the record finds it held.
	lock, err := os.OpenFile(w.lockPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sim load: %w", err)
	}
	if err := lockExclusive(lock); err != nil {
		lock.Close()
		os.Remove(w.lockPath)
		return nil, fmt.Errorf("sim load: lock %s: %w", w.lockPath, err)
	}
	w.lock = lock
	if err := w.write(); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

func (w *LoadWriter) write() error {
	data, err := json.Marshal(&w.rec)
	if err != nil {
		return fmt.Errorf("sim load: %w", err)
	}
	if err := atomicfile.Replace(w.path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("sim load: %w", err)
	}
	return nil
}

// Path is the record file's path.
func (w *LoadWriter) Path() string { return w.path }

// Refresh rewrites the record with a new heartbeat.
func (w *LoadWriter) Refresh(now time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("sim load: closed")
	}
	w.rec.Heartbeat = now
	return w.write()
}

// Close removes the record, then the lock file; the load ends at once for
// every reader.
func (w *LoadWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	err := os.Remove(w.path)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	os.Remove(w.lockPath)
	w.lock.Close()
	if err != nil {
		return fmt.Errorf("sim load: %w", err)
	}
	return nil
}
