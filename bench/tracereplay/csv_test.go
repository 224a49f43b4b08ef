package tracereplay

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

const csvHeader = "id,arrival_s,duration_s,gpus,gpu_fraction,gpu_memory_mib,priority,gpu_util,team\n"

func TestReadCSV(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Job
	}{
		{
			name: "every column",
			in: csvHeader +
				"a,0,3600,4,1,40960,80,95.5,vision\n" +
				"b,12.5,600,1,0.25,0,10,30,\n",
			want: []Job{
				{ID: "a", Arrival: 0, Duration: time.Hour, GPUs: 4, Fraction: 1, MemoryMiB: 40960, Priority: 80, Util: 95.5, Team: "vision"},
				{ID: "b", Arrival: 12500 * time.Millisecond, Duration: 10 * time.Minute, GPUs: 1, Fraction: 0.25, Priority: 10, Util: 30},
			},
		},
		{
			name: "required columns only, defaults, any order",
			in:   "gpus,duration_s,arrival_s\n2,60,5\n1,1.5,0\n",
			want: []Job{
				{ID: "job-2", Arrival: 0, Duration: 1500 * time.Millisecond, GPUs: 1, Fraction: 1},
				{ID: "job-1", Arrival: 5 * time.Second, Duration: time.Minute, GPUs: 2, Fraction: 1},
			},
		},
		{
			name: "comments, spaces, byte-order mark, empty optional fields",
			in: "\ufeff# a trace\n" +
				" id , arrival_s ,duration_s,gpus,gpu_fraction,priority,gpu_util\n" +
				"# a comment between records\n" +
				" x , 7 , 8 , 1 , , , \n" +
				",7,9,1,0.5,,\n",
			want: []Job{
				{ID: "job-2", Arrival: 7 * time.Second, Duration: 9 * time.Second, GPUs: 1, Fraction: 0.5},
				{ID: "x", Arrival: 7 * time.Second, Duration: 8 * time.Second, GPUs: 1, Fraction: 1},
			},
		},
		{
			name: "sorted by arrival, then id",
			in:   "id,arrival_s,duration_s,gpus\nc,2,1,1\nb,1,1,1\na,2,1,1\n",
			want: []Job{
				{ID: "b", Arrival: 1 * time.Second, Duration: time.Second, GPUs: 1, Fraction: 1},
				{ID: "a", Arrival: 2 * time.Second, Duration: time.Second, GPUs: 1, Fraction: 1},
				{ID: "c", Arrival: 2 * time.Second, Duration: time.Second, GPUs: 1, Fraction: 1},
			},
		},
		{
			name: "exact decimals and other number forms",
			in:   "arrival_s,duration_s,gpus\n9000000000,0.000000001,1\n1e3,.5,1\n",
			want: []Job{
				{ID: "job-2", Arrival: 1000 * time.Second, Duration: 500 * time.Millisecond, GPUs: 1, Fraction: 1},
				{ID: "job-1", Arrival: 9e9 * time.Second, Duration: 1, GPUs: 1, Fraction: 1},
			},
		},
		{
			name: "header only",
			in:   "arrival_s,duration_s,gpus\n",
			want: nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadCSV(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Jobs, tc.want) {
				t.Errorf("jobs\n got %+v\nwant %+v", got.Jobs, tc.want)
			}
		})
	}
}

func TestReadCSVErrors(t *testing.T) {
	const min = "id,arrival_s,duration_s,gpus,gpu_fraction\n"
	tests := []struct {
		name, in, want string
	}{
		{"empty file", "", "no header; required: a first line naming the columns, at least arrival_s, duration_s, gpus"},
		{"only comments", "# nothing\n", "no header; required: a first line naming the columns, at least arrival_s, duration_s, gpus"},
		{"unknown columns", "id,arrival_s,duration_s,gpus,gpu,user\n",
			`line 1: unknown column "gpu", "user"; allowed: id, arrival_s, duration_s, gpus, gpu_fraction, gpu_memory_mib, priority, gpu_util, team`},
		{"empty column name", "arrival_s,duration_s,gpus,\n",
			`line 1: unknown column ""; allowed: id, arrival_s, duration_s, gpus, gpu_fraction, gpu_memory_mib, priority, gpu_util, team`},
		{"column twice", "# c\narrival_s,duration_s,gpus,arrival_s\n", "line 2: column arrival_s appears twice; allowed: each column once"},
		{"required columns missing", "id,gpus\n", "line 1: no column arrival_s, duration_s; required: arrival_s, duration_s, gpus"},
		{"too few fields", min + "a,0,1,1\n", "line 2: 4 fields; allowed: 5, one per header column"},
		{"csv syntax", min + "a,0,1,1,\"x\"y\n", `line 2, character 11: extraneous or missing " in quoted-field`},

		{"arrival empty", min + "a,,1,1,\n", "line 2: arrival_s: empty; allowed: seconds in [0, 9e9]"},
		{"arrival negative", min + "a,-1,1,1,\n", "line 2: arrival_s: -1; allowed: seconds in [0, 9e9]"},
		{"arrival not a number", min + "a,1 s,1,1,\n", `line 2: arrival_s: "1 s"; allowed: seconds in [0, 9e9]`},
		{"arrival too late", min + "a,9000000001,1,1,\n", "line 2: arrival_s: 9000000001; allowed: seconds in [0, 9e9]"},
		{"arrival infinite", min + "a,Inf,1,1,\n", "line 2: arrival_s: Inf; allowed: seconds in [0, 9e9]"},
		{"duration empty", min + "a,0,,1,\n", "line 2: duration_s: empty; allowed: seconds in (0, 9e9]"},
		{"duration zero", min + "a,0,0,1,\n", "line 2: duration_s: 0; allowed: seconds in (0, 9e9]"},
		{"duration NaN", min + "a,0,NaN,1,\n", "line 2: duration_s: NaN; allowed: seconds in (0, 9e9]"},
		{"gpus empty", min + "a,0,1,,\n", "line 2: gpus: empty; allowed: an integer ≥ 1"},
		{"gpus zero", min + "a,0,1,0,\n", "line 2: gpus: 0; allowed: an integer ≥ 1"},
		{"gpus not an integer", min + "a,0,1,1.5,\n", "line 2: gpus: 1.5; allowed: an integer ≥ 1"},
		{"fraction above 1", min + "a,0,1,1,1.5\n", "line 2: gpu_fraction: 1.5; allowed: a number in (0, 1]"},
		{"fraction zero", min + "a,0,1,1,0\n", "line 2: gpu_fraction: 0; allowed: a number in (0, 1]"},
		{"fraction with gpus 2", min + "a,0,1,2,0.5\n", "line 2: gpu_fraction: 0.5 with gpus 2; allowed: a number in (0, 1], below 1 only with gpus = 1"},
		{"memory negative", "arrival_s,duration_s,gpus,gpu_memory_mib\n0,1,1,-1\n", "line 2: gpu_memory_mib: -1; allowed: an integer ≥ 0"},
		{"memory with unit", "arrival_s,duration_s,gpus,gpu_memory_mib\n0,1,1,8GiB\n", `line 2: gpu_memory_mib: "8GiB"; allowed: an integer ≥ 0`},
		{"priority zero", "arrival_s,duration_s,gpus,priority\n0,1,1,0\n", "line 2: priority: 0; allowed: an integer from 1 to 100"},
		{"priority above 100", "arrival_s,duration_s,gpus,priority\n0,1,1,101\n", "line 2: priority: 101; allowed: an integer from 1 to 100"},
		{"util zero", "arrival_s,duration_s,gpus,gpu_util\n0,1,1,0\n", "line 2: gpu_util: 0; allowed: a percentage in (0, 100]"},
		{"util above 100", "arrival_s,duration_s,gpus,gpu_util\n0,1,1,100.5\n", "line 2: gpu_util: 100.5; allowed: a percentage in (0, 100]"},
		{"util as a share", "arrival_s,duration_s,gpus,gpu_util\n0,1,1,80%\n", `line 2: gpu_util: "80%"; allowed: a percentage in (0, 100]`},

		{"duplicate id", min + "a,0,1,1,\nb,0,1,1,\na,5,1,1,\n", `line 4: id: "a" is also the id on line 2; allowed: any name, unique in the trace`},
		{"id clashing with a default", min + "job-2,0,1,1,\n,0,1,1,\n", `line 3: id: "job-2" is also the id on line 2; allowed: any name, unique in the trace`},
		{"line numbers count comments", min + "# one\n# two\na,0,1,1,\nb,x,1,1,\n", `line 5: arrival_s: "x"; allowed: seconds in [0, 9e9]`},
		{"line of a field after a multi-line one", min + "\"a\nb\",0,1,1,2\n", "line 3: gpu_fraction: 2; allowed: a number in (0, 1]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadCSV(strings.NewReader(tc.in))
			if err == nil || err.Error() != tc.want {
				t.Errorf("error\n got %v\nwant %s", err, tc.want)
			}
		})
	}
}

func TestCSVRoundTrip(t *testing.T) {
	const day = 24 * time.Hour
	in := Trace{Jobs: []Job{
		{ID: "a", Arrival: 0, Duration: time.Hour, GPUs: 8, Fraction: 1, MemoryMiB: 81920, Priority: 80, Util: 92.5, Team: "vision"},
		{ID: "b", Arrival: 1500 * time.Millisecond, Duration: 1 * time.Millisecond, GPUs: 1, Fraction: 0.25, Priority: 30, Util: 30},
		{ID: "c, \"quoted\"", Arrival: 1500 * time.Millisecond, Duration: 2 * time.Second, GPUs: 1, Fraction: 0.5},
		{ID: "d", Arrival: 100*day + time.Millisecond, Duration: 53*day + 999*time.Millisecond, GPUs: 128, Fraction: 1, Util: 100},
		{ID: "e#", Arrival: 9e9 * time.Second, Duration: 9e9 * time.Second, GPUs: 1, Fraction: 1 / 3.0, Priority: 1},
	}}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadCSV(&buf)
	if err != nil {
		t.Fatalf("%v in\n%s", err, buf.String())
	}
	if !reflect.DeepEqual(out.Jobs, in.Jobs) {
		t.Errorf("round trip\n got %+v\nwant %+v", out.Jobs, in.Jobs)
	}
}

func TestWriteCSV(t *testing.T) {
	in := Trace{Jobs: []Job{
		// Written at the millisecond; a Fraction left 0 is whole GPUs.
		{ID: "x", Arrival: 1234567 * time.Microsecond, Duration: 2500 * time.Microsecond, GPUs: 2},
		{ID: "y", Arrival: 2 * time.Second, Duration: 10 * time.Second, GPUs: 1, Fraction: 0.5, MemoryMiB: 1024, Priority: 50, Util: 66.6},
	}}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, in); err != nil {
		t.Fatal(err)
	}
	want := csvHeader +
		"x,1.235,0.003,2,1,0,,,\n" +
		"y,2,10,1,0.5,1024,50,66.6,\n"
	if buf.String() != want {
		t.Errorf("written\n%s\nwant\n%s", buf.String(), want)
	}
	back, err := ReadCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Jobs[0]; got.Arrival != 1235*time.Millisecond || got.Duration != 3*time.Millisecond || got.Fraction != 1 {
		t.Errorf("read back %+v; want arrival 1.235s, duration 3ms, fraction 1", got)
	}
}

func TestWriteCSVErrors(t *testing.T) {
	ok := Job{ID: "ok", Duration: time.Second, GPUs: 1, Fraction: 1}
	with := func(f func(*Job)) Job { j := ok; f(&j); return j }
	tests := []struct {
		name string
		jobs []Job
		want string
	}{
		{"empty id", []Job{with(func(j *Job) { j.ID = ""; j.Arrival = time.Minute })}, "job at 1m0s: id: empty; allowed: a name, unique in the trace"},
		{"id read as a comment", []Job{with(func(j *Job) { j.ID = "#1" })}, `job "#1": id: has a leading '#', surrounding spaces or control characters; allowed: a name without those`},
		{"id with spaces", []Job{with(func(j *Job) { j.ID = " a" })}, `job " a": id: has a leading '#', surrounding spaces or control characters; allowed: a name without those`},
		{"id twice", []Job{ok, ok}, `job "ok": id: appears twice; allowed: a name, unique in the trace`},
		{"negative arrival", []Job{with(func(j *Job) { j.Arrival = -time.Second })}, `job "ok": arrival_s: -1 as written; allowed: seconds in [0, 9e9]`},
		{"duration under half a millisecond", []Job{with(func(j *Job) { j.Duration = 400 * time.Microsecond })}, `job "ok": duration_s: 0 as written; allowed: seconds in (0, 9e9]`},
		{"no gpus", []Job{with(func(j *Job) { j.GPUs = 0 })}, `job "ok": gpus: 0 as written; allowed: an integer ≥ 1`},
		{"fraction above 1", []Job{with(func(j *Job) { j.Fraction = 2 })}, `job "ok": gpu_fraction: 2 as written; allowed: a number in (0, 1]`},
		{"fraction of 2 gpus", []Job{with(func(j *Job) { j.GPUs, j.Fraction = 2, 0.5 })}, `job "ok": gpu_fraction: 0.5 with gpus 2; allowed: a number in (0, 1], below 1 only with gpus = 1`},
		{"negative memory", []Job{with(func(j *Job) { j.MemoryMiB = -1 })}, `job "ok": gpu_memory_mib: -1 as written; allowed: an integer ≥ 0`},
		{"priority above 100", []Job{with(func(j *Job) { j.Priority = 101 })}, `job "ok": priority: 101 as written; allowed: an integer from 1 to 100`},
		{"negative util", []Job{with(func(j *Job) { j.Util = -5 })}, `job "ok": gpu_util: -5 as written; allowed: a percentage in (0, 100]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := WriteCSV(&bytes.Buffer{}, Trace{Jobs: tc.jobs})
			if err == nil || err.Error() != tc.want {
				t.Errorf("error\n got %v\nwant %s", err, tc.want)
			}
		})
	}
}
