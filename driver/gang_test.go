package driver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/driver/checkpoint"
	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// fakeGangNomad answers what a gang member's driver reads: the job, its
// allocations with their resources, and nodes. allocs may change while a
// member waits.
type fakeGangNomad struct {
	mu     sync.Mutex
	job    *api.Job
	allocs []*api.AllocationListStub
}

func (f *fakeGangNomad) setAllocs(a ...*api.AllocationListStub) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.allocs = a
}

func (f *fakeGangNomad) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.URL.Path == "/v1/job/"+*f.job.ID:
		json.NewEncoder(w).Encode(f.job)
	case r.URL.Path == "/v1/allocations" && r.URL.Query().Get("resources") == "true" && strings.Contains(r.URL.Query().Get("filter"), `JobID == "`+*f.job.ID+`"`):
		json.NewEncoder(w).Encode(f.allocs)
	case strings.HasPrefix(r.URL.Path, "/v1/node/"):
		id := strings.TrimPrefix(r.URL.Path, "/v1/node/")
		json.NewEncoder(w).Encode(api.Node{ID: id, Attributes: map[string]string{"unique.network.ip-address": "10.0.0." + id}})
	default:
		http.NotFound(w, r)
	}
}

// member is a gang allocation stub: a live one on node unless told
// otherwise.
func member(id, name, node string, ports ...api.PortMapping) *api.AllocationListStub {
	return &api.AllocationListStub{ID: id, Name: name, TaskGroup: "worker", NodeID: node,
		DesiredStatus: api.AllocDesiredStatusRun, ClientStatus: api.AllocClientStatusPending,
		AllocatedResources: &api.AllocatedResources{Shared: api.AllocatedSharedResources{Ports: ports}}}
}

// gangEnv is a test env whose driver reads job "train", a gang of two
// members in group "worker", from fake, with cfg edited before the
// plugin starts.
func gangEnv(t *testing.T, edit func(*Config)) (*env, *fakeGangNomad) {
	t.Helper()
	e := newEnv(t)
	fake := &fakeGangNomad{job: &api.Job{ID: new("train"), TaskGroups: []*api.TaskGroup{
		{Name: new("worker"), Meta: map[string]string{contract.MetaGangMembers: "2"}},
	}}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	e.cfg.Nomad.Address = srv.URL
	edit(e.cfg)
	return e, fake
}

// gangTaskConfig is a task of job "train" with the gang meta, running
// tc.
func gangTaskConfig(e *env, tc *TaskConfig) *drivers.TaskConfig {
	cfg := e.taskConfig(tc, nil)
	cfg.JobID, cfg.Namespace = "train", "default"
	cfg.Env["NOMAD_META_"+contract.MetaGang] = "true"
	return cfg
}

// startRefused fails the test unless StartTask's error, which started
// yields, arrives within d and says want; late says what a timeout means.
func startRefused(t *testing.T, started <-chan error, d time.Duration, want, late string) {
	t.Helper()
	select {
	case err := <-started:
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("start: %v; want it refused: %q", err, want)
		}
	case <-time.After(d):
		t.Fatal(late)
	}
}

// A gang member starts only once every member is placed and no earlier
// run is stopping, with its rank, the world size, rank 0's address and
// port, and the hostfile; told to stop while it waits, it never starts.
func TestGangRendezvous(t *testing.T) {
	e, fake := gangEnv(t, func(*Config) {})
	d := e.plugin()
	rdzv := api.PortMapping{Label: contract.GangRendezvousPort, Value: 24001, HostIP: "10.0.0.1"}

	gangTask := func() *drivers.TaskConfig {
		return gangTaskConfig(e, &TaskConfig{Command: "/bin/sh", Args: []string{"-c",
			`env | grep ^NOMAD_GPU_GANG_ | sort > "$NOMAD_TASK_DIR/env"; cat "$NOMAD_GPU_GANG_HOSTFILE" > "$NOMAD_TASK_DIR/hosts"`}})
	}

	t.Run("waits for its peer and for the previous run to stop", func(t *testing.T) {
		cfg := gangTask()
		old := member("old-1", "train.worker[1]", "3")
		old.DesiredStatus, old.ClientStatus = api.AllocDesiredStatusStop, api.AllocClientStatusRunning
		fake.setAllocs(member(cfg.AllocID, "train.worker[1]", "2"), old)
		started := make(chan error, 1)
		go func() { _, _, err := d.StartTask(cfg); started <- err }()
		time.Sleep(3 * gangPoll)
		select {
		case err := <-started:
			t.Fatalf("started (%v) with one member of two placed", err)
		default:
		}
		fake.setAllocs(member(cfg.AllocID, "train.worker[1]", "2"), member("peer-0", "train.worker[0]", "1", rdzv), old)
		time.Sleep(3 * gangPoll)
		select {
		case err := <-started:
			t.Fatalf("started (%v) while the previous run still stops", err)
		default:
		}
		fake.setAllocs(member(cfg.AllocID, "train.worker[1]", "2"), member("peer-0", "train.worker[0]", "1", rdzv))
		if err := <-started; err != nil {
			t.Fatal(err)
		}
		if res := wait(t, d, cfg.ID, 30*time.Second); res.ExitCode != 0 {
			t.Fatalf("exit %+v", res)
		}
		local := cfg.Env["NOMAD_TASK_DIR"]
		env, _ := os.ReadFile(filepath.Join(local, "env"))
		wantEnv := "NOMAD_GPU_GANG_HOSTFILE=" + filepath.Join(local, gangHostfile) + "\n" +
			"NOMAD_GPU_GANG_MASTER_ADDR=10.0.0.1\nNOMAD_GPU_GANG_MASTER_PORT=24001\nNOMAD_GPU_GANG_RANK=1\nNOMAD_GPU_GANG_WORLD_SIZE=2\n"
		if string(env) != wantEnv {
			t.Errorf("environment\n%s\nwant\n%s", env, wantEnv)
		}
		if hosts, _ := os.ReadFile(filepath.Join(local, "hosts")); string(hosts) != "10.0.0.1 slots=1\n10.0.0.2 slots=1\n" {
			t.Errorf("hostfile %q", hosts)
		}
	})

	t.Run("told to stop while it waits", func(t *testing.T) {
		cfg := gangTask()
		self := member(cfg.AllocID, "train.worker[0]", "1", rdzv)
		fake.setAllocs(self)
		started := make(chan error, 1)
		go func() { _, _, err := d.StartTask(cfg); started <- err }()
		time.Sleep(2 * gangPoll)
		stopped := *self
		stopped.DesiredStatus = api.AllocDesiredStatusStop
		fake.setAllocs(&stopped)
		startRefused(t, started, 10*time.Second, "no longer a live member", "still waiting after its allocation was told to stop")
	})
}

// A member whose peers are never placed fails once the plugin config's
// gang.wait is over, saying so.
func TestGangWaitBound(t *testing.T) {
	e, fake := gangEnv(t, func(c *Config) { c.Gang.Wait = time.Second })
	d := e.plugin()
	cfg := gangTaskConfig(e, &TaskConfig{Command: "/bin/true"})
	fake.setAllocs(member(cfg.AllocID, "train.worker[0]", "1"))
	started := make(chan error, 1)
	go func() { _, _, err := d.StartTask(cfg); started <- err }()
	startRefused(t, started, 20*time.Second, "still waiting after 1s, the plugin's gang.wait", "still waiting 20s into a gang.wait of 1s")
}

// A gang of one member (a team queue's held job) restores its newest
// generation, as any task: its commits need name no step, and with no
// peer there is none to line up with. (It reads no store: a replay's
// task commits unnamed steps, and took the step rule for none at all.)
func TestGangOfOneRestoresItsNewest(t *testing.T) {
	rule, step, what, err := gangRestore(nil, []checkpoint.Key{{Namespace: "a", Job: "train", Group: "worker", Task: "t"}})
	gens := []*checkpoint.Generation{{}, {}}
	if err != nil || step != nil || what != "" || rule(gens) != gens[1] {
		t.Errorf("rule picks %p of %p, step %v, note %q, error %v; want the newest, no step, no note", rule(gens), gens, step, what, err)
	}
}
