package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Shim exit codes, shell-style; the supervisor reports the message, so they
// only matter to someone reading ps or the log.
const (
	shimSetupFailed = 125
	shimNotExec     = 126
	shimNotFound    = 127
)

// defaultPath is used when the task environment has no PATH, as a shell would.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// RunShim is the "shim <statedir>" sub-command, run by the supervisor as the
// task's first process (same pid, new session). Still root, it joins the
// task's cgroups so the task is accounted from its first instruction, sets
// oom_score_adj, builds the task's mount namespace, drops privileges,
// confines itself with Landlock and execs the command. On failure it writes
// the reason to the exec-status pipe and exits non-zero; it never returns on
// success.
func RunShim(args []string) int {
	status := inheritedPipe()
	fail := func(code int, err error) int {
		se, ok := err.(*StartError)
		if !ok {
			se = &StartError{Msg: err.Error()}
		}
		if status != nil {
			b, _ := json.Marshal(shimStatus{se})
			status.Write(b)
		}
		// Also on the task's stderr, so it shows in the task's logs.
		fmt.Fprintf(os.Stderr, "nomad-driver-gpu: %s\n", se.Msg)
		return code
	}
	if len(args) != 1 {
		return fail(shimSetupFailed, errors.New("usage: shim <statedir>"))
	}
	spec, err := readSpec(args[0])
	if err != nil {
		return fail(shimSetupFailed, err)
	}

	// Exec keeps ignored signals ignored and resets handled ones to default.
	// Handling every signal here gives the task a clean default disposition
	// whatever the plugin or Nomad inherited (e.g. SIGHUP ignored by nohup).
	signal.Notify(make(chan os.Signal, 1))

	if err := joinAccounting(spec); err != nil {
		return fail(shimSetupFailed, err)
	}
	if spec.Isolation.PrivatePID {
		if err := setupMounts(spec.Isolation); err != nil {
			return fail(shimSetupFailed, err)
		}
	}
	// Confined while still root, so that the rules' paths are opened with
	// root's access; the domain stays through the change of user.
	if err := confine(spec.Isolation); err != nil {
		return fail(shimSetupFailed, err)
	}
	if err := becomeUser(spec); err != nil {
		return fail(shimSetupFailed, err)
	}
	path, err := lookPath(spec.Command, envValue(spec.Env, "PATH"))
	if err != nil {
		return fail(shimNotFound, &StartError{Msg: err.Error(), Permanent: true})
	}
	argv := append([]string{spec.Command}, spec.Args...)
	err = syscall.Exec(path, argv, nonNil(spec.Env))
	code := shimNotExec
	if errors.Is(err, fs.ErrNotExist) {
		code = shimNotFound
	}
	return fail(code, &StartError{Msg: execError(spec.Command, path, err, spec.Isolation), Permanent: true})
}

// joinAccounting puts the calling process in the task's cgroups, so it is
// accounted from its first instruction, and gives it the task's
// oom_score_adj; both before dropping privileges (lowering the score needs
// CAP_SYS_RESOURCE) and while /proc is still the host's.
func joinAccounting(spec Spec) error {
	pid := []byte(strconv.Itoa(os.Getpid()))
	for _, procs := range spec.CgroupProcsFiles {
		if err := writeExisting(procs, pid); err != nil {
			return fmt.Errorf("join cgroup %s: %v", filepath.Dir(procs), err)
		}
	}
	if err := writeExisting("/proc/self/oom_score_adj", []byte(strconv.Itoa(spec.OOMScoreAdj))); err != nil {
		return fmt.Errorf("set oom_score_adj %d: %v", spec.OOMScoreAdj, err)
	}
	return nil
}

// becomeUser drops to the task's user and enters its working directory.
// A directory the user cannot enter fails the same way on every restart.
func becomeUser(spec Spec) error {
	if spec.SetUser {
		if err := dropPrivileges(spec.UID, spec.GID, spec.Groups); err != nil {
			return err
		}
	}
	// After dropping privileges, so a directory the user cannot enter is
	// reported instead of silently entered as root.
	if spec.Dir != "" {
		if err := os.Chdir(spec.Dir); err != nil {
			return &StartError{Msg: fmt.Sprintf("working directory %q: %v", spec.Dir, errText(err)), Permanent: true}
		}
	}
	return nil
}

func nonNil(env []string) []string {
	if env == nil {
		return []string{}
	}
	return env
}

func writeExisting(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// dropPrivileges switches to uid/gid/groups in the only safe order: groups
// and gid need privileges that setuid gives up.
func dropPrivileges(uid, gid uint32, groups []uint32) error {
	if uint32(os.Getuid()) == uid && uint32(os.Getgid()) == gid {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("cannot run the task as uid %d: the supervisor runs as uid %d, not root", uid, os.Geteuid())
	}
	gs := make([]int, len(groups))
	for i, g := range groups {
		gs[i] = int(g)
	}
	// Always called, even with no groups: it drops root's own supplementary groups.
	if err := syscall.Setgroups(gs); err != nil {
		return fmt.Errorf("setgroups %v: %w", groups, err)
	}
	if err := syscall.Setgid(int(gid)); err != nil {
		return fmt.Errorf("setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(int(uid)); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	return nil
}

// lookPath is exec.LookPath with the task's PATH rather than ours, evaluated
// as the task user in the task's working directory.
func lookPath(cmd, pathEnv string) (string, error) {
	if cmd == "" {
		return "", errors.New("no command given")
	}
	if strings.Contains(cmd, "/") {
		if err := checkExecutable(cmd); err != nil {
			return "", fmt.Errorf("command %q: %v", cmd, errText(err))
		}
		return cmd, nil
	}
	if pathEnv == "" {
		pathEnv = defaultPath
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, cmd)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q: executable file not found in $PATH (PATH=%s)", cmd, pathEnv)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return syscall.EISDIR
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fs.ErrPermission
	}
	return nil
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		// The first one wins, as in getenv(3).
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			return val
		}
	}
	return ""
}

// errText strips the *PathError wrapping so messages read
// `command "/no/such": no such file or directory` without repeating the path.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
