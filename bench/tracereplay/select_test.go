package tracereplay

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// arrivals makes one-GPU jobs j1, j2, ... arriving at the given seconds.
func arrivals(secs ...int) []Job {
	jobs := make([]Job, len(secs))
	for i, s := range secs {
		jobs[i] = Job{ID: fmt.Sprintf("j%d", i+1), Arrival: time.Duration(s) * time.Second, Duration: time.Minute, GPUs: 1, Fraction: 1}
	}
	return jobs
}

func ids(jobs []Job) string {
	var s []string
	for _, j := range jobs {
		s = append(s, j.ID)
	}
	return strings.Join(s, ",")
}

func TestBusiest(t *testing.T) {
	tests := []struct {
		name   string
		jobs   []Job
		window time.Duration
		want   time.Duration
	}{
		{"no jobs", nil, time.Hour, 0},
		{"one job", arrivals(42), 10 * time.Second, 42 * time.Second},
		{"a later burst", arrivals(0, 5, 100, 101, 102, 103, 200), 10 * time.Second, 100 * time.Second},
		// [100, 110) holds 3, as [0, 10) does; a closed end would hold 4.
		{"the end is open", arrivals(0, 1, 2, 100, 105, 108, 110), 10 * time.Second, 0},
		{"ties go to the earliest", arrivals(0, 3, 50, 53, 90, 93), 5 * time.Second, 0},
		{"a tie after a better window", arrivals(0, 10, 11, 12, 40, 41, 42), 5 * time.Second, 10 * time.Second},
		{"same instant", arrivals(7, 7, 7, 8, 20, 20), time.Second, 7 * time.Second},
		{"a window holding all", arrivals(3, 50, 60), time.Hour, 3 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Busiest(tc.jobs, tc.window); got != tc.want {
				t.Errorf("Busiest = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBusiestBruteForce checks the linear scan against counting every
// window that starts at an arrival.
func TestBusiestBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		secs := make([]int, r.IntN(40))
		for i := range secs {
			secs[i] = r.IntN(300)
		}
		slices.Sort(secs)
		jobs := arrivals(secs...)
		window := time.Duration(1+r.IntN(60)) * time.Second
		best, want := -1, time.Duration(0)
		for _, j := range jobs {
			if n := len(Window(jobs, j.Arrival, window)); n > best {
				best, want = n, j.Arrival
			}
		}
		if got := Busiest(jobs, window); got != want {
			t.Fatalf("trial %d: Busiest(%v, %v) = %v, want %v", trial, secs, window, got, want)
		}
	}
}

func TestWindow(t *testing.T) {
	jobs := arrivals(0, 10, 20, 30, 40)
	got := Window(jobs, 10*time.Second, 20*time.Second)
	if ids(got) != "j2,j3" || got[0].Arrival != 0 || got[1].Arrival != 10*time.Second {
		t.Errorf("Window = %+v; want j2 at 0s and j3 at 10s", got)
	}
	if jobs[1].Arrival != 10*time.Second {
		t.Errorf("Window changed its input: %+v", jobs[1])
	}
	if got := Window(jobs, 41*time.Second, time.Hour); len(got) != 0 {
		t.Errorf("Window past the last arrival = %+v, want none", got)
	}
}

func TestSampleJobs(t *testing.T) {
	secs := make([]int, 1000)
	for i := range secs {
		secs[i] = i
	}
	jobs := arrivals(secs...)

	a := SampleJobs(jobs, 100, 1)
	if len(a) != 100 || !slices.IsSortedFunc(a, compareJobs) {
		t.Fatalf("sample of %d jobs, sorted %v; want 100, sorted", len(a), slices.IsSortedFunc(a, compareJobs))
	}
	if again := SampleJobs(jobs, 100, 1); !reflect.DeepEqual(a, again) {
		t.Errorf("seed 1 gives two samples")
	}
	shuffled := slices.Clone(jobs)
	rand.New(rand.NewPCG(7, 7)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	fromShuffled := SampleJobs(shuffled, 100, 1)
	sortJobs(fromShuffled)
	if ids(fromShuffled) != ids(a) {
		t.Errorf("the sample depends on the jobs' order")
	}
	b := SampleJobs(jobs, 100, 2)
	if common := len(byIDIntersect(a, b)); common > 30 {
		t.Errorf("seeds 1 and 2 share %d of 100 jobs; want about 10", common)
	}
	for _, n := range []int{0, -1, 1000, 5000} {
		if got := SampleJobs(jobs, n, 1); !reflect.DeepEqual(got, jobs) {
			t.Errorf("SampleJobs(n=%d) is not all jobs", n)
		}
	}

	// Each job is drawn with probability 0.1: over 2000 seeds about 200
	// times, with a standard deviation of 13.
	small := jobs[:100]
	drawn := map[string]int{}
	for seed := range int64(2000) {
		for _, j := range SampleJobs(small, 10, seed) {
			drawn[j.ID]++
		}
	}
	for _, j := range small {
		if n := drawn[j.ID]; n < 140 || n > 260 {
			t.Errorf("%s drawn %d times in 2000 samples, want 200 ± 60", j.ID, n)
		}
	}
}

func byIDIntersect(a, b []Job) []string {
	in := byID(a)
	var both []string
	for _, j := range b {
		if _, ok := in[j.ID]; ok {
			both = append(both, j.ID)
		}
	}
	return both
}

func TestSelect(t *testing.T) {
	epoch := time.Date(2017, 10, 4, 21, 0, 0, 0, time.UTC)
	// A burst of 5 in [3600, 3900) stands out of one job every 1000 s.
	jobs := arrivals(0, 1000, 2000, 3000, 3600, 3700, 3800, 3850, 3899, 4000, 5000, 6000)
	tests := []struct {
		name       string
		epoch      time.Time
		s          Selection
		wantSource string
		wantIDs    string
		wantFirst  time.Duration
	}{
		{"whole trace", epoch, Selection{},
			"philly.csv: whole trace from 2017-10-04 21:00:00 UTC (12 jobs)", "j1,j2,j3,j4,j5,j6,j7,j8,j9,j10,j11,j12", 0},
		{"whole trace of a CSV", time.Time{}, Selection{Busiest: true},
			"philly.csv: whole trace (12 jobs)", "j1,j2,j3,j4,j5,j6,j7,j8,j9,j10,j11,j12", 0},
		{"busiest", epoch, Selection{Window: 5 * time.Minute, Busiest: true},
			"philly.csv: busiest 5m0s window from 2017-10-04 22:00:00 UTC (5 jobs)", "j5,j6,j7,j8,j9", 0},
		{"busiest, sampled", epoch, Selection{Window: 5 * time.Minute, Busiest: true, Sample: 3, Seed: 1},
			"philly.csv: busiest 5m0s window from 2017-10-04 22:00:00 UTC (5 jobs), 3 sampled with seed 1", "", -1},
		{"busiest of a CSV", time.Time{}, Selection{Window: 5 * time.Minute, Busiest: true},
			"philly.csv: busiest 5m0s window from 1h0m0s after the trace's zero (5 jobs)", "j5,j6,j7,j8,j9", 0},
		{"start as a time", epoch, Selection{Window: time.Hour, Start: "2017-10-04 21:16:40"},
			"philly.csv: 1h0m0s window from 2017-10-04 21:16:40 UTC (9 jobs)", "j2,j3,j4,j5,j6,j7,j8,j9,j10", 0},
		{"start as a duration", time.Time{}, Selection{Window: time.Hour, Start: "1000s"},
			"philly.csv: 1h0m0s window from 16m40s after the trace's zero (9 jobs)", "j2,j3,j4,j5,j6,j7,j8,j9,j10", 0},
		{"no start", epoch, Selection{Window: 2500 * time.Second},
			"philly.csv: 41m40s window from 2017-10-04 21:00:00 UTC (3 jobs)", "j1,j2,j3", 0},
		{"a sample bigger than the window", epoch, Selection{Window: 2500 * time.Second, Sample: 10, Seed: 1},
			"philly.csv: 41m40s window from 2017-10-04 21:00:00 UTC (3 jobs), all kept: sample 10 ≥ 3 jobs", "j1,j2,j3", 0},
		{"an empty window", epoch, Selection{Window: time.Minute, Start: "2017-10-05 00:00:00"},
			"philly.csv: 1m0s window from 2017-10-05 00:00:00 UTC (0 jobs)", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Select(jobs, tc.epoch, tc.s, "philly.csv")
			if err != nil {
				t.Fatal(err)
			}
			if got.Source != tc.wantSource {
				t.Errorf("source\n got %s\nwant %s", got.Source, tc.wantSource)
			}
			if tc.wantFirst >= 0 && ids(got.Jobs) != tc.wantIDs {
				t.Errorf("jobs %s, want %s", ids(got.Jobs), tc.wantIDs)
			}
			if tc.wantFirst >= 0 && len(got.Jobs) > 0 && got.Jobs[0].Arrival != tc.wantFirst {
				t.Errorf("first arrival %v, want %v", got.Jobs[0].Arrival, tc.wantFirst)
			}
		})
	}
	if jobs[4].Arrival != 3600*time.Second {
		t.Errorf("Select changed its input")
	}

	sampled, _ := Select(jobs, epoch, Selection{Window: 5 * time.Minute, Busiest: true, Sample: 3, Seed: 1}, "x")
	want := SampleJobs(Window(jobs, time.Hour, 5*time.Minute), 3, 1)
	if !reflect.DeepEqual(sampled.Jobs, want) {
		t.Errorf("sampled %s, want the window's sample %s", ids(sampled.Jobs), ids(want))
	}

	unsorted := slices.Clone(jobs)
	slices.Reverse(unsorted)
	got, _ := Select(unsorted, epoch, Selection{Window: 5 * time.Minute, Busiest: true}, "x")
	if ids(got.Jobs) != "j5,j6,j7,j8,j9" {
		t.Errorf("unsorted input: %s, want j5,j6,j7,j8,j9", ids(got.Jobs))
	}
}

func TestSelectErrors(t *testing.T) {
	epoch := time.Date(2017, 10, 4, 21, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		epoch time.Time
		s     Selection
		want  string
	}{
		{"negative window", epoch, Selection{Window: -time.Hour}, "window: -1h0m0s; allowed: 0 (the whole trace) or more"},
		{"negative sample", epoch, Selection{Sample: -1}, "sample: -1; allowed: 0 (all jobs) or more"},
		{"start and busiest", epoch, Selection{Window: time.Hour, Start: "1h", Busiest: true}, `start, busiest: "1h" and busiest both given; allowed: one of them`},
		{"start without a window", epoch, Selection{Start: "1h"}, `start: "1h" with window 0 (the whole trace); allowed: a start only with a window`},
		{"start not a time", epoch, Selection{Window: time.Hour, Start: "2017-10-04T21:00:00Z"},
			`start: "2017-10-04T21:00:00Z"; allowed: a time "2006-01-02 15:04:05" (UTC) or a duration from the trace's zero such as 90m`},
		{"a time without an epoch", time.Time{}, Selection{Window: time.Hour, Start: "2017-10-04 21:00:00"},
			`start: "2017-10-04 21:00:00" is a time, but this trace has no epoch (a replay CSV counts from its zero); allowed: a duration from the trace's zero such as 90m`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Select(arrivals(0, 1), tc.epoch, tc.s, "x")
			if err == nil || err.Error() != tc.want {
				t.Errorf("error\n got %v\nwant %s", err, tc.want)
			}
		})
	}
}
