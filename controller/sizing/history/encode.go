package history

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// errCorrupt marks a record that does not decode.
var errCorrupt = errors.New("corrupt record")

// keySep separates a Key's fields in a bucket name; Nomad names cannot hold
// a NUL.
const keySep = "\x00"

func keyBucket(k Key) []byte {
	return []byte(k.Namespace + keySep + k.Job + keySep + k.Group + keySep + k.Task)
}

func parseKeyBucket(b []byte) (Key, error) {
	f := strings.Split(string(b), keySep)
	if len(f) != 4 {
		return Key{}, fmt.Errorf("%w: task bucket %q", errCorrupt, b)
	}
	return Key{Namespace: f[0], Job: f[1], Group: f[2], Task: f[3]}, nil
}

// nanos is t as unsigned Unix nanoseconds, so that big-endian keys sort by
// time; times before 1970 (including the zero time) are 0.
func nanos(t time.Time) uint64 {
	if t.IsZero() || t.Before(time.Unix(0, 0)) {
		return 0
	}
	return uint64(t.UnixNano())
}

func fromNanos(n uint64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(n)).UTC()
}

// timeKey is the big-endian time followed by the allocation ID: the key of
// a sample in its task's bucket, and of a run in the by-created indexes.
func timeKey(t time.Time, allocID string) []byte {
	k := make([]byte, 8, 8+len(allocID))
	binary.BigEndian.PutUint64(k, nanos(t))
	return append(k, allocID...)
}

func splitTimeKey(k []byte) (time.Time, string, error) {
	if len(k) < 8 {
		return time.Time{}, "", fmt.Errorf("%w: key %x", errCorrupt, k)
	}
	return fromNanos(binary.BigEndian.Uint64(k)), string(k[8:]), nil
}

func timeBound(t time.Time) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, nanos(t))
	return k
}

// encodeSample encodes what is not in the key: slice, utilisation and
// memory, as
//
//	uvarint len, kind | varint count | uvarint len, profile |
//	8 bytes float64 util | uvarint mem | uvarint limit
func encodeSample(s Sample) []byte {
	b := make([]byte, 0, 32+len(s.Slice.Kind)+len(s.Slice.Profile))
	b = binary.AppendUvarint(b, uint64(len(s.Slice.Kind)))
	b = append(b, s.Slice.Kind...)
	b = binary.AppendVarint(b, int64(s.Slice.Count))
	b = binary.AppendUvarint(b, uint64(len(s.Slice.Profile)))
	b = append(b, s.Slice.Profile...)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(s.UtilPct))
	b = binary.AppendUvarint(b, s.MemBytes)
	b = binary.AppendUvarint(b, s.MemLimitBytes)
	return b
}

func decodeSample(k Key, key, val []byte) (Sample, error) {
	t, alloc, err := splitTimeKey(key)
	if err != nil {
		return Sample{}, err
	}
	s := Sample{Key: k, AllocID: alloc, Time: t}
	r := bytes.NewReader(val)
	str := func() (string, error) {
		n, err := binary.ReadUvarint(r)
		if err != nil || n > uint64(r.Len()) {
			return "", errCorrupt
		}
		b := make([]byte, n)
		_, _ = r.Read(b)
		return string(b), nil
	}
	bad := func() (Sample, error) {
		return Sample{}, fmt.Errorf("%w: sample %s at %x", errCorrupt, k, key)
	}
	if s.Slice.Kind, err = str(); err != nil {
		return bad()
	}
	count, err := binary.ReadVarint(r)
	if err != nil {
		return bad()
	}
	s.Slice.Count = int(count)
	if s.Slice.Profile, err = str(); err != nil {
		return bad()
	}
	var util [8]byte
	if n, _ := r.Read(util[:]); n != 8 {
		return bad()
	}
	s.UtilPct = math.Float64frombits(binary.BigEndian.Uint64(util[:]))
	if s.MemBytes, err = binary.ReadUvarint(r); err != nil {
		return bad()
	}
	if s.MemLimitBytes, err = binary.ReadUvarint(r); err != nil {
		return bad()
	}
	return s, nil
}

// runRecord is a Run as stored: JSON with short names, times as Unix
// nanoseconds (0 for the zero time).
type runRecord struct {
	Namespace string  `json:"ns"`
	Job       string  `json:"job"`
	Group     string  `json:"group"`
	Task      string  `json:"task"`
	AllocID   string  `json:"alloc"`
	Name      string  `json:"name,omitempty"`
	Kind      string  `json:"kind,omitempty"`
	Count     int     `json:"count,omitempty"`
	Profile   string  `json:"profile,omitempty"`
	Pool      string  `json:"pool,omitempty"`
	Priority  int     `json:"prio,omitempty"`
	Submitted uint64  `json:"submitted,omitempty"`
	Created   uint64  `json:"created,omitempty"`
	Started   uint64  `json:"started,omitempty"`
	Finished  uint64  `json:"finished,omitempty"`
	Outcome   Outcome `json:"outcome,omitempty"`
}

func encodeRun(r Run) ([]byte, error) {
	return json.Marshal(runRecord{
		Namespace: r.Key.Namespace, Job: r.Key.Job, Group: r.Key.Group, Task: r.Key.Task,
		AllocID: r.AllocID, Name: r.Name,
		Kind: r.Slice.Kind, Count: r.Slice.Count, Profile: r.Slice.Profile,
		Pool: r.Pool, Priority: r.Priority, Submitted: nanos(r.Submitted),
		Created: nanos(r.Created), Started: nanos(r.Started), Finished: nanos(r.Finished),
		Outcome: r.Outcome,
	})
}

func decodeRun(b []byte) (Run, error) {
	var rec runRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return Run{}, fmt.Errorf("%w: run: %v", errCorrupt, err)
	}
	return Run{
		Key:       Key{Namespace: rec.Namespace, Job: rec.Job, Group: rec.Group, Task: rec.Task},
		AllocID:   rec.AllocID,
		Name:      rec.Name,
		Slice:     Slice{Kind: rec.Kind, Count: rec.Count, Profile: rec.Profile},
		Pool:      rec.Pool,
		Priority:  rec.Priority,
		Submitted: fromNanos(rec.Submitted),
		Created:   fromNanos(rec.Created), Started: fromNanos(rec.Started), Finished: fromNanos(rec.Finished),
		Outcome: rec.Outcome,
	}, nil
}
