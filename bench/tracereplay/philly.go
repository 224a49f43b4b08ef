package tracereplay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/csv"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-gpu/nomad-gpu/bench/traces"
)

// PhillyAttribution is the attribution the Philly trace's licence asks
// for wherever the data or results derived from it are shown.
const PhillyAttribution = `Job trace: Microsoft Philly GPU cluster trace (Sept–Dec 2017), per-job extract of the Pollux artifact, licensed CC-BY-4.0 (https://github.com/msr-fiddle/philly-traces). Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads", USENIX ATC 2019. It has no priorities, GPU fractions or utilisations: those are derived from a seeded hash of each job's ID (tracereplay.ReadPhilly).`

// OpenPhilly opens a Philly extract to read as CSV: the file at path,
// plain or gzip-compressed (told by its first bytes), or for "" the copy
// this repository carries (traces.Philly). name is what reports call it.
func OpenPhilly(path string) (r io.ReadCloser, name string, err error) {
	if path == "" {
		return traces.Philly(), traces.PhillyName, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	br := bufio.NewReader(f)
	if magic, _ := br.Peek(2); !bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		return readCloser{br, f}, path, nil
	}
	z, err := gzip.NewReader(br)
	if err != nil {
		f.Close()
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return readCloser{z, f}, path, nil
}

// readCloser reads through a decoder and closes the file beneath it.
type readCloser struct {
	io.Reader
	io.Closer
}

// PhillyTimeLayout is the layout of the extract's timestamps, and of a
// Selection's Start; both are UTC.
const PhillyTimeLayout = "2006-01-02 15:04:05"

// DefaultFractionShare is PhillyOptions.FractionShare's default.
const DefaultFractionShare = 0.3

// PhillyOptions are the seeds and shares of the fields ReadPhilly derives.
type PhillyOptions struct {
	// Seed seeds the derived fields.
	Seed int64
	// FractionShare is the share of 1-GPU jobs that become fractional,
	// in [0, 1]; 0 means DefaultFractionShare, and a negative share none.
	FractionShare float64
}

// PhillyStats counts what ReadPhilly read.
type PhillyStats struct {
	// Rows are the data rows, Jobs the jobs made of them.
	Rows, Jobs int
	// Skipped are the rows left out for a duration ≤ 0 or a num_gpus
	// below 1: Rows - Jobs.
	Skipped int
}

// ReadPhilly converts the Philly extract (philly.csv: columns timestamp,
// duration, num_gpus, cluster where present, and others, which are
// ignored) into jobs sorted by arrival, then ID. A job's Team is its
// cluster column: Philly's virtual cluster, the team that submitted it
// (Jeon et al.: each virtual cluster is a product group's share).
//
// A job's ID is "philly-<n>", n its data row's number, from 1, counting
// skipped rows, so that an ID names the same row whatever is skipped.
// Its Arrival is its timestamp (UTC) less epoch, the earliest timestamp of
// the jobs; its Duration is the duration column's seconds, and GPUs is
// num_gpus. Rows with a duration ≤ 0 or num_gpus < 1 are skipped and
// counted in the stats; a value that does not parse is an error naming
// the line and the column.
//
// Philly has no priority, GPU fraction or utilisation; ReadPhilly derives
// them, seeded, each a function of (o.Seed, job ID) alone, so that a job
// has the same values in the whole trace and in any window or sample of
// it. FNV-64a of "philly", the seed (8 bytes, little-endian) and the ID
// seeds a PCG generator (math/rand/v2, seeded with that hash and
// 0x9E3779B97F4A7C15), and its first four Uint64s, each taken as u =
// (x >> 11) / 2^53 in [0, 1), give:
//
//   - Priority: 30 if u1 < 0.5, 50 if u1 < 0.8, else 80 (tiers of 50 %,
//     30 % and 20 % of jobs).
//   - Fraction: for a 1-GPU job with u2 < FractionShare, 0.25 if u3 <
//     0.5, else 0.5; 1 otherwise. Raising the share only adds fractional
//     jobs; it changes no other job.
//   - Util: 30 + 70·u4 percent, rounded to 0.1 (uniform in [30, 100]).
//   - MemoryMiB: 0, not given.
func ReadPhilly(r io.Reader, o PhillyOptions) (jobs []Job, epoch time.Time, stats PhillyStats, err error) {
	share := o.FractionShare
	switch {
	case share == 0:
		share = DefaultFractionShare
	case share < 0:
		share = 0
	case !(share <= 1):
		return nil, time.Time{}, stats, fmt.Errorf("fraction_share: %v; allowed: a share in [0, 1] (0: %v, below 0: none)", o.FractionShare, DefaultFractionShare)
	}

	cr := csv.NewReader(withoutBOM(r))
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err == io.EOF {
		return nil, time.Time{}, stats, fmt.Errorf("no header; required: a first line naming the columns timestamp, duration, num_gpus")
	}
	if err != nil {
		return nil, time.Time{}, stats, csvError(err)
	}
	headerLine, _ := cr.FieldPos(0)
	col := map[string]int{}
	for i, name := range header {
		col[strings.TrimSpace(name)] = i
	}
	for _, name := range []string{"timestamp", "duration", "num_gpus"} {
		if _, ok := col[name]; !ok {
			return nil, time.Time{}, stats, fmt.Errorf("line %d: no column %s; required: timestamp, duration, num_gpus", headerLine, name)
		}
	}

	type row struct {
		at time.Time
		j  Job
	}
	var rows []row
	for n := 1; ; n++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, time.Time{}, stats, csvError(err)
		}
		stats.Rows++
		line, _ := cr.FieldPos(0)
		if len(rec) != len(header) {
			return nil, time.Time{}, stats, fmt.Errorf("line %d: %d fields; allowed: %d, one per header column", line, len(rec), len(header))
		}
		field := func(name string) string { return strings.TrimSpace(rec[col[name]]) }
		bad := func(name, allowed string) error {
			return fmt.Errorf("line %d: %s: %s; allowed: %s", line, name, showValue(field(name)), allowed)
		}

		at, err := time.Parse(PhillyTimeLayout, field("timestamp"))
		if err != nil {
			return nil, time.Time{}, stats, bad("timestamp", "a time YYYY-mm-dd HH:MM:SS")
		}
		secs, err := strconv.ParseFloat(field("duration"), 64)
		if err != nil || math.IsNaN(secs) {
			return nil, time.Time{}, stats, bad("duration", "a number of seconds")
		}
		gpus, err := strconv.Atoi(field("num_gpus"))
		if err != nil {
			return nil, time.Time{}, stats, bad("num_gpus", "an integer")
		}
		if secs <= 0 || gpus < 1 {
			stats.Skipped++
			continue
		}
		d, ok := parseSeconds(field("duration"))
		if !ok {
			return nil, time.Time{}, stats, bad("duration", "a number of seconds up to 9e9")
		}
		j := Job{ID: "philly-" + strconv.Itoa(n), Duration: d, GPUs: gpus}
		if _, ok := col["cluster"]; ok {
			j.Team = field("cluster")
		}
		derivePhilly(&j, o.Seed, share)
		rows = append(rows, row{at, j})
	}
	stats.Jobs = len(rows)
	if len(rows) == 0 {
		return nil, time.Time{}, stats, nil
	}

	epoch = slices.MinFunc(rows, func(a, b row) int { return a.at.Compare(b.at) }).at
	jobs = make([]Job, len(rows))
	for i, rw := range rows {
		rw.j.Arrival = rw.at.Sub(epoch)
		jobs[i] = rw.j
	}
	sortJobs(jobs)
	return jobs, epoch, stats, nil
}

// derivePhilly sets the fields Philly lacks, as ReadPhilly documents.
func derivePhilly(j *Job, seed int64, share float64) {
	g := jobRand("philly", seed, j.ID)
	u := func() float64 { return float64(g.Uint64()>>11) / (1 << 53) }
	// Drawn in a fixed order, whether used or not, so that each field
	// depends on the ID alone and not on the job's other fields.
	u1, u2, u3, u4 := u(), u(), u(), u()
	switch {
	case u1 < 0.5:
		j.Priority = 30
	case u1 < 0.8:
		j.Priority = 50
	default:
		j.Priority = 80
	}
	j.Fraction = 1
	if j.GPUs == 1 && u2 < share {
		j.Fraction = 0.5
		if u3 < 0.5 {
			j.Fraction = 0.25
		}
	}
	j.Util = math.Round(10*(30+70*u4)) / 10
}

// jobRand is a generator that depends on (domain, seed, id) only: the
// domain keeps the sample's draws apart from the derived fields'.
// Only PCG.Uint64 is used, whose algorithm math/rand/v2 fixes, so that
// the values stay the same across Go releases.
func jobRand(domain string, seed int64, id string) *rand.PCG {
	h := fnv.New64a()
	h.Write([]byte(domain))
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(seed)))
	h.Write([]byte(id))
	return rand.NewPCG(h.Sum64(), 0x9E3779B97F4A7C15)
}
