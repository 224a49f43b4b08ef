// Package supervisor runs a task under its own supervisor process so that the
// task outlives the driver plugin and the Nomad client (which restart
// independently of their tasks, and reattach from state they kept), and its
// exit status is never lost, even when nobody was watching when it ended.
//
// A small binary (or the plugin binary itself) is the supervisor: main
// dispatches "supervise", "shim" and "exec-shim" through Dispatch. Process
// tree of one task:
//
//	plugin ──(Start, detached, own session)──▶ supervisor (subreaper; init of the task's PID namespace)
//	                                              └─▶ shim ─exec─▶ task (own session, own mount namespace)
//
// With a private PID namespace the shim builds the task's mount namespace
// (its /proc, /tmp, /dev/shm, the masked MPS pipe root), then confines itself
// with Landlock, drops to the task's user and execs. Every pid on disk is a
// host pid with its start time and boot ID.
//
// Everything needed to re-attach lives in the state dir, so Recover works
// from a fresh plugin process with nothing but the dir's path:
//
//	<StateDir>/            0700
//	  spec.json            Spec, written by Start
//	  supervisor.json      supervisor identity, written by the supervisor
//	  task.json            task identity + start time, written once the task exec'd
//	  exit.json            exit code/signal/finished_at, written when the task exited
//	  supervisor.log       supervisor's own log (also its stderr, so runtime crashes land there)
package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nomad-gpu/nomad-gpu/driver/procfs"
	"github.com/nomad-gpu/nomad-gpu/internal/atomicfile"
)

// Spec is everything the supervisor needs to run one task. It is written to
// spec.json so that the supervisor and a restarted plugin both see it.
type Spec struct {
	TaskID string `json:"task_id"`
	// StateDir holds spec.json, pid files, exit.json and supervisor.log;
	// the plugin chooses it and must keep it unique per task attempt.
	StateDir string `json:"state_dir"`
	// Executable implements the "supervise" and "shim" sub-commands
	// (the plugin passes os.Executable()).
	Executable string   `json:"executable"`
	Command    string   `json:"command"`
	Args       []string `json:"args,omitempty"`
	// Env is the complete task environment (KEY=VALUE); nothing of the
	// plugin's or supervisor's environment leaks into the task.
	Env    []string `json:"env,omitempty"`
	Dir    string   `json:"dir,omitempty"`
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	// SetUser false keeps the supervisor's uid (root).
	SetUser    bool   `json:"set_user"`
	StdoutPath string `json:"stdout_path,omitempty"`
	StderrPath string `json:"stderr_path,omitempty"`
	// CgroupProcsFiles are cgroup.procs files the task joins before exec.
	CgroupProcsFiles []string `json:"cgroup_procs_files,omitempty"`
	// OOMScoreAdj is set for the task whatever the plugin's own is, which
	// the task would otherwise inherit (Nomad clients often run at -1000).
	OOMScoreAdj int `json:"oom_score_adj"`
	// Isolation fences the task off the node's other processes and files.
	Isolation Isolation `json:"isolation"`
}

// ExitStatus is how the task ended. Err is non-empty when the status is
// unknown (supervisor lost) or the task never started; ExitCode is then -1.
type ExitStatus struct {
	ExitCode   int       `json:"exit_code"`
	Signal     int       `json:"signal"`
	FinishedAt time.Time `json:"finished_at"`
	Err        string    `json:"err,omitempty"`
}

// Successful mirrors Nomad's ExitResult.Successful.
func (e ExitStatus) Successful() bool { return e.ExitCode == 0 && e.Signal == 0 && e.Err == "" }

const (
	specFile       = "spec.json"
	supervisorFile = "supervisor.json"
	taskFile       = "task.json"
	exitFile       = "exit.json"
	logFile        = "supervisor.log"
)

// procRecord identifies a process safely against pid reuse and reboots (pid,
// start time in clock ticks since boot, boot ID), always by its pid in the
// host's PID namespace, which is where the plugin looks.
type procRecord struct {
	procfs.Identity
	StartedAt time.Time `json:"started_at"`
}

// exitRecord is exit.json. OOMKilled is always false here: the plugin knows
// the cgroup and fills it in from memory.events / memory.oom_control.
type exitRecord struct {
	ExitStatus
	OOMKilled bool `json:"oom_killed"`
}

// startReport is the one line the supervisor sends Start through its notify
// pipe: either the task is running or why it is not.
type startReport struct {
	Task  *procRecord `json:"task,omitempty"`
	Error string      `json:"error,omitempty"`
	// Permanent: the same spec would fail the same way again (bad command,
	// working directory), so restarting the task cannot help.
	Permanent bool `json:"permanent,omitempty"`
}

// StartError is why Start could not start a task.
type StartError struct {
	Msg       string
	Permanent bool
}

func (e *StartError) Error() string { return e.Msg }

// writeJSONAtomic replaces path with v's JSON so readers never see a partial
// file, even if the writer is killed mid-way.
func writeJSONAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	// exit.json is the only record of an exit code once the task is gone.
	return atomicfile.Write(path, append(b, '\n'), 0o600)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func readSpec(dir string) (Spec, error) {
	var s Spec
	if err := readJSON(filepath.Join(dir, specFile), &s); err != nil {
		return Spec{}, fmt.Errorf("read task spec: %w", err)
	}
	return s, nil
}

// readExit returns ok=false when exit.json does not exist.
func readExit(dir string) (ExitStatus, bool, error) {
	var r exitRecord
	err := readJSON(filepath.Join(dir, exitFile), &r)
	if errors.Is(err, os.ErrNotExist) {
		return ExitStatus{}, false, nil
	}
	if err != nil {
		return ExitStatus{}, false, err
	}
	return r.ExitStatus, true, nil
}

// capWriter keeps the supervisor log bounded: a task that lives for months
// must not grow it without limit. It keeps the beginning, which holds the
// start-up story, and drops the rest.
type capWriter struct {
	w       io.Writer
	left    int
	dropped bool
}

func (c *capWriter) Write(p []byte) (int, error) {
	if c.left <= 0 {
		if !c.dropped {
			c.dropped = true
			c.w.Write([]byte("... supervisor log size limit reached, further lines dropped\n"))
		}
		return len(p), nil
	}
	n := len(p)
	if n > c.left {
		p = p[:c.left]
	}
	c.left -= len(p)
	if _, err := c.w.Write(p); err != nil {
		return 0, err
	}
	return n, nil
}
