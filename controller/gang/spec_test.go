package gang

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// gangJob is a valid gang: group "worker" of two 1-GPU members with a
// rendezvous port, then a group "eval" of one. edit changes it.
func gangJob(edit func(j *api.Job)) *api.Job {
	group := func(name, members string, port bool) *api.TaskGroup {
		g := &api.TaskGroup{
			Name:             new(name),
			Count:            new(0),
			Meta:             map[string]string{"nomad_gpu_gang_members": members},
			RestartPolicy:    &api.RestartPolicy{Attempts: new(0)},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: new(0), Unlimited: new(false)},
			Tasks: []*api.Task{{Name: "train", Driver: "gpu", Config: map[string]any{"checkpoint": []map[string]any{{}}}, Resources: &api.Resources{
				Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: new(uint64(1))}}}}},
		}
		if port {
			g.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "rendezvous"}}}}
		}
		return g
	}
	j := &api.Job{
		ID:         new("train"),
		Type:       new("batch"),
		Meta:       map[string]string{"nomad_gpu_gang": "true"},
		TaskGroups: []*api.TaskGroup{group("worker", "2", true), group("eval", "1", false)},
	}
	if edit != nil {
		edit(j)
	}
	return j
}

func TestParseSpec(t *testing.T) {
	noGPU := func(g *api.TaskGroup) { g.Tasks[0].Resources.Devices = nil }
	cases := []struct {
		name string
		edit func(j *api.Job)
		gang bool
		spec Spec
		errs []string // each a whole line of the joined error
	}{
		{name: "valid", gang: true, spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}}},
		{name: "not a gang", edit: func(j *api.Job) { j.Meta = nil; j.TaskGroups[0].Meta = nil; j.TaskGroups[1].Meta = nil }},
		{name: "gang false", edit: func(j *api.Job) {
			j.Meta["nomad_gpu_gang"] = "false"
			j.TaskGroups[0].Meta = nil
			j.TaskGroups[1].Meta = nil
		}},
		{name: "gang meta on a job that is none", edit: func(j *api.Job) {
			j.Meta = map[string]string{"nomad_gpu_gang_locality": "${meta.rack}"}
		}, errs: []string{
			`meta.nomad_gpu_gang_locality: set, but the job is no gang; allowed: only with the job's meta.nomad_gpu_gang = "true"`,
			`group "worker": meta.nomad_gpu_gang_members: set, but the job is no gang; allowed: only with the job's meta.nomad_gpu_gang = "true"`,
			`group "eval": meta.nomad_gpu_gang_members: set, but the job is no gang; allowed: only with the job's meta.nomad_gpu_gang = "true"`,
		}},
		{name: "gang not a boolean", edit: func(j *api.Job) { j.Meta["nomad_gpu_gang"] = "yes" },
			errs: []string{`meta.nomad_gpu_gang: "yes"; allowed: "true", "false" or none`}},
		{name: "members not an integer", edit: func(j *api.Job) { j.TaskGroups[0].Meta["nomad_gpu_gang_members"] = "x" }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 0}, {"eval", 1}}},
			errs: []string{`group "worker": meta.nomad_gpu_gang_members: "x" is not an integer; allowed: 1 or more`}},
		{name: "members 0", edit: func(j *api.Job) { j.TaskGroups[1].Meta["nomad_gpu_gang_members"] = "0" }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 0}}},
			errs: []string{`group "eval": meta.nomad_gpu_gang_members: 0; allowed: 1 or more`}},
		{name: "a GPU group without members", edit: func(j *api.Job) { j.TaskGroups[1].Meta = nil }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}}},
			errs: []string{`group "eval": meta.nomad_gpu_gang_members: not set on a group with GPUs; allowed: 1 or more`}},
		{name: "a group without GPUs nor members is left alone", edit: func(j *api.Job) {
			j.TaskGroups[1].Meta = nil
			j.TaskGroups[1].Count = new(1)
			noGPU(j.TaskGroups[1])
		}, gang: true, spec: Spec{Groups: []Group{{"worker", 2}}}},
		{name: "a group without GPUs may be a member", edit: func(j *api.Job) { noGPU(j.TaskGroups[1]) }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}}},
		{name: "no member group", edit: func(j *api.Job) {
			for _, g := range j.TaskGroups {
				g.Meta = nil
				noGPU(g)
			}
		}, gang: true, errs: []string{`group: none declares meta.nomad_gpu_gang_members; allowed: one or more groups that do`}},
		{name: "service", edit: func(j *api.Job) { j.Type = new("service") }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}},
			errs: []string{`type: "service"; allowed: "batch" (a gang runs to completion)`}},
		{name: "type unset is service", edit: func(j *api.Job) { j.Type = nil }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}},
			errs: []string{`type: "service"; allowed: "batch" (a gang runs to completion)`}},
		{name: "count", edit: func(j *api.Job) { j.TaskGroups[0].Count = new(2); j.TaskGroups[1].Count = nil }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}},
			errs: []string{
				`group "worker": count: 2; allowed: 0 (the controller scales the group to its members when it admits the gang)`,
				`group "eval": count: 1; allowed: 0 (the controller scales the group to its members when it admits the gang)`,
			}},
		{name: "restart and reschedule", edit: func(j *api.Job) {
			j.TaskGroups[0].RestartPolicy = nil
			j.TaskGroups[0].ReschedulePolicy = &api.ReschedulePolicy{Attempts: new(2)}
			j.TaskGroups[1].Tasks[0].RestartPolicy = &api.RestartPolicy{Attempts: new(1)}
			j.TaskGroups[1].ReschedulePolicy = &api.ReschedulePolicy{Unlimited: new(true)}
		}, gang: true, spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}}, errs: []string{
			`group "worker": restart.attempts: 3; allowed: 0 (a member's failure is the gang's: the controller restarts the gang as a unit)`,
			`group "worker": reschedule.attempts: 2; allowed: 0 (a member's failure is the gang's: the controller restarts the gang as a unit)`,
			`group "eval": task "train" restart.attempts: 1; allowed: 0 (a member's failure is the gang's: the controller restarts the gang as a unit)`,
			`group "eval": reschedule.unlimited: true; allowed: false (a member's failure is the gang's: the controller restarts the gang as a unit)`,
		}},
		{name: "reschedule unset is batch's 1", edit: func(j *api.Job) { j.TaskGroups[1].ReschedulePolicy = nil }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}},
			errs: []string{`group "eval": reschedule.attempts: 1; allowed: 0 (a member's failure is the gang's: the controller restarts the gang as a unit)`}},
		{name: "the job's reschedule is the groups' default", edit: func(j *api.Job) {
			j.Reschedule = &api.ReschedulePolicy{Attempts: new(0), Unlimited: new(false)}
			j.TaskGroups[0].ReschedulePolicy = nil
			j.TaskGroups[1].ReschedulePolicy = &api.ReschedulePolicy{}
		}, gang: true, spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}}},
		{name: "no rendezvous port in rank 0's group", edit: func(j *api.Job) {
			j.TaskGroups[0].Networks = nil
			j.TaskGroups[1].Networks = []*api.NetworkResource{{ReservedPorts: []api.Port{{Label: "rendezvous", Value: 29500}}}}
		}, gang: true, spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}},
			errs: []string{`group "worker": network.port: no port labelled "rendezvous"; allowed: the group of rank 0 (the gang's first) declares it, the members' master port`}},
		{name: "two members need the port", edit: func(j *api.Job) {
			j.TaskGroups = j.TaskGroups[:1]
			j.TaskGroups[0].Networks = nil
		}, gang: true, spec: Spec{Groups: []Group{{"worker", 2}}},
			errs: []string{`group "worker": network.port: no port labelled "rendezvous"`}},
		{name: "a static rendezvous port", edit: func(j *api.Job) {
			j.TaskGroups[0].Networks = []*api.NetworkResource{{ReservedPorts: []api.Port{{Label: "rendezvous", Value: 29500}}}}
		}, gang: true, spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}}},
		{name: "rank 0 is the first member group", edit: func(j *api.Job) {
			launcher := &api.TaskGroup{Name: new("launcher"), Count: new(1), Tasks: []*api.Task{{Name: "l", Driver: "exec"}}}
			j.TaskGroups = append([]*api.TaskGroup{launcher}, j.TaskGroups...)
		}, gang: true, spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}}},
		{name: "one member needs no port", edit: func(j *api.Job) {
			j.TaskGroups = j.TaskGroups[1:]
		}, gang: true, spec: Spec{Groups: []Group{{"eval", 1}}}},
		{name: "locality", edit: func(j *api.Job) { j.Meta["nomad_gpu_gang_locality"] = "${meta.rack}" }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}, Locality: "${meta.rack}"}},
		{name: "locality node class", edit: func(j *api.Job) { j.Meta["nomad_gpu_gang_locality"] = "${node.class}" }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}, Locality: "${node.class}"}},
		{name: "locality attr", edit: func(j *api.Job) {
			j.Meta["nomad_gpu_gang_locality"] = "${attr.platform.aws.placement.availability-zone}"
		}, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}, Locality: "${attr.platform.aws.placement.availability-zone}"}},
		{name: "locality not an interpolation", edit: func(j *api.Job) { j.Meta["nomad_gpu_gang_locality"] = "rack" }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}, Locality: "rack"},
			errs: []string{`meta.nomad_gpu_gang_locality: "rack"; allowed: ${meta.<key>}, ${attr.<name>} or ${node.<unique.id|unique.name|datacenter|region|class|pool>}`}},
		{name: "locality of no node field", edit: func(j *api.Job) { j.Meta["nomad_gpu_gang_locality"] = "${node.rack}" }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}, Locality: "${node.rack}"},
			errs: []string{`meta.nomad_gpu_gang_locality: "${node.rack}"; allowed:`}},
		{name: "locality of a task's env", edit: func(j *api.Job) { j.Meta["nomad_gpu_gang_locality"] = "${env.RACK}" }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}, Locality: "${env.RACK}"},
			errs: []string{`meta.nomad_gpu_gang_locality: "${env.RACK}"; allowed:`}},
		{name: "a member without a checkpoint block", edit: func(j *api.Job) { delete(j.TaskGroups[1].Tasks[0].Config, "checkpoint") }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}},
			errs: []string{`group "eval": task "train" config.checkpoint: none; allowed: a checkpoint block (a gang restarts as one, from the step every member committed), or the job's meta.nomad_gpu_gang_checkpoint = "none"`}},
		{name: "a member on a driver that cannot checkpoint", edit: func(j *api.Job) { j.TaskGroups[0].Tasks[0].Driver = "docker" }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}},
			errs: []string{`group "worker": task "train" driver: "docker" cannot checkpoint a member; allowed: "gpu" with a checkpoint block, or`}},
		{name: "checkpoints declined", edit: func(j *api.Job) {
			j.Meta["nomad_gpu_gang_checkpoint"] = "none"
			j.TaskGroups[0].Tasks[0].Driver = "docker"
			delete(j.TaskGroups[1].Tasks[0].Config, "checkpoint")
		}, gang: true, spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}}},
		{name: "checkpoint rule misspelt", edit: func(j *api.Job) { j.Meta["nomad_gpu_gang_checkpoint"] = "optional" }, gang: true,
			spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}},
			errs: []string{`meta.nomad_gpu_gang_checkpoint: "optional"; allowed: "required" (the default) or "none"`}},
		{name: "a task without GPUs needs none", edit: func(j *api.Job) {
			j.TaskGroups[0].Tasks = append(j.TaskGroups[0].Tasks, &api.Task{Name: "log-shipper", Driver: "exec"})
		}, gang: true, spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 1}}}},
		{name: "every error, not the first", edit: func(j *api.Job) {
			j.Type = new("service")
			j.TaskGroups[0].Count = new(2)
			j.TaskGroups[1].Meta["nomad_gpu_gang_members"] = "-1"
		}, gang: true, spec: Spec{Groups: []Group{{"worker", 2}, {"eval", 0}}}, errs: []string{
			`type: "service"; allowed: "batch"`,
			`group "worker": count: 2; allowed: 0`,
			`group "eval": meta.nomad_gpu_gang_members: -1; allowed: 1 or more`,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec, gang, err := ParseSpec(gangJob(c.edit))
			if gang != c.gang || !reflect.DeepEqual(spec, c.spec) {
				t.Errorf("ParseSpec = %+v, %v; want %+v, %v", spec, gang, c.spec, c.gang)
			}
			var lines []string
			if err != nil {
				lines = strings.Split(err.Error(), "\n")
			}
			if len(lines) != len(c.errs) {
				t.Fatalf("errors:\n%v\nwant %d:\n%s", err, len(c.errs), strings.Join(c.errs, "\n"))
			}
			for i, w := range c.errs {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("error %d: %s\nwant %s", i, lines[i], w)
				}
			}
			if err != nil {
				var fe *FieldError
				if !errors.As(err, &fe) {
					t.Errorf("%v is no *FieldError", err)
				}
			}
		})
	}
}

func TestSpecMembers(t *testing.T) {
	if n := (Spec{Groups: []Group{{"a", 2}, {"b", 3}}}).Members(); n != 5 {
		t.Errorf("Members = %d, want 5", n)
	}
}
