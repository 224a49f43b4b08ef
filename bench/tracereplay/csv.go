package tracereplay

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// csvColumn is one column of the replay CSV: what it accepts and how a
// Job's field is written to it.
type csvColumn struct {
	name     string
	required bool
	allowed  string
	// parse sets the field from a non-empty value; false when the value
	// is not allowed.
	parse func(j *Job, v string) bool
	// format is the value written; "" leaves an optional field empty.
	format func(j Job) string
}

var csvColumns = []csvColumn{
	{
		name: "id", allowed: "any name, unique in the trace",
		parse:  func(j *Job, v string) bool { j.ID = v; return true },
		format: func(j Job) string { return j.ID },
	},
	{
		name: "arrival_s", required: true, allowed: "seconds in [0, 9e9]",
		parse: func(j *Job, v string) bool {
			d, ok := parseSeconds(v)
			j.Arrival = d
			return ok
		},
		format: func(j Job) string { return formatSeconds(j.Arrival) },
	},
	{
		name: "duration_s", required: true, allowed: "seconds in (0, 9e9]",
		parse: func(j *Job, v string) bool {
			d, ok := parseSeconds(v)
			j.Duration = d
			return ok && d > 0
		},
		format: func(j Job) string { return formatSeconds(j.Duration) },
	},
	{
		name: "gpus", required: true, allowed: "an integer ≥ 1",
		parse: func(j *Job, v string) bool {
			n, err := strconv.Atoi(v)
			j.GPUs = n
			return err == nil && n >= 1
		},
		format: func(j Job) string { return strconv.Itoa(j.GPUs) },
	},
	{
		name: "gpu_fraction", allowed: "a number in (0, 1]",
		parse: func(j *Job, v string) bool {
			x, err := strconv.ParseFloat(v, 64)
			j.Fraction = x
			return err == nil && x > 0 && x <= 1
		},
		format: func(j Job) string {
			// Fractional() reads 0 as whole GPUs, so a Job built in code
			// without a Fraction is written as the whole GPUs it means.
			if j.Fraction == 0 {
				return "1"
			}
			return strconv.FormatFloat(j.Fraction, 'g', -1, 64)
		},
	},
	{
		name: "gpu_memory_mib", allowed: "an integer ≥ 0",
		parse: func(j *Job, v string) bool {
			n, err := strconv.Atoi(v)
			j.MemoryMiB = n
			return err == nil && n >= 0
		},
		format: func(j Job) string { return strconv.Itoa(j.MemoryMiB) },
	},
	{
		name: "priority", allowed: "an integer from 1 to 100",
		parse: func(j *Job, v string) bool {
			n, err := strconv.Atoi(v)
			j.Priority = n
			return err == nil && n >= 1 && n <= 100
		},
		format: func(j Job) string {
			if j.Priority == 0 {
				return ""
			}
			return strconv.Itoa(j.Priority)
		},
	},
	{
		name: "gpu_util", allowed: "a percentage in (0, 100]",
		parse: func(j *Job, v string) bool {
			x, err := strconv.ParseFloat(v, 64)
			j.Util = x
			return err == nil && x > 0 && x <= 100
		},
		format: func(j Job) string {
			if j.Util == 0 {
				return ""
			}
			return strconv.FormatFloat(j.Util, 'g', -1, 64)
		},
	},
	{
		name: "team", allowed: "a team's name",
		parse:  func(j *Job, v string) bool { j.Team = v; return true },
		format: func(j Job) string { return j.Team },
	},
}

// fractionRule is what a fraction below 1 needs, for both directions.
const fractionRule = "a number in (0, 1], below 1 only with gpus = 1"

func csvColumnNames(required bool) string {
	var names []string
	for _, c := range csvColumns {
		if c.required || !required {
			names = append(names, c.name)
		}
	}
	return strings.Join(names, ", ")
}

// ReadCSV reads a trace in the replay CSV format: CSV (RFC 4180, as
// encoding/csv reads it), one job per record.
//
//   - The first line that is not a comment is the header. It names the
//     columns, each once, in any order. Lines starting with '#' are
//     comments.
//   - Every record has one field per header column. Spaces around a field
//     are ignored; an empty field of an optional column takes the
//     column's default, as does a missing optional column.
//   - A column not listed below is an error: the message names it and
//     lists the allowed ones.
//
// The columns:
//
//	column          required  allowed                        empty or missing
//	id              no        any name, unique in the trace  job-<row>, row the 1-based data row
//	arrival_s       yes       seconds in [0, 9e9]            -
//	duration_s      yes       seconds in (0, 9e9]            -
//	gpus            yes       an integer ≥ 1                 -
//	gpu_fraction    no        a number in (0, 1]             1 (whole GPUs)
//	gpu_memory_mib  no        an integer ≥ 0                 0 (not given)
//	priority        no        an integer from 1 to 100       Nomad's default, 50
//	gpu_util        no        a percentage in (0, 100]       80
//	team            no        a team's name                  none
//
// arrival_s counts from the trace's zero, not from its first job: a trace
// whose first job arrives at 600 starts with 600 s of idle cluster.
// duration_s is the job's run time once placed. gpus is the whole GPUs
// the job asks for; a gpu_fraction below 1 asks for that share of one
// GPU instead and needs gpus = 1. gpu_memory_mib is the GPU memory needed
// per GPU, priority the Nomad job priority, gpu_util the utilisation the
// job's load runs its GPUs at, team the team that submitted it (the
// report's figures by team).
//
// Records may come in any order: a trace is replayed sorted by arrival,
// then id. Times are read to the nanosecond and written to the
// millisecond.
//
// An example:
//
//	# two jobs, the second a quarter GPU at high priority
//	id,arrival_s,duration_s,gpus,gpu_fraction,priority
//	train-a,0,3600,4,,
//	notebook-b,12.5,600,1,0.25,80
//
// An error names the line and the column and says what is allowed, such
// as "line 7: gpu_fraction: 1.5; allowed: a number in (0, 1]". Duplicate
// ids are an error.
func ReadCSV(r io.Reader) (Trace, error) {
	cr := csv.NewReader(withoutBOM(r))
	cr.Comment = '#'
	// Checked here, to say what the header asked for.
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err == io.EOF {
		return Trace{}, fmt.Errorf("no header; required: a first line naming the columns, at least %s", csvColumnNames(true))
	}
	if err != nil {
		return Trace{}, csvError(err)
	}
	headerLine, _ := cr.FieldPos(0)

	at := make([]int, len(csvColumns)) // header index of each column, -1 if absent
	for i := range at {
		at[i] = -1
	}
	var unknown []string
	for i, name := range header {
		name = strings.TrimSpace(name)
		c := slices.IndexFunc(csvColumns, func(c csvColumn) bool { return c.name == name })
		switch {
		case c < 0:
			unknown = append(unknown, strconv.Quote(name))
		case at[c] >= 0:
			return Trace{}, fmt.Errorf("line %d: column %s appears twice; allowed: each column once", headerLine, name)
		default:
			at[c] = i
		}
	}
	if len(unknown) > 0 {
		return Trace{}, fmt.Errorf("line %d: unknown column %s; allowed: %s", headerLine, strings.Join(unknown, ", "), csvColumnNames(false))
	}
	var missing []string
	for c, col := range csvColumns {
		if col.required && at[c] < 0 {
			missing = append(missing, col.name)
		}
	}
	if len(missing) > 0 {
		return Trace{}, fmt.Errorf("line %d: no column %s; required: %s", headerLine, strings.Join(missing, ", "), csvColumnNames(true))
	}

	var jobs []Job
	firstLine := map[string]int{}
	for row := 1; ; row++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Trace{}, csvError(err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(header) {
			return Trace{}, fmt.Errorf("line %d: %d fields; allowed: %d, one per header column", line, len(rec), len(header))
		}
		j := Job{ID: "job-" + strconv.Itoa(row), Fraction: 1}
		for c, col := range csvColumns {
			if at[c] < 0 {
				continue
			}
			v := strings.TrimSpace(rec[at[c]])
			fieldLine, _ := cr.FieldPos(at[c])
			switch {
			case v == "" && col.required:
				return Trace{}, fmt.Errorf("line %d: %s: empty; allowed: %s", fieldLine, col.name, col.allowed)
			case v == "":
			case !col.parse(&j, v):
				return Trace{}, fmt.Errorf("line %d: %s: %s; allowed: %s", fieldLine, col.name, showValue(v), col.allowed)
			}
		}
		if j.Fraction < 1 && j.GPUs != 1 {
			c := slices.IndexFunc(csvColumns, func(c csvColumn) bool { return c.name == "gpu_fraction" })
			fieldLine, _ := cr.FieldPos(at[c])
			return Trace{}, fmt.Errorf("line %d: gpu_fraction: %s with gpus %d; allowed: %s", fieldLine, strings.TrimSpace(rec[at[c]]), j.GPUs, fractionRule)
		}
		if first, dup := firstLine[j.ID]; dup {
			return Trace{}, fmt.Errorf("line %d: id: %q is also the id on line %d; allowed: %s", line, j.ID, first, csvColumns[0].allowed)
		}
		firstLine[j.ID] = line
		jobs = append(jobs, j)
	}
	sortJobs(jobs)
	return Trace{Jobs: jobs}, nil
}

// WriteCSV writes t in the replay CSV format, every column, in t's order,
// so that ReadCSV reads back the same jobs with their times rounded to the
// millisecond. A job ReadCSV would not read back as it is (an empty id, a
// duration under half a millisecond, a field out of range) is an error
// naming the job and the column, and nothing after it is written.
func WriteCSV(w io.Writer, t Trace) error {
	cw := csv.NewWriter(w)
	names := make([]string, len(csvColumns))
	for i, c := range csvColumns {
		names[i] = c.name
	}
	if err := cw.Write(names); err != nil {
		return err
	}
	seen := map[string]bool{}
	rec := make([]string, len(csvColumns))
	for _, j := range t.Jobs {
		switch {
		case j.ID == "":
			return fmt.Errorf("job at %s: id: empty; allowed: a name, unique in the trace", j.Arrival)
		case strings.TrimSpace(j.ID) != j.ID || strings.HasPrefix(j.ID, "#") || strings.ContainsFunc(j.ID, unicode.IsControl):
			// The reader trims fields, reads a line starting with '#' as a
			// comment and turns a quoted \r\n into \n.
			return fmt.Errorf("job %q: id: has a leading '#', surrounding spaces or control characters; allowed: a name without those", j.ID)
		case seen[j.ID]:
			return fmt.Errorf("job %q: id: appears twice; allowed: a name, unique in the trace", j.ID)
		}
		seen[j.ID] = true
		// Checking each value with the reader's own parser guarantees the
		// file reads back.
		var back Job
		for i, c := range csvColumns {
			rec[i] = c.format(j)
			if rec[i] == "" && !c.required {
				continue
			}
			if !c.parse(&back, rec[i]) {
				return fmt.Errorf("job %q: %s: %s as written; allowed: %s", j.ID, c.name, showValue(rec[i]), c.allowed)
			}
		}
		if j.Fractional() && j.GPUs != 1 {
			return fmt.Errorf("job %q: gpu_fraction: %v with gpus %d; allowed: %s", j.ID, j.Fraction, j.GPUs, fractionRule)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// sortJobs puts jobs in trace order: by arrival, then ID, so that any
// source gives one order for the same jobs.
func sortJobs(jobs []Job) {
	slices.SortStableFunc(jobs, compareJobs)
}

func compareJobs(a, b Job) int {
	if a.Arrival != b.Arrival {
		if a.Arrival < b.Arrival {
			return -1
		}
		return 1
	}
	return strings.Compare(a.ID, b.ID)
}

// maxSeconds bounds times, well inside time.Duration's 292 years.
const maxSeconds = 9e9

// parseSeconds reads a number of seconds in [0, maxSeconds]. Plain
// decimals are converted exactly, so that a written trace reads back to
// the nanosecond even where float64 seconds would round.
func parseSeconds(v string) (time.Duration, bool) {
	if d, ok := decimalSeconds(v); ok {
		return d, d <= maxSeconds*time.Second
	}
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || !(x >= 0 && x <= maxSeconds) {
		return 0, false
	}
	return time.Duration(math.Round(x * float64(time.Second))), true
}

// decimalSeconds converts "123" or "123.456" with at most 9 fractional
// digits; false for anything else (signs, exponents, longer fractions),
// which parseSeconds leaves to strconv.
func decimalSeconds(v string) (time.Duration, bool) {
	whole, frac, _ := strings.Cut(v, ".")
	if whole == "" && frac == "" || len(whole) > 10 || len(frac) > 9 || !digits(whole) || !digits(frac) {
		return 0, false
	}
	var s, ns int64
	for _, c := range whole {
		s = 10*s + int64(c-'0')
	}
	if s > maxSeconds {
		return 0, false
	}
	for i := range 9 {
		ns *= 10
		if i < len(frac) {
			ns += int64(frac[i] - '0')
		}
	}
	return time.Duration(s)*time.Second + time.Duration(ns), true
}

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// formatSeconds writes d in seconds to the millisecond, without trailing
// zeros ("12.5", "3600").
func formatSeconds(d time.Duration) string {
	ms := int64(d.Round(time.Millisecond) / time.Millisecond)
	sign := ""
	if ms < 0 {
		sign, ms = "-", -ms
	}
	s := sign + strconv.FormatInt(ms/1000, 10)
	if f := ms % 1000; f != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%03d", f), "0")
	}
	return s
}

// showValue is a field's value in an error: as written when it is a
// number, quoted when it is not, so that stray spaces or letters show.
func showValue(v string) string {
	if v == "" {
		return "empty"
	}
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return v
	}
	return strconv.Quote(v)
}

// csvError puts encoding/csv's syntax errors in this file's form.
func csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("line %d, character %d: %v", pe.Line, pe.Column, pe.Err)
	}
	return err
}

// withoutBOM skips a leading UTF-8 byte-order mark, which spreadsheets
// write and which would hide a first line's '#' or first column's name.
func withoutBOM(r io.Reader) io.Reader {
	br := bufio.NewReader(r)
	if b, err := br.Peek(3); err == nil && string(b) == "\ufeff" {
		br.Discard(3)
	}
	return br
}
