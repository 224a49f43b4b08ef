package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/driver/landlock"
)

// Probe is what this node can do to isolate tasks, found by trying it the
// way a task start does, so the fingerprint never promises what a start
// would then fail to deliver.
type Probe struct {
	// PIDNamespace: a private PID namespace with its own /proc can be made.
	PIDNamespace      bool   `json:"pid_namespace"`
	PIDNamespaceError string `json:"pid_namespace_error,omitempty"`
	// LandlockABI is the kernel's Landlock ABI version, 0 without Landlock.
	LandlockABI   int    `json:"landlock_abi"`
	LandlockError string `json:"landlock_error,omitempty"`
}

// ProbeIsolation runs executable's "probe-isolation" sub-command in fresh
// PID and mount namespaces, as the supervisor and shim of a task would be.
func ProbeIsolation(ctx context.Context, executable string) Probe {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, executable, "probe-isolation")
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	var p Probe
	if err := cmd.Run(); err != nil {
		p.PIDNamespaceError = fmt.Sprintf("cannot create PID and mount namespaces: %v", err)
		if s := strings.TrimSpace(stderr.String()); s != "" {
			p.PIDNamespaceError += ": " + s
		}
		p.LandlockABI, p.LandlockError = landlockStatus()
		return p
	}
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		p = Probe{PIDNamespaceError: fmt.Sprintf("isolation probe answered %q: %v", out.String(), err)}
		p.LandlockABI, p.LandlockError = landlockStatus()
	}
	return p
}

func landlockStatus() (int, string) {
	abi, err := landlock.Status()
	if err != nil {
		return 0, err.Error()
	}
	return abi, ""
}

// RunProbe is the "probe-isolation" sub-command: it makes the mounts a task
// start makes and prints a Probe as JSON.
func RunProbe(_ []string) int {
	var p Probe
	switch {
	case os.Getpid() != 1:
		p.PIDNamespaceError = "the probe was not started in a PID namespace of its own"
	default:
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
			p.PIDNamespaceError = fmt.Sprintf("cannot make mounts private: %v", err)
		} else if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			p.PIDNamespaceError = fmt.Sprintf("cannot mount a /proc of its own: %v", err)
		} else {
			p.PIDNamespace = true
		}
	}
	p.LandlockABI, p.LandlockError = landlockStatus()
	b, _ := json.Marshal(p)
	os.Stdout.Write(b)
	return 0
}
