package topview

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// arranged is a view's order in one line: per node its GPUs by index and
// its tasks by job, then the queue by job.
func arranged(v *View, key SortKey) string {
	var parts []string
	for _, n := range v.Nodes {
		var gpus, tasks []string
		for _, g := range n.GPUs {
			gpus = append(gpus, num(g.Index))
		}
		for _, r := range sortedTasks(n.GPUs, key) {
			tasks = append(tasks, r.alloc.Job)
		}
		parts = append(parts, fmt.Sprintf("%s[%s|%s]", n.Name, strings.Join(gpus, ","), strings.Join(tasks, ",")))
	}
	var queue []string
	for _, e := range v.Queue {
		queue = append(queue, e.Job)
	}
	return strings.Join(parts, " ") + " queue[" + strings.Join(queue, ",") + "]"
}

func TestArrange(t *testing.T) {
	ten := 10 * time.Minute
	// train has 6m left (job p50); two waits 6m for train's GPU, big for
	// ever.
	in := forecastFixture(finishedRun("f1", "train", t0.Add(-3*time.Hour), ten),
		finishedRun("f2", "train", t0.Add(-2*time.Hour), ten), finishedRun("f3", "train", t0.Add(-time.Hour), ten))
	in.Nodes[0].NodeResources.Devices[0].Instances[0].Healthy = true
	queueBlocked(in, oneTaskJob("two", "main", "nvidia/gpu", 2))
	v := Build(in)
	before := arranged(v, SortNode)

	tests := []struct {
		key    SortKey
		filter string
		want   string
	}{
		{SortNode, "", "gpu-1[0,1,4,7|train,notebook,infer] gpu-2[nil|] queue[big,two,notebook]"},
		{"", "", "gpu-1[0,1,4,7|train,notebook,infer] gpu-2[nil|] queue[big,two,notebook]"},
		// gpu-2's GPU has no stats: last.
		{SortUtil, "", "gpu-1[4,0,1,7|notebook,train,infer] gpu-2[nil|] queue[big,two,notebook]"},
		{SortMemory, "", "gpu-1[0,4,7,1|train,infer,notebook] gpu-2[nil|] queue[big,two,notebook]"},
		// train's 6m is the only time left known, two's the only wait.
		{SortWait, "", "gpu-1[0,1,4,7|train,notebook,infer] gpu-2[nil|] queue[two,big,notebook]"},
		{SortNode, "gpu-2", "gpu-2[nil|] queue[]"},
		{SortNode, "GPU-1", "gpu-1[0,1,4,7|train,notebook,infer] queue[notebook]"},
		{SortNode, "Infer", "gpu-1[7|infer] queue[]"},
		{SortNode, "t", "gpu-1[0,4|train,notebook] queue[two,notebook]"},
		{SortMemory, "t", "gpu-1[0,4|train,notebook] queue[two,notebook]"},
		{SortNode, "nothing", " queue[]"},
	}
	for _, tc := range tests {
		t.Run(string(tc.key)+" "+tc.filter, func(t *testing.T) {
			if got := arranged(Arrange(v, tc.key, tc.filter), tc.key); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if got := arranged(v, SortNode); got != before {
				t.Errorf("the view changed: %s", got)
			}
		})
	}
}
