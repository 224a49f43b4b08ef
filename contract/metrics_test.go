package contract

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	metricName = regexp.MustCompile(`^nomad_gpu_[a-z0-9_]+$`)
	labelName  = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	// Base units as the Prometheus naming guide has them (a ratio of like
	// figures is _ratio); _percent is the one non-base unit, kept because
	// NVML and DCGM report percentages.
	unitSuffix = regexp.MustCompile(`_(bytes|seconds|celsius|watts|hertz|percent|ratio|timestamp_seconds)$`)
)

// The names follow Prometheus conventions: one prefix, a unit in the
// name, _total for counters and only for them, a histogram in seconds,
// and the labels that identify a device, a task or a check on every
// series of it (and the node plugins' the host).
func TestMetricNamingConventions(t *testing.T) {
	seen := map[string]bool{}
	check := func(ms []Metric, identity []string, onNode bool) {
		for _, m := range ms {
			if !metricName.MatchString(m.Name) || seen[m.Name] {
				t.Errorf("%s: not a nomad_gpu_ name, or listed twice", m.Name)
			}
			seen[m.Name] = true
			switch {
			case m.Type == Counter && !strings.HasSuffix(m.Name, "_total"):
				t.Errorf("%s: a counter's name ends in _total", m.Name)
			case m.Type != Counter && strings.HasSuffix(m.Name, "_total"):
				t.Errorf("%s: only counters end in _total", m.Name)
			case m.Type == Histogram && !strings.HasSuffix(m.Name, "_seconds"):
				t.Errorf("%s: histograms here are durations in seconds", m.Name)
			case m.Type == Gauge && !strings.HasSuffix(m.Name, "_info") && !unitSuffix.MatchString(m.Name) &&
				!slices.Contains([]string{MetricDeviceHealthy, MetricDeviceAllocated, MetricDeviceAllocationsKnown, MetricControllerLeader,
					MetricControllerGangs, MetricControllerGangMembers, MetricControllerQueueGPUs, MetricControllerQueueWaiting, MetricControllerQueueHeld}, m.Name):
				t.Errorf("%s: a gauge names its unit (or is an _info or 0/1 state metric, or a count of things named by them)", m.Name)
			}
			if m.Help == "" || !strings.HasSuffix(m.Help, ".") {
				t.Errorf("%s: help %q", m.Name, m.Help)
			}
			labels := map[string]bool{}
			for _, l := range m.Labels {
				if !labelName.MatchString(l) || labels[l] || strings.HasPrefix(l, "__") {
					t.Errorf("%s: label %q", m.Name, l)
				}
				labels[l] = true
			}
			if onNode && !labels[LabelHost] {
				t.Errorf("%s: every series has the host label", m.Name)
			}
			if len(m.Labels) > 1 && m.Name != MetricXIDErrors && m.Name != MetricDeviceAllocationInfo {
				for _, l := range identity {
					if !labels[l] {
						t.Errorf("%s: lacks identifying label %q", m.Name, l)
					}
				}
			}
		}
	}
	check(DeviceMetrics(), DeviceLabels, true)
	check(DriverMetrics(), TaskLabels, true)
	check(StrategyMetrics(), CheckLabels, false)
	check(ControllerMetrics(), nil, false)
}

// Task labels are Nomad's own allocation metric labels, so the series join.
func TestTaskLabelsAreNomads(t *testing.T) {
	want := []string{"host", "namespace", "job", "task_group", "alloc_id", "task"}
	if !slices.Equal(TaskLabels, want) {
		t.Errorf("TaskLabels %v, want %v", TaskLabels, want)
	}
}

func TestSeriesNames(t *testing.T) {
	got := SeriesNames([]Metric{{Name: "a_total", Type: Counter}, {Name: "b_seconds", Type: Histogram}})
	want := []string{"a_total", "b_seconds_bucket", "b_seconds_sum", "b_seconds_count"}
	if !slices.Equal(got, want) {
		t.Errorf("%v", got)
	}
}

// Every metric is documented for users in docs/metrics.md's metrics tables.
func TestMetricsDocumented(t *testing.T) {
	b, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Skip("docs/metrics.md not found:", err)
	}
	for _, m := range slices.Concat(DeviceMetrics(), DriverMetrics(), StrategyMetrics(), ControllerMetrics()) {
		if !strings.Contains(string(b), "`"+m.Name+"`") {
			t.Errorf("docs/metrics.md does not document %s", m.Name)
		}
	}
}
