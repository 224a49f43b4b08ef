package tracereplay

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const phillyHeader = "timestamp,duration,num_gpus,gpu_time,cluster\n"

func TestReadPhilly(t *testing.T) {
	in := phillyHeader +
		"2017-10-09 07:01:55,66.0,1,66.0,11cb48\n" + // 1
		"2017-10-09 06:13:03,2951.0,2,5902.0,6214e9\n" + // 2
		"2017-10-09 06:13:03,0.0,1,0.0,6214e9\n" + // 3: skipped, no duration
		"2017-09-29 07:58:32,860662.5,8,6885300.0,6c71a0\n" + // 4: the earliest
		"2017-10-09 06:13:03,10.0,0,0.0,6214e9\n" + // 5: skipped, no GPU
		"2017-10-09 06:13:03,-3.0,4,0.0,6214e9\n" + // 6: skipped
		"2017-10-09 06:13:03,1.0,1,1.0,6214e9\n" + // 7: ties with 2
		"\n"
	jobs, epoch, stats, err := ReadPhilly(strings.NewReader(in), PhillyOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2017, 9, 29, 7, 58, 32, 0, time.UTC); !epoch.Equal(want) {
		t.Errorf("epoch %v, want %v", epoch, want)
	}
	if want := (PhillyStats{Rows: 7, Jobs: 4, Skipped: 3}); stats != want {
		t.Errorf("stats %+v, want %+v", stats, want)
	}
	at := func(ts string) time.Duration {
		tm, _ := time.Parse(PhillyTimeLayout, ts)
		return tm.Sub(epoch)
	}
	want := []struct {
		id       string
		arrival  time.Duration
		duration time.Duration
		gpus     int
	}{
		{"philly-4", 0, 860662500 * time.Millisecond, 8},
		{"philly-2", at("2017-10-09 06:13:03"), 2951 * time.Second, 2},
		{"philly-7", at("2017-10-09 06:13:03"), 1 * time.Second, 1},
		{"philly-1", at("2017-10-09 07:01:55"), 66 * time.Second, 1},
	}
	if len(jobs) != len(want) {
		t.Fatalf("%d jobs, want %d: %+v", len(jobs), len(want), jobs)
	}
	for i, w := range want {
		j := jobs[i]
		if j.ID != w.id || j.Arrival != w.arrival || j.Duration != w.duration || j.GPUs != w.gpus {
			t.Errorf("job %d: %s at %v for %v on %d GPUs; want %s at %v for %v on %d", i, j.ID, j.Arrival, j.Duration, j.GPUs, w.id, w.arrival, w.duration, w.gpus)
		}
		if j.Priority == 0 || j.Util < 30 || j.Util > 100 || j.MemoryMiB != 0 || !(j.Fraction > 0 && j.Fraction <= 1) || j.GPUs > 1 && j.Fraction != 1 {
			t.Errorf("job %s: derived fields out of range: %+v", j.ID, j)
		}
	}
	// The cluster column is the job's team (Philly's virtual cluster).
	if teams := []string{jobs[0].Team, jobs[1].Team, jobs[3].Team}; !reflect.DeepEqual(teams, []string{"6c71a0", "6214e9", "11cb48"}) {
		t.Errorf("teams %q; want the cluster column", teams)
	}
	// Without a cluster column, no team.
	plain, _, _, err := ReadPhilly(strings.NewReader("timestamp,duration,num_gpus\n2017-10-09 07:01:55,66.0,1\n"), PhillyOptions{Seed: 1})
	if err != nil || len(plain) != 1 || plain[0].Team != "" {
		t.Errorf("no cluster column: %+v, %v; want one job with no team", plain, err)
	}
}

func TestReadPhillyErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		o    PhillyOptions
		want string
	}{
		{"empty", "", PhillyOptions{}, "no header; required: a first line naming the columns timestamp, duration, num_gpus"},
		{"no num_gpus", "timestamp,duration\n", PhillyOptions{}, "line 1: no column num_gpus; required: timestamp, duration, num_gpus"},
		{"bad timestamp", phillyHeader + "2017-10-09T07:01:55,66.0,1,66.0,x\n", PhillyOptions{}, `line 2: timestamp: "2017-10-09T07:01:55"; allowed: a time YYYY-mm-dd HH:MM:SS`},
		{"bad duration", phillyHeader + "2017-10-09 07:01:55,,1,66.0,x\n", PhillyOptions{}, "line 2: duration: empty; allowed: a number of seconds"},
		{"huge duration", phillyHeader + "2017-10-09 07:01:55,1e12,1,66.0,x\n", PhillyOptions{}, "line 2: duration: 1e12; allowed: a number of seconds up to 9e9"},
		{"bad num_gpus", phillyHeader + "2017-10-09 07:01:55,66.0,one,66.0,x\n", PhillyOptions{}, `line 2: num_gpus: "one"; allowed: an integer`},
		{"field count", phillyHeader + "2017-10-09 07:01:55,66.0,1\n", PhillyOptions{}, "line 2: 3 fields; allowed: 5, one per header column"},
		{"share above 1", phillyHeader, PhillyOptions{FractionShare: 1.5}, "fraction_share: 1.5; allowed: a share in [0, 1] (0: 0.3, below 0: none)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := ReadPhilly(strings.NewReader(tc.in), tc.o)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error\n got %v\nwant %s", err, tc.want)
			}
		})
	}
}

// phillyRows is a synthetic extract of n rows, a third of them on 2 GPUs.
func phillyRows(n int) string {
	var b strings.Builder
	b.WriteString(phillyHeader)
	t0 := time.Date(2017, 10, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		gpus := 1 + i%3/2
		fmt.Fprintf(&b, "%s,%d.0,%d,0,c\n", t0.Add(time.Duration(i*7919%n)*time.Minute).Format(PhillyTimeLayout), 60+i, gpus)
	}
	return b.String()
}

func byID(jobs []Job) map[string]Job {
	m := map[string]Job{}
	for _, j := range jobs {
		m[j.ID] = j
	}
	return m
}

func derived(j Job) [3]float64 { return [3]float64{float64(j.Priority), j.Fraction, j.Util} }

// A job's derived fields must not depend on which other rows the extract
// has, where the trace starts, or whether the job was sampled.
func TestPhillyDerivedPerJob(t *testing.T) {
	base := phillyRows(500)
	all, _, _, err := ReadPhilly(strings.NewReader(base), PhillyOptions{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := byID(all)
	// Rows appended before the old epoch shift every arrival and the
	// sort; they leave the old rows' IDs as they were.
	more := base + "2017-09-01 00:00:00,5.0,1,0,c\n2017-09-02 00:00:00,5.0,4,0,c\n"
	bigger, epoch, _, err := ReadPhilly(strings.NewReader(more), PhillyOptions{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	picked, err := Select(bigger, epoch, Selection{Window: 3 * time.Hour, Busiest: true, Sample: 50, Seed: 9}, "x")
	if err != nil {
		t.Fatal(err)
	}
	if len(picked.Jobs) != 50 {
		t.Fatalf("%d jobs picked, want 50", len(picked.Jobs))
	}
	for _, j := range picked.Jobs {
		if w := want[j.ID]; derived(j) != derived(w) {
			t.Errorf("%s: priority, fraction, util %v sampled, %v in the whole extract", j.ID, derived(j), derived(w))
		}
	}

	other, _, _, _ := ReadPhilly(strings.NewReader(base), PhillyOptions{Seed: 4})
	same := 0
	for i, j := range other {
		if derived(j) == derived(all[i]) {
			same++
		}
	}
	if same > len(all)/10 {
		t.Errorf("seed 4 derives the same fields as seed 3 for %d of %d jobs", same, len(all))
	}
}

// Raising FractionShare must only turn more whole jobs fractional.
func TestPhillyFractionShare(t *testing.T) {
	in := phillyRows(2000)
	read := func(share float64) []Job {
		jobs, _, _, err := ReadPhilly(strings.NewReader(in), PhillyOptions{Seed: 1, FractionShare: share})
		if err != nil {
			t.Fatal(err)
		}
		return jobs
	}
	low, dflt, high, none := read(0.1), read(0), read(0.6), read(-1)
	if !reflect.DeepEqual(dflt, read(DefaultFractionShare)) {
		t.Errorf("FractionShare 0 does not give the default %v", DefaultFractionShare)
	}
	counts := map[float64]int{}
	for i := range low {
		l, h, n := low[i], high[i], none[i]
		if l.Priority != h.Priority || l.Util != h.Util || n.Priority != l.Priority || n.Util != l.Util {
			t.Errorf("%s: the share changed its priority or util", l.ID)
		}
		if l.Fractional() && l.Fraction != h.Fraction {
			t.Errorf("%s: fraction %v at share 0.1, %v at 0.6", l.ID, l.Fraction, h.Fraction)
		}
		if n.Fractional() {
			t.Errorf("%s: fractional with a negative share", n.ID)
		}
		if h.GPUs > 1 && h.Fraction != 1 {
			t.Errorf("%s: fraction %v on %d GPUs", h.ID, h.Fraction, h.GPUs)
		}
		counts[h.Fraction]++
	}
	if len(counts) != 3 || counts[0.25] == 0 || counts[0.5] == 0 {
		t.Errorf("fractions at share 0.6: %v; want only 1, 0.5 and 0.25", counts)
	}
}

func TestPhillyExtract(t *testing.T) {
	f, _, err := OpenPhilly("")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	jobs, epoch, stats, err := ReadPhilly(f, PhillyOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := (PhillyStats{Rows: 82247, Jobs: 82247}); stats != want {
		t.Errorf("stats %+v, want %+v", stats, want)
	}
	if jobs[0].Arrival != 0 {
		t.Errorf("first arrival %v, want 0 at the epoch %v", jobs[0].Arrival, epoch)
	}
	prio := map[int]int{}
	var single, fractional, quarter int
	var util float64
	for i, j := range jobs {
		if i > 0 && compareJobs(jobs[i-1], j) > 0 {
			t.Fatalf("jobs %d and %d out of order", i-1, i)
		}
		prio[j.Priority]++
		if j.GPUs == 1 {
			single++
		}
		if j.Fractional() {
			fractional++
			if j.GPUs != 1 {
				t.Errorf("%s: fraction %v on %d GPUs", j.ID, j.Fraction, j.GPUs)
			}
			if j.Fraction == 0.25 {
				quarter++
			}
		}
		if j.Util < 30 || j.Util > 100 {
			t.Errorf("%s: util %v; want [30, 100]", j.ID, j.Util)
		}
		util += j.Util
	}
	n := float64(len(jobs))
	for p, share := range map[int]float64{30: 0.5, 50: 0.3, 80: 0.2} {
		if got := float64(prio[p]) / n; math.Abs(got-share) > 0.03 {
			t.Errorf("priority %d: %.3f of jobs, want %.2f ± 0.03", p, got, share)
		}
	}
	if len(prio) != 3 {
		t.Errorf("priorities %v; want only 30, 50 and 80", prio)
	}
	if got := float64(fractional) / float64(single); math.Abs(got-0.3) > 0.01 {
		t.Errorf("fractional: %.3f of 1-GPU jobs, want 0.3 ± 0.01", got)
	}
	if got := float64(quarter) / float64(fractional); math.Abs(got-0.5) > 0.02 {
		t.Errorf("0.25 GPU: %.3f of fractional jobs, want 0.5 ± 0.02", got)
	}
	if got := util / n; math.Abs(got-65) > 0.5 {
		t.Errorf("mean util %.2f, want 65 ± 0.5", got)
	}

	sel, err := Select(jobs, epoch, Selection{Window: 6 * time.Hour, Busiest: true, Sample: 300, Seed: 1}, "philly.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(sel.Jobs) != 300 || !strings.HasPrefix(sel.Source, "philly.csv: busiest 6h0m0s window from 2017-") || !strings.HasSuffix(sel.Source, " jobs), 300 sampled with seed 1") {
		t.Errorf("selection: %d jobs, source %q", len(sel.Jobs), sel.Source)
	}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, sel); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Jobs, sel.Jobs) {
		t.Errorf("the selection does not round-trip through the replay CSV")
	}
}

func TestOpenPhillyPlainOrGzip(t *testing.T) {
	const csv = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
	dir := t.TempDir()
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(csv))
	zw.Close()
	files := map[string][]byte{"plain.csv": []byte(csv), "zipped.csv.gz": z.Bytes(), "zipped-no-suffix": z.Bytes()}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name := range files {
		path := filepath.Join(dir, name)
		r, got, err := OpenPhilly(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		jobs, _, _, err := ReadPhilly(r, PhillyOptions{Seed: 1})
		r.Close()
		if err != nil || len(jobs) != 1 || jobs[0].Duration != 66*time.Second || got != path {
			t.Errorf("%s: %d jobs, %v, name %q", name, len(jobs), err, got)
		}
	}
	if _, _, err := OpenPhilly(filepath.Join(dir, "missing.csv")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if r, name, err := OpenPhilly(""); err != nil || name != "traces/philly.csv.gz" {
		t.Errorf("embedded: %q, %v", name, err)
	} else {
		r.Close()
	}
}
