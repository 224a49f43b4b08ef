package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// parseAgent stands in for the agent's /v1/jobs/parse: each jobspec's
// text is the key of the job it parses to; it records the variables sent.
func parseAgent(t *testing.T, jobs map[string]*api.Job, vars *string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.JobsParseRequest
		if r.URL.Path != "/v1/jobs/parse" || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		*vars = req.Variables
		job, ok := jobs[strings.TrimSpace(req.JobHCL)]
		if !ok {
			http.Error(w, "1:1: unexpected token", http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(job)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func gpuJob(id string, configs ...map[string]any) *api.Job {
	g := &api.TaskGroup{Name: new("trainer")}
	for i, c := range configs {
		g.Tasks = append(g.Tasks, &api.Task{Name: []string{"train", "sidecar"}[i], Driver: "gpu", Config: c})
	}
	g.Tasks = append(g.Tasks, &api.Task{Name: "log", Driver: "raw_exec", Config: map[string]any{"whatever": 1}})
	return &api.Job{ID: new(id), TaskGroups: []*api.TaskGroup{g}}
}

// gangJob is a gang of one group "trainer" of members, at count, with
// or without the policies, the rendezvous port and the checkpoint block
// that gangs need; with
// config, a service job whose gpu task has that config.
func gangJob(id, members string, count int, conventions bool, config map[string]any) *api.Job {
	g := &api.TaskGroup{Name: new("trainer"), Count: new(count), Meta: map[string]string{"nomad_gpu_gang_members": members},
		Tasks: []*api.Task{{Name: "train", Driver: "gpu", Config: map[string]any{"command": "/bin/sh"},
			Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: new(uint64(1))}}}}}}
	j := &api.Job{ID: new(id), Type: new("batch"), Meta: map[string]string{"nomad_gpu_gang": "true"}, TaskGroups: []*api.TaskGroup{g}}
	if conventions {
		g.RestartPolicy = &api.RestartPolicy{Attempts: new(0)}
		g.ReschedulePolicy = &api.ReschedulePolicy{Attempts: new(0)}
		g.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "rendezvous"}}}}
		g.Tasks[0].Config["checkpoint"] = []map[string]any{{}}
	}
	if config != nil {
		j.Type = nil
		g.Tasks[0].Config = config
	}
	return j
}

// Each gpu task's config is checked against the driver's schema before
// submission: a typo, a bad value and a parse error are each named with
// the file, job, group, task and key path, exit status 1; valid jobspecs
// pass with 0; other drivers' tasks are left alone; bad flags exit 2. A
// gang's conventions are checked too, each broken one a line of its own.
func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, typo, bad, broken := write("good.hcl", "good"), write("typo.hcl", "typo"), write("bad.hcl", "bad"), write("broken.hcl", "broken")
	gang, badGang, notGang := write("gang.hcl", "gang"), write("badgang.hcl", "badgang"), write("notgang.hcl", "notgang")
	jobs := map[string]*api.Job{
		"good":    gpuJob("train-p1", map[string]any{"command": "/bin/sh", "checkpoint": []any{map[string]any{"commit_timeout": "45s"}}}),
		"typo":    gpuJob("train-p2", map[string]any{"command": "/bin/sh"}, map[string]any{"command": "/bin/sh", "checkpoint": []any{map[string]any{"comit_timeout": "45s"}}}),
		"bad":     gpuJob("gpu-example", map[string]any{"command": "/bin/sh", "pid_mode": "shared"}),
		"gang":    gangJob("gang-sim", "2", 0, true, nil),
		"badgang": gangJob("gang-bad", "x", 2, false, map[string]any{"command": "/bin/sh", "pid_mode": "shared"}),
		"notgang": gpuJob("train-p3", map[string]any{"command": "/bin/sh"}),
	}
	jobs["notgang"].TaskGroups[0].Meta = map[string]string{"nomad_gpu_gang_members": "2"}
	after, afterBad := write("after.hcl", "after"), write("afterbad.hcl", "afterbad")
	jobs["after"] = gangJob("train", "2", 0, true, nil)
	jobs["after"].Meta["nomad_gpu_after"] = "prep, data/etl"
	jobs["afterbad"] = gpuJob("train-p4", map[string]any{"command": "/bin/sh"})
	jobs["afterbad"].Meta = map[string]string{"nomad_gpu_after": "train-p4"}
	var vars string
	addr := parseAgent(t, jobs, &vars).URL
	cases := []struct {
		name     string
		args     []string
		code     int
		out, err []string
	}{
		{"valid", []string{"-var", "tier=P1", good}, 0, []string{good + ": 1 gpu task(s) valid"}, nil},
		{"typo", []string{typo}, 1, nil, []string{typo + `: job "train-p2" group "trainer" task "sidecar": config.checkpoint[0].comit_timeout: no such key; allowed in config.checkpoint[0]: signal, commit_timeout, interval, keep`}},
		{"bad value, others still checked", []string{bad, good}, 1, []string{good + ": 1 gpu task(s) valid"}, []string{bad + `: job "gpu-example" group "trainer" task "train": config.pid_mode: "shared" is not a mode; allowed: "private", "host"`}},
		{"gang", []string{gang}, 0, []string{gang + ": 1 gpu task(s) valid; a gang of 2 members"}, nil},
		{"gang: every convention broken is named, with the driver's errors", []string{badGang}, 1, nil, []string{
			badGang + `: job "gang-bad" group "trainer" task "train": config.pid_mode: "shared" is not a mode; allowed: "private", "host"`,
			badGang + `: job "gang-bad": type: "service"; allowed: "batch" (a gang runs to completion)`,
			badGang + `: job "gang-bad" group "trainer": meta.nomad_gpu_gang_members: "x" is not an integer; allowed: 1 or more`,
			badGang + `: job "gang-bad" group "trainer": count: 2; allowed: 0 (the controller scales the group to its members when it admits the gang)`,
			badGang + `: job "gang-bad" group "trainer": restart.attempts: 3; allowed: 0 (a member's failure is the gang's`,
			badGang + `: job "gang-bad" group "trainer": reschedule.attempts: 1; allowed: 0`,
		}},
		{"gang meta on a job that is none", []string{notGang}, 1, nil, []string{
			notGang + `: job "train-p3" group "trainer": meta.nomad_gpu_gang_members: set, but the job is no gang; allowed: only with the job's meta.nomad_gpu_gang = "true"`,
		}},
		{"dependencies of a held job", []string{after}, 0, []string{after + ": 1 gpu task(s) valid; a gang of 2 members"}, nil},
		{"dependencies: itself, on a job not held", []string{afterBad}, 1, nil, []string{
			afterBad + `: job "train-p4": meta nomad_gpu_after: "train-p4" names the job itself; allowed: other jobs`,
			afterBad + `: job "train-p4": meta nomad_gpu_after: set on a job that is not held, which Nomad places at once; allowed: a held job (meta nomad_gpu_gang = "true"`,
		}},
		{"parse error", []string{broken}, 1, nil, []string{broken + ": the agent at " + addr + " could not parse it: ", "unexpected token"}},
		{"missing file", []string{filepath.Join(dir, "nope.hcl")}, 1, nil, []string{"nope.hcl: no such file"}},
		{"no jobspec", nil, 2, nil, []string{"name a jobspec: nomad-gpu validate [flags] JOBSPEC [JOBSPEC ...] (- reads stdin)"}},
		{"bad -var", []string{"-var", "tier", good}, 2, nil, []string{`-var "tier": allowed: key=value`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runValidate(append([]string{"-address", addr}, c.args...), &stdout, &stderr)
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, c.code, &stderr)
			}
			for _, w := range c.out {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, &stdout)
				}
			}
			for _, w := range c.err {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, &stderr)
				}
			}
		})
	}
	// -var reaches the agent as a variables file.
	runValidate([]string{"-address", addr, "-var", `tier=P"0`, good}, &bytes.Buffer{}, &bytes.Buffer{})
	if vars != "tier = \"P\\\"0\"\n" {
		t.Errorf("variables sent: %q", vars)
	}
}
