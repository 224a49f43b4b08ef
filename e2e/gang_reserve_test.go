package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
	"github.com/nomad-gpu/nomad-gpu/e2e/harness"
)

// streamJobLength is how long each job of the 1-GPU stream runs.
const streamJobLength = 10 * time.Second

// streamOneGPUJobs submits a 1-GPU batch job of streamJobLength every
// second until stop closes: more than two 4-GPU nodes serve, so a queue
// of them is always waiting.
func streamOneGPUJobs(t *testing.T, c *cluster.Cluster, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-time.After(time.Second):
		}
		job, err := c.API().Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: holderJob(fmt.Sprintf("small-%03d", i), 50, streamJobLength), Canonicalize: true})
		if err == nil {
			_, _, err = c.API().Jobs().Register(job, nil)
		}
		if err != nil {
			t.Logf("stream: job %d not submitted: %v", i, err)
		}
	}
}

// A gang of two 4-GPU members, and a job that is no gang asking 4 GPUs,
// each on two sim nodes of 4 GPUs while a stream of 1-GPU jobs keeps
// both nodes busy and a queue waiting. Without reservations, it waits
// past twice a small job's length (every freed GPU goes to the queue);
// with them, the controller keeps nodes with a placeholder one above its
// priority, and it starts within twice a small job's length of its
// submission, with its own priority back afterwards and nothing of it
// replaced. A gang is never placed in part, either way.
func TestGangReservation(t *testing.T) {
	for _, tc := range []struct {
		name          string
		gang, reserve bool
	}{
		{"a gang without reservations waits", true, false}, {"a gang with a reservation starts", true, true},
		{"a 4-GPU job without reservations waits", false, false}, {"a 4-GPU job with a reservation starts", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := fourGPUCluster(t, 2, func(c *cluster.Cluster, n *harness.GPUNode) {
				n.DriverHCL = fmt.Sprintf("nomad {\naddress = %q\n}\n%s", c.Server().HTTPAddr(), unveilNomadGPU(t))
			}, "", func(*api.Node) bool { return true })
			// A reservation hands its GPUs over by preemption, which
			// Nomad does for batch jobs only when asked.
			c.EnablePreemption(t)
			ctl := c.StartController(t, "controller", "-tick", "500ms", "-preemption-cooldown", "0", "-layouts=false", "-moves=false",
				fmt.Sprintf("-reservations=%v", tc.reserve))
			stop := make(chan struct{})
			defer close(stop)
			go streamOneGPUJobs(t, c, stop)
			// The stream runs a while first: both nodes busy, finished jobs
			// to predict from.
			time.Sleep(3 * streamJobLength)
			members := 1
			if tc.gang {
				members = 2
			}
			watch := watchPartial(t, c, "train", members)
			submitted := time.Now()
			runGang(t, c, "train", 4, tc.gang, func(j *api.Job) {
				j.TaskGroups[0].Tasks[0].Config["args"] = []string{"sim-train", "--steps", "0", "--step-time", "1s"}
				if !tc.gang {
					j.TaskGroups[0].Count = new(1)
				}
			})
			// A held 2-GPU job below the stream: while the placeholder
			// holds GPUs it would fit on, it waits for the reservation.
			stopWatch := make(chan struct{})
			seen := watchReason(t, c, "default", "waiter", controller.WaitReservation, stopWatch)
			runHeld(t, c, "default", "waiter", 3, "1s", nil, func(j *api.Job) {
				j.Priority = new(20)
				j.TaskGroups[0].Tasks[0].Resources.Devices[0].Count = new(uint64(2))
			})
			bound := 2 * streamJobLength
			started := waitGangRunning(c, "train", members, bound+10*time.Second)
			close(stopWatch)
			if reason := <-seen; tc.reserve && reason == "" {
				t.Errorf("the held 2-GPU job never waited for the reservation in nomad-gpu queue")
			} else if reason != "" {
				t.Logf("the held 2-GPU job waited: %s", reason)
			}
			if d := watch.longestPartial(); d > 30*time.Second {
				t.Errorf("a member ran for %s while another was not placed", d)
			}
			log := ctl.Log()
			// The priority comes back once every allocation is placed: a
			// tick or two after it runs.
			for deadline := time.Now().Add(15 * time.Second); tc.reserve && !strings.Contains(log, "kind=restored") && time.Now().Before(deadline); log = ctl.Log() {
				time.Sleep(250 * time.Millisecond)
			}
			switch {
			case tc.reserve && (started.IsZero() || started.Sub(submitted) > bound):
				t.Fatalf("with a reservation it was not running %s after its submission (started %v, zero: never)\n%s",
					bound, started.Sub(submitted), decisions(log))
			case !tc.reserve && !started.IsZero() && started.Sub(submitted) <= bound:
				t.Fatalf("without reservations it started %s after its submission: the stream did not keep it waiting", started.Sub(submitted))
			}
			handover := "on its reservation, at priority 61"
			if !tc.gang {
				handover = "on its reservation, to priority 61"
			}
			if tc.reserve && (!strings.Contains(log, "kind=reserved") || !strings.Contains(log, handover) || !strings.Contains(log, "kind=restored")) {
				t.Errorf("no reservation in the controller's log:\n%s", decisions(log))
			}
			if tc.reserve {
				// Its own priority given back in place: it runs on, nothing
				// of it replaced.
				time.Sleep(5 * time.Second)
				all, _, err := c.API().Jobs().Allocations("train", true, nil)
				if err != nil || len(all) != members {
					t.Errorf("it has %d allocations (%v) after its priority was restored; want its %d, none replaced", len(all), err, members)
				}
				if j, _, err := c.API().Jobs().Info("train", nil); err != nil || *j.Priority != 50 {
					t.Errorf("its priority after its reservation: %v (%v); want its own 50", j.Priority, err)
				}
			}
			if !tc.reserve && strings.Contains(log, contract.ReservationJobPrefix) {
				t.Errorf("a placeholder without -reservations:\n%s", decisions(log))
			}
			if started.IsZero() {
				t.Logf("submitted into the stream: not running within %s", bound+10*time.Second)
			} else {
				t.Logf("submitted into the stream: running after %s", started.Sub(submitted).Round(10*time.Millisecond))
			}
		})
	}
}

// watchReason polls nomad-gpu queue until stop closes, then sends the
// first reason of kind job of namespace ns waited with ("" for none).
func watchReason(t *testing.T, c *cluster.Cluster, ns, job, kind string, stop <-chan struct{}) <-chan string {
	out := make(chan string, 1)
	go func() {
		seen := ""
		for {
			select {
			case <-stop:
				out <- seen
				return
			case <-time.After(250 * time.Millisecond):
			}
			r, err := queueReport(t, c)
			for _, j := range r.Jobs {
				if err == nil && seen == "" && j.Namespace == ns && j.Job == job && j.Kind == kind {
					seen = j.Reason
				}
			}
		}
	}()
	return out
}

// waitGangRunning is when the job first had members running, zero when
// not within timeout.
func waitGangRunning(c *cluster.Cluster, job string, members int, timeout time.Duration) time.Time {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		all, _, err := c.API().Jobs().Allocations(job, false, nil)
		running := 0
		for _, a := range all {
			if err == nil && a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun {
				running++
			}
		}
		if running >= members {
			return time.Now()
		}
		time.Sleep(250 * time.Millisecond)
	}
	return time.Time{}
}

// decisions are the decision lines of a controller's log.
func decisions(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "decision") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// waitLog waits until the controller's log holds want, and returns it;
// it fails the test after timeout.
func waitLog(t *testing.T, ctl *cluster.Controller, want string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for log := ctl.Log(); ; log = ctl.Log() {
		switch {
		case strings.Contains(log, want):
			return log
		case time.Now().After(deadline):
			t.Fatalf("no %q in the controller's log within %s:\n%s", want, timeout, decisions(log))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Backfill on real Nomad: a gang of two 4-GPU members waits for node A,
// held by "long" (45 s), while its placeholder holds node B. Three 1-GPU
// runs of 5 s before make a 1-GPU job's predicted run time 5 s, and
// long's is its elapsed time again, so the reservation is due some 20 s
// on. A 1-GPU job queued then, below the gang's priority, is raised onto
// a GPU the placeholder holds (its plan preempting a placeholder
// allocation only), runs, and gets its own priority back; the placeholder
// takes the GPU again, and the gang starts once long ends, never placed
// in part.
func TestReservationBackfill(t *testing.T) {
	c, _ := fourGPUCluster(t, 2, func(c *cluster.Cluster, n *harness.GPUNode) {
		n.DriverHCL = fmt.Sprintf("nomad {\naddress = %q\n}\n%s", c.Server().HTTPAddr(), unveilNomadGPU(t))
	}, "", func(*api.Node) bool { return true })
	c.EnablePreemption(t)
	ctl := c.StartController(t, "controller", "-tick", "500ms", "-preemption-cooldown", "0", "-layouts=false", "-moves=false", "-reservations=true")
	for i := range 3 {
		c.RunJob(t, holderJob(fmt.Sprintf("history-%d", i), 50, 5*time.Second))
	}
	c.RunJob(t, holderJob2("long", 50, 4, 45*time.Second))
	longStarted := waitGangRunning(c, "long", 1, time.Minute)
	if longStarted.IsZero() {
		t.Fatal("long not running within a minute")
	}
	time.Sleep(time.Until(longStarted.Add(20 * time.Second)))
	watch := watchPartial(t, c, "train", 2)
	runGang(t, c, "train", 4, true, func(j *api.Job) {
		j.TaskGroups[0].Tasks[0].Config["args"] = []string{"sim-train", "--steps", "0", "--step-time", "1s"}
	})
	waitLog(t, ctl, "kind=reserved", 15*time.Second)
	if waitGangRunning(c, contract.ReservationJobPrefix+"train", 4, 15*time.Second).IsZero() {
		t.Fatalf("the placeholder does not hold node B:\n%s", decisions(ctl.Log()))
	}
	c.RunJob(t, holderJob("short", 40, 5*time.Second))
	log := waitLog(t, ctl, "kind=backfilled", 10*time.Second)
	if !strings.Contains(log, "predicted to run") {
		t.Errorf("backfilled not on its prediction:\n%s", decisions(log))
	}
	if waitGangRunning(c, "short", 1, 10*time.Second).IsZero() {
		t.Fatalf("short, backfilled, not running:\n%s", decisions(ctl.Log()))
	}
	started := waitGangRunning(c, "train", 2, time.Until(longStarted.Add(45*time.Second+30*time.Second)))
	if started.IsZero() {
		t.Fatalf("the gang did not start within 30 s of long's end:\n%s", decisions(ctl.Log()))
	}
	if d := watch.longestPartial(); d > 30*time.Second {
		t.Errorf("a member ran for %s while another was not placed", d)
	}
	if j, _, err := c.API().Jobs().Info("short", nil); err != nil || *j.Priority != 40 || len(j.Constraints) != 0 {
		t.Errorf("short after its backfill: %v (%v); want its own priority 40 and no pin", j, err)
	}
	t.Logf("the gang ran %s after long started; short backfilled", started.Sub(longStarted).Round(100*time.Millisecond))
}
