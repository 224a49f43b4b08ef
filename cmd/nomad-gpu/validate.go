package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/controller/gang"
	"github.com/nomad-gpu/nomad-gpu/controller/queues"
	"github.com/nomad-gpu/nomad-gpu/driver"
)

func init() {
	register("validate", command{
		summary: "check each gpu task's driver config, and a gang's conventions, in jobspecs before they are submitted",
		run:     runValidate,
	})
}

const validateUsage = `usage: nomad-gpu validate [flags] JOBSPEC...

Checks the config block of every task with driver = "gpu" in each
JOBSPEC ("-" reads stdin) against the gpu driver's schema and rules: a key
it does not know, a value of the wrong type or out of range. nomad job
validate passes such a config, and the agent reports it only when the
task is placed on a GPU node. A gang (job meta nomad_gpu_gang = "true")
is checked against the gang conventions too: batch, each group with GPUs
at count 0 with meta nomad_gpu_gang_members, no restarts or reschedules,
a port labelled rendezvous in the first member group. Job meta
nomad_gpu_after (the jobs it waits for) is checked too, and only a held
job (a gang, of one member or more) may set it. Each error names
the job, group and task, the key path and what is allowed; the exit
status is 1 when any has one, 0 when all pass. It changes nothing.

The jobspec is parsed by the Nomad agent (its /v1/jobs/parse endpoint,
as nomad job run -output does), so HCL2 functions and variables work as
they do at submission.

Connection: NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION and the TLS variables,
as the nomad CLI reads them; the flags override them.

Flags:
`

// stringsFlag collects a flag given several times.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

type validateOptions struct {
	nomadConn
	vars, varFiles stringsFlag
	specs          []string
}

var varNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

func parseValidateFlags(args []string, stderr io.Writer) (*validateOptions, error) {
	o := &validateOptions{}
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, validateUsage)
		fs.PrintDefaults()
	}
	o.addFlags(fs, "")
	fs.Var(&o.vars, "var", "an HCL2 variable, key=value, as nomad job run -var (repeatable)")
	fs.Var(&o.varFiles, "var-file", "an HCL2 variables file, as nomad job run -var-file (repeatable)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() == 0 {
		return nil, errors.New("name a jobspec: nomad-gpu validate [flags] JOBSPEC [JOBSPEC ...] (- reads stdin)")
	}
	for _, v := range o.vars {
		k, _, ok := strings.Cut(v, "=")
		if !ok || !varNameRe.MatchString(k) {
			return nil, fmt.Errorf("-var %q: allowed: key=value, the key a variable name (letters, digits, _ and -, not first a digit)", v)
		}
	}
	o.specs = fs.Args()
	return o, nil
}

// variables is the -var-file files' content, then each -var as a line of
// a variables file: the agent reads them as nomad job run's -var-file and
// -var (a value is a string, which HCL converts to the variable's type).
func (o *validateOptions) variables() (string, error) {
	var b strings.Builder
	for _, f := range o.varFiles {
		src, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("-var-file: %v", err)
		}
		b.Write(src)
		b.WriteString("\n")
	}
	for _, v := range o.vars {
		k, val, _ := strings.Cut(v, "=")
		fmt.Fprintf(&b, "%s = %s\n", k, strconv.Quote(val))
	}
	return b.String(), nil
}

func runValidate(args []string, stdout, stderr io.Writer) int {
	o, err := parseValidateFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "nomad-gpu validate: %v\n", err)
			return 2
		}
		return 0
	}
	vars, err := o.variables()
	if err != nil {
		fmt.Fprintf(stderr, "nomad-gpu validate: %v\n", err)
		return 2
	}
	client, err := api.NewClient(o.config())
	if err != nil {
		fmt.Fprintf(stderr, "nomad-gpu validate: %v\n", err)
		return 1
	}
	code := 0
	for _, spec := range o.specs {
		src, err := readSpec(spec)
		if err != nil {
			fmt.Fprintf(stderr, "nomad-gpu validate: %v\n", err)
			code = 1
			continue
		}
		job, err := client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: src, Variables: vars})
		if err != nil {
			fmt.Fprintf(stderr, "%s: the agent at %s could not parse it: %v\n", spec, client.Address(), err)
			code = 1
			continue
		}
		problems, tasks := validateGPUTasks(job)
		gangProblems, members := validateGang(job)
		problems = append(problems, gangProblems...)
		problems = append(problems, validateAfter(job)...)
		for _, p := range problems {
			fmt.Fprintf(stderr, "%s: %s\n", spec, p)
		}
		if len(problems) > 0 {
			code = 1
			continue
		}
		if members > 0 {
			fmt.Fprintf(stdout, "%s: %d gpu task(s) valid; a gang of %d members\n", spec, tasks, members)
			continue
		}
		fmt.Fprintf(stdout, "%s: %d gpu task(s) valid\n", spec, tasks)
	}
	return code
}

func readSpec(path string) (string, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// validateGPUTasks checks the config of each task of job that the gpu
// driver runs; it returns one line per task in error, naming it, and how
// many gpu tasks it checked.
func validateGPUTasks(job *api.Job) (problems []string, tasks int) {
	id := ""
	if job.ID != nil {
		id = *job.ID
	}
	for _, g := range job.TaskGroups {
		group := ""
		if g.Name != nil {
			group = *g.Name
		}
		for _, t := range g.Tasks {
			if t.Driver != "gpu" {
				continue
			}
			tasks++
			if err := driver.ValidateTaskConfig(t.Config); err != nil {
				problems = append(problems, fmt.Sprintf("job %q group %q task %q: %v", id, group, t.Name, err))
			}
		}
	}
	return problems, tasks
}

// validateGang checks job's gang conventions (gang.ParseSpec): one line
// per broken rule, naming the job, the group where it is one's, the key
// path and what is allowed; and the gang's members (0 when job is no
// gang).
func validateGang(job *api.Job) (problems []string, members int) {
	spec, isGang, err := gang.ParseSpec(job)
	id := ""
	if job.ID != nil {
		id = *job.ID
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var fe *gang.FieldError
		switch {
		case e == nil:
		case errors.As(e, &fe) && fe.Group != "":
			problems = append(problems, fmt.Sprintf("job %q group %q: %s: %s", id, fe.Group, fe.Path, fe.Problem))
		default:
			problems = append(problems, fmt.Sprintf("job %q: %v", id, e))
		}
	}
	if !isGang {
		return problems, 0
	}
	return problems, spec.Members()
}

// validateAfter checks job's meta nomad_gpu_after (queues.ParseAfter),
// and that the job is held: only the controller's gate can keep a job
// from Nomad until its dependencies complete; Nomad places any other at
// once.
func validateAfter(job *api.Job) []string {
	v, ok := job.Meta[contract.MetaAfter]
	if !ok {
		return nil
	}
	id, ns := "", "default"
	if job.ID != nil {
		id = *job.ID
	}
	if job.Namespace != nil && *job.Namespace != "" {
		ns = *job.Namespace
	}
	var problems []string
	if _, err := queues.ParseAfter(ns, id, v); err != nil {
		problems = append(problems, fmt.Sprintf("job %q: %v", id, err))
	}
	if job.Meta[contract.MetaGang] != "true" {
		problems = append(problems, fmt.Sprintf("job %q: meta %s: set on a job that is not held, which Nomad places at once; allowed: a held job (meta %s = \"true\", its GPU groups at count 0 with meta %s)",
			id, contract.MetaAfter, contract.MetaGang, contract.MetaGangMembers))
	}
	return problems
}
