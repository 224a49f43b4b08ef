package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller"
)

// The queues' accounts against real Nomad: one node of 4 GPUs, queues a
// (namespace default) and b (namespace b) of nominal 2 each in one
// cohort. Three 1-GPU jobs of a's: a uses 3 and borrows 1, b lends its 2,
// a alone is active and stands at 1; its decayed use grows, and the
// leader keeps it in the variable nomad-gpu/queues.
func TestQueueAccounts(t *testing.T) {
	c := protectionCluster(t)
	file := filepath.Join(t.TempDir(), "queues.hcl")
	if err := os.WriteFile(file, []byte(`cohort "lab" {}
queue "a" {
  namespaces = ["default"]
  nominal    = 2
  cohort     = "lab"
}
queue "b" {
  namespaces = ["b"]
  nominal    = 2
  cohort     = "lab"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctl := c.StartController(t, "controller", "-tick", "500ms", "-queues", file)
	for _, id := range []string{"a-1", "a-2", "a-3"} {
		c.RunJob(t, holderJob(id, 50, time.Minute))
	}
	want := map[string]float64{"used": 3, "nominal": 4, "borrowed": 1, "lent": 2}
	deadline := time.Now().Add(time.Minute)
	for {
		got := ctl.MetricByLabel(t, contract.MetricControllerQueueGPUs, contract.LabelQueueFigure)
		same := len(got) == len(want)
		for k, v := range want {
			same = same && got[k] == v
		}
		if same {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue GPUs by figure %v, want %v (summed over queues)", got, want)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if st := ctl.MetricByLabel(t, contract.MetricControllerQueueStanding, contract.LabelQueue); len(st) != 1 || st["a"] != 1 {
		t.Errorf("standings %v; want a alone, at 1", st)
	}
	time.Sleep(2 * time.Second)
	if u := ctl.MetricByLabel(t, contract.MetricControllerQueueUsage, contract.LabelQueue); u["a"] <= 0 || u["b"] != 0 {
		t.Errorf("decayed use %v GPU-seconds; want a's above 0, b's 0", u)
	}
	v, _, err := c.API().Variables().Read(controller.QueuesVariable, &api.QueryOptions{Namespace: "default"})
	if err != nil || !strings.Contains(v.Items[controller.QueueUsageItem], `"a":`) {
		t.Fatalf("variable %s: %v, %v; want the queues' use", controller.QueuesVariable, v, err)
	}
	// What nomad-gpu top -json shows of the controller: the accounts.
	st, err := controller.ReadStatus(context.Background(), c.API(), "default", time.Now())
	if err != nil || len(st.Queues) != 2 || st.Queues[0].Name != "a" || st.Queues[0].Use != 3 || st.Queues[0].Borrowed != 1 || st.Queues[1].Lent != 2 {
		t.Errorf("the controller's status: queues %+v, %v; want a using 3, borrowing 1, b lending 2", st.Queues, err)
	}
}
