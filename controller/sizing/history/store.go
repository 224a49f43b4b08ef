package history

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// FormatVersion is the on-disk layout this build writes and reads.
const FormatVersion = 1

// Defaults for Options.
const (
	DefaultRetention        = 7 * 24 * time.Hour
	DefaultMaxSamplesPerKey = 20000
	DefaultMaxRuns          = 100000
	DefaultOpenTimeout      = time.Second
	DefaultPruneInterval    = 10 * time.Minute
)

// Errors that Open and the Store's methods wrap, for errors.Is.
var (
	// ErrInUse: another process (or another Store in this one) holds the file.
	ErrInUse = errors.New("history file in use")
	// ErrFormat: the file's format version is not one this build reads.
	ErrFormat = errors.New("unsupported history file format")
	// ErrCorrupt: the file, or a record in it, does not decode.
	ErrCorrupt = errCorrupt
)

// Options configure a Store; zero fields take the defaults.
type Options struct {
	// Retention is how long samples and finished runs are kept.
	Retention time.Duration
	// MaxSamplesPerKey bounds each task's samples; the oldest are dropped.
	MaxSamplesPerKey int
	// MaxRuns bounds the runs kept; the earliest created are dropped.
	MaxRuns int
	// OpenTimeout is how long Open waits for a file another process holds
	// before failing with ErrInUse.
	OpenTimeout time.Duration
	// PruneInterval is how often AddSamples prunes.
	PruneInterval time.Duration
	// Now is the clock for pruning; time.Now when nil.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.MaxSamplesPerKey <= 0 {
		o.MaxSamplesPerKey = DefaultMaxSamplesPerKey
	}
	if o.MaxRuns <= 0 {
		o.MaxRuns = DefaultMaxRuns
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = DefaultOpenTimeout
	}
	if o.PruneInterval <= 0 {
		o.PruneInterval = DefaultPruneInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Bucket and key names of format version 1.
var (
	bucketMeta          = []byte("meta")
	bucketSamples       = []byte("samples")         // bucket per task: timeKey -> encodeSample
	bucketSampleCounts  = []byte("sample_counts")   // task bucket name -> uint64
	bucketRuns          = []byte("runs")            // alloc ID -> encodeRun
	bucketRunsByCreated = []byte("runs_by_created") // timeKey(created, alloc) -> empty
	bucketRunsByKey     = []byte("runs_by_key")     // bucket per task: timeKey(created, alloc) -> empty
	metaFormat          = []byte("format")
	metaRunCount        = []byte("run_count")
)

// dataBuckets are created in every file. A file may also hold a
// "priority_raises" bucket, which nothing reads or writes: the
// controller's priority ledger keeps every raise.
var dataBuckets = [][]byte{bucketSamples, bucketSampleCounts, bucketRuns, bucketRunsByCreated, bucketRunsByKey}

// Store is the bbolt-file history: a Source and a Recorder. It is safe for
// concurrent use.
type Store struct {
	db   *bolt.DB
	path string
	opts Options

	mu        sync.Mutex
	lastPrune time.Time
}

var (
	_ Source   = (*Store)(nil)
	_ Recorder = (*Store)(nil)
)

// Open opens the history file at path, creating it (mode 0600, and its
// directory, mode 0700) when missing, and prunes it.
func Open(path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("history: no file path given")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("history: %s: %w", path, err)
	}
	opts = opts.withDefaults()
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("history: create directory for %s: %w", abs, err)
	}
	db, err := openBolt(abs, opts.OpenTimeout)
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, fmt.Errorf("history: %s is in use by %s, which holds it; only one sizer may use a history file, so stop that one or give this one another path (gave up after %s): %w",
			abs, describeHolders(abs), opts.OpenTimeout, ErrInUse)
	case err != nil:
		if errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrChecksum) ||
			errors.Is(err, bolterrors.ErrVersionMismatch) || errors.Is(err, errCorrupt) {
			return nil, fmt.Errorf("history: %s is corrupt or not a history file (%v); move it aside to start a new history: %w", abs, err, ErrCorrupt)
		}
		return nil, fmt.Errorf("history: open %s: %w", abs, err)
	}
	s := &Store{db: db, path: abs, opts: opts}
	if err := s.init(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if _, err := s.Prune(opts.Now()); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// openBolt opens the bbolt file, turning a panic on a damaged file into an
// error.
func openBolt(path string, timeout time.Duration) (db *bolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("%w: %v", errCorrupt, r)
		}
	}()
	return bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout})
}

// init creates the buckets of a new file, or checks an existing file's
// format version.
func (s *Store) init() error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
			if !empty {
				return fmt.Errorf("history: %s is a bbolt file without a history meta bucket, not a history file: %w", s.path, ErrFormat)
			}
			var err error
			if meta, err = tx.CreateBucket(bucketMeta); err != nil {
				return err
			}
			if err := meta.Put(metaFormat, binary.BigEndian.AppendUint32(nil, FormatVersion)); err != nil {
				return err
			}
		}
		v := meta.Get(metaFormat)
		if len(v) != 4 {
			return fmt.Errorf("history: %s has no readable format version: %w", s.path, ErrCorrupt)
		}
		switch ver := binary.BigEndian.Uint32(v); {
		case ver > FormatVersion:
			return fmt.Errorf("history: %s has format version %d, newer than the %d this build reads; upgrade nomad-gpu, or give it another path: %w",
				s.path, ver, FormatVersion, ErrFormat)
		case ver < FormatVersion:
			return fmt.Errorf("history: %s has format version %d, older than any this build reads (%d): %w", s.path, ver, FormatVersion, ErrFormat)
		}
		for _, b := range dataBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrFormat) && !errors.Is(err, ErrCorrupt) {
		err = fmt.Errorf("history: initialise %s: %w", s.path, err)
	}
	return err
}

// Path is the history file's absolute path.
func (s *Store) Path() string { return s.path }

// Close closes the file, releasing it to other processes.
func (s *Store) Close() error { return s.db.Close() }

func validKey(k Key) error {
	if k.Namespace == "" || k.Job == "" || k.Group == "" || k.Task == "" {
		return fmt.Errorf("history: incomplete task key %q", k.String())
	}
	if strings.Contains(k.String(), keySep) {
		return fmt.Errorf("history: task key %q holds a NUL", k.String())
	}
	return nil
}

func getUint(b *bolt.Bucket, k []byte) uint64 {
	if v := b.Get(k); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func putUint(b *bolt.Bucket, k []byte, n uint64) error {
	return b.Put(k, binary.BigEndian.AppendUint64(nil, n))
}

// firstKeys returns up to n of b's first keys, or, when stop is not nil,
// its first keys before stop: the keys to delete, since deleting through a
// cursor while moving it skips keys.
func firstKeys(b *bolt.Bucket, n int, stop []byte) [][]byte {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.First(); k != nil && (n < 0 || len(keys) < n); k, _ = c.Next() {
		if stop != nil && bytes.Compare(k, stop) >= 0 {
			break
		}
		keys = append(keys, bytes.Clone(k))
	}
	return keys
}

// AddSamples records samples in one transaction, dropping each task's
// oldest beyond MaxSamplesPerKey, and prunes when PruneInterval has passed.
// A sample with the same task, time and allocation as a stored one
// replaces it; samples already older than Retention are ignored.
func (s *Store) AddSamples(ctx context.Context, samples []Sample) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, sm := range samples {
		if err := validKey(sm.Key); err != nil {
			return err
		}
		if sm.Time.IsZero() {
			return fmt.Errorf("history: sample of %s (alloc %s) has no time", sm.Key, sm.AllocID)
		}
	}
	now := s.opts.Now()
	cutoff := now.Add(-s.opts.Retention)
	err := s.db.Update(func(tx *bolt.Tx) error {
		all, counts := tx.Bucket(bucketSamples), tx.Bucket(bucketSampleCounts)
		added := map[string]bool{}
		for _, sm := range samples {
			if sm.Time.Before(cutoff) {
				continue
			}
			name := keyBucket(sm.Key)
			b, err := all.CreateBucketIfNotExists(name)
			if err != nil {
				return err
			}
			key := timeKey(sm.Time, sm.AllocID)
			if b.Get(key) == nil {
				if err := putUint(counts, name, getUint(counts, name)+1); err != nil {
					return err
				}
			}
			if err := b.Put(key, encodeSample(sm)); err != nil {
				return err
			}
			added[string(name)] = true
		}
		for name := range added {
			n := getUint(counts, []byte(name))
			if n <= uint64(s.opts.MaxSamplesPerKey) {
				continue
			}
			b := all.Bucket([]byte(name))
			for _, k := range firstKeys(b, int(n-uint64(s.opts.MaxSamplesPerKey)), nil) {
				if err := b.Delete(k); err != nil {
					return err
				}
				n--
			}
			if err := putUint(counts, []byte(name), n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("history: add samples to %s: %w", s.path, err)
	}
	s.mu.Lock()
	due := now.Sub(s.lastPrune) >= s.opts.PruneInterval
	s.mu.Unlock()
	if due {
		_, err = s.Prune(now)
	}
	return err
}

// Pruned counts what Prune dropped.
type Pruned struct{ Samples, Runs int }

// Prune drops samples older than now less Retention, and runs that
// finished before then. Runs that have not finished are kept.
func (s *Store) Prune(now time.Time) (Pruned, error) {
	var p Pruned
	cutoff := now.Add(-s.opts.Retention)
	stop := timeBound(cutoff)
	err := s.db.Update(func(tx *bolt.Tx) error {
		all, counts := tx.Bucket(bucketSamples), tx.Bucket(bucketSampleCounts)
		var names [][]byte
		_ = all.ForEachBucket(func(k []byte) error { names = append(names, bytes.Clone(k)); return nil })
		for _, name := range names {
			b := all.Bucket(name)
			old := firstKeys(b, -1, stop)
			if len(old) == 0 {
				continue
			}
			for _, k := range old {
				if err := b.Delete(k); err != nil {
					return err
				}
			}
			p.Samples += len(old)
			n := getUint(counts, name)
			if first, _ := b.Cursor().First(); first == nil {
				if err := all.DeleteBucket(name); err != nil {
					return err
				}
				if err := counts.Delete(name); err != nil {
					return err
				}
				continue
			}
			if err := putUint(counts, name, n-uint64(len(old))); err != nil {
				return err
			}
		}
		// A run finishes after it is created, so only runs created before
		// the cutoff can have finished before it.
		runs := tx.Bucket(bucketRuns)
		for _, ik := range firstKeys(tx.Bucket(bucketRunsByCreated), -1, stop) {
			_, alloc, err := splitTimeKey(ik)
			if err != nil {
				return err
			}
			v := runs.Get([]byte(alloc))
			if v == nil {
				continue
			}
			r, err := decodeRun(v)
			if err != nil {
				return err
			}
			if r.Finished.IsZero() || !r.Finished.Before(cutoff) {
				continue
			}
			if err := deleteRun(tx, r); err != nil {
				return err
			}
			p.Runs++
		}
		return nil
	})
	if err != nil {
		return p, fmt.Errorf("history: prune %s: %w", s.path, err)
	}
	s.mu.Lock()
	s.lastPrune = now
	s.mu.Unlock()
	return p, nil
}

// deleteRun removes a stored run and its index entries.
func deleteRun(tx *bolt.Tx, r Run) error {
	ik := timeKey(r.Created, r.AllocID)
	if err := tx.Bucket(bucketRunsByCreated).Delete(ik); err != nil {
		return err
	}
	byKey := tx.Bucket(bucketRunsByKey)
	name := keyBucket(r.Key)
	if b := byKey.Bucket(name); b != nil {
		if err := b.Delete(ik); err != nil {
			return err
		}
		if k, _ := b.Cursor().First(); k == nil {
			if err := byKey.DeleteBucket(name); err != nil {
				return err
			}
		}
	}
	if err := tx.Bucket(bucketRuns).Delete([]byte(r.AllocID)); err != nil {
		return err
	}
	meta := tx.Bucket(bucketMeta)
	if n := getUint(meta, metaRunCount); n > 0 {
		return putUint(meta, metaRunCount, n-1)
	}
	return nil
}

// PutRun inserts or replaces the run with r.AllocID, then drops the
// earliest created runs beyond MaxRuns. A replacement without Submitted
// keeps the one stored: the job's newer version no longer says when the
// allocation's was submitted.
func (s *Store) PutRun(ctx context.Context, r Run) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validKey(r.Key); err != nil {
		return err
	}
	if r.AllocID == "" {
		return fmt.Errorf("history: run of %s has no allocation ID", r.Key)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		runs, meta := tx.Bucket(bucketRuns), tx.Bucket(bucketMeta)
		if old := runs.Get([]byte(r.AllocID)); old != nil {
			prev, err := decodeRun(old)
			if err != nil {
				return err
			}
			if r.Submitted.IsZero() {
				r.Submitted = prev.Submitted
			}
			if err := deleteRun(tx, prev); err != nil {
				return err
			}
		}
		val, err := encodeRun(r)
		if err != nil {
			return err
		}
		ik := timeKey(r.Created, r.AllocID)
		if err := runs.Put([]byte(r.AllocID), val); err != nil {
			return err
		}
		if err := tx.Bucket(bucketRunsByCreated).Put(ik, nil); err != nil {
			return err
		}
		b, err := tx.Bucket(bucketRunsByKey).CreateBucketIfNotExists(keyBucket(r.Key))
		if err != nil {
			return err
		}
		if err := b.Put(ik, nil); err != nil {
			return err
		}
		n := getUint(meta, metaRunCount) + 1
		if err := putUint(meta, metaRunCount, n); err != nil {
			return err
		}
		if n <= uint64(s.opts.MaxRuns) {
			return nil
		}
		for _, ik := range firstKeys(tx.Bucket(bucketRunsByCreated), int(n-uint64(s.opts.MaxRuns)), nil) {
			_, alloc, err := splitTimeKey(ik)
			if err != nil {
				return err
			}
			v := runs.Get([]byte(alloc))
			if v == nil {
				continue
			}
			old, err := decodeRun(v)
			if err != nil {
				return err
			}
			if err := deleteRun(tx, old); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("history: put run %s of %s into %s: %w", r.AllocID, r.Key, s.path, err)
	}
	return nil
}

// Samples returns k's samples with since <= Time < until (no upper bound
// when until is zero), ordered by Time, then AllocID.
func (s *Store) Samples(ctx context.Context, k Key, since, until time.Time) ([]Sample, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []Sample
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSamples).Bucket(keyBucket(k))
		if b == nil {
			return nil
		}
		var stop []byte
		if !until.IsZero() {
			stop = timeBound(until)
		}
		c := b.Cursor()
		for key, val := c.Seek(timeBound(since)); key != nil; key, val = c.Next() {
			if stop != nil && bytes.Compare(key, stop) >= 0 {
				break
			}
			sm, err := decodeSample(k, key, val)
			if err != nil {
				return err
			}
			out = append(out, sm)
			if len(out)%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("history: read samples of %s from %s: %w", k, s.path, err)
	}
	return out, nil
}

// Keys returns the tasks that have samples, sorted by their String.
func (s *Store) Keys(ctx context.Context) ([]Key, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var keys []Key
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSamples).ForEachBucket(func(name []byte) error {
			k, err := parseKeyBucket(name)
			keys = append(keys, k)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("history: read tasks from %s: %w", s.path, err)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	return keys, nil
}

// Runs returns k's runs that had not finished before since, ordered by
// Created, then AllocID.
func (s *Store) Runs(ctx context.Context, k Key, since time.Time) ([]Run, error) {
	return s.runs(ctx, &k, since)
}

// AllRuns returns every task's runs that had not finished before since,
// ordered by Created, then AllocID.
func (s *Store) AllRuns(ctx context.Context, since time.Time) ([]Run, error) {
	return s.runs(ctx, nil, since)
}

func (s *Store) runs(ctx context.Context, k *Key, since time.Time) ([]Run, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []Run
	err := s.db.View(func(tx *bolt.Tx) error {
		index := tx.Bucket(bucketRunsByCreated)
		if k != nil {
			if index = tx.Bucket(bucketRunsByKey).Bucket(keyBucket(*k)); index == nil {
				return nil
			}
		}
		runs := tx.Bucket(bucketRuns)
		c := index.Cursor()
		for ik, _ := c.First(); ik != nil; ik, _ = c.Next() {
			_, alloc, err := splitTimeKey(ik)
			if err != nil {
				return err
			}
			v := runs.Get([]byte(alloc))
			if v == nil {
				continue
			}
			r, err := decodeRun(v)
			if err != nil {
				return err
			}
			if !r.Finished.IsZero() && r.Finished.Before(since) {
				continue
			}
			out = append(out, r)
			if len(out)%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("history: read runs from %s: %w", s.path, err)
	}
	return out, nil
}

// describeHolders names the processes that have path open, from /proc, or
// says who likely has it when none can be seen.
func describeHolders(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	procs, _ := os.ReadDir("/proc")
	var holders []string
	for _, d := range procs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join("/proc", d.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && target == path {
				holders = append(holders, describePID(pid))
				break
			}
		}
	}
	if len(holders) == 0 {
		return "another process (likely the sizer of a running nomad-gpu-apm plugin on this host)"
	}
	return strings.Join(holders, ", ")
}

func describePID(pid int) string {
	name := "?"
	if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm")); err == nil {
		name = strings.TrimSpace(string(b))
	}
	if pid == os.Getpid() {
		return fmt.Sprintf("this process (pid %d, %s: another Store in it has the file open)", pid, name)
	}
	return fmt.Sprintf("pid %d (%s)", pid, name)
}
