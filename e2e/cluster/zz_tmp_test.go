package cluster

import (
	"testing"
	"time"
)

func TestTmpStopRestart(t *testing.T) {
	c := Start(t, Options{Clients: 1})
	job := c.RunJob(t, sleepJob)
	allocs := c.WaitForAllocs(t, *job.ID, 1, time.Minute)
	c.WaitForAllocStatus(t, allocs[0].ID, "running", time.Minute)
	a := c.Client(t, "client-1")
	t0 := time.Now()
	a.Stop(t)
	t.Logf("stop took %v", time.Since(t0))
	t0 = time.Now()
	a.Restart(t)
	n := c.WaitForNode(t, "client-1", nil, time.Minute)
	t.Logf("restart->ready took %v (%s)", time.Since(t0), n.Status)
	time.Sleep(3 * time.Second)
	al := c.WaitForAllocStatus(t, allocs[0].ID, "running", time.Minute)
	t.Log(AllocSummary(al))
	more := c.StartClients(t, ClientOptions{Name: "x"}, ClientOptions{Name: "y"})
	t.Logf("started %d more", len(more))
}
