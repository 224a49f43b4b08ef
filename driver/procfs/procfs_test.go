package procfs

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadStatAndAlive(t *testing.T) {
	self, err := ReadStat(os.Getpid())
	if err != nil || self.StartTicks == 0 || self.Dead() || self.PPID != os.Getppid() {
		t.Fatalf("self stat %+v, %v", self, err)
	}
	cases := []struct {
		name  string
		pid   int
		ticks uint64
		want  bool
	}{
		{"this process", os.Getpid(), self.StartTicks, true},
		{"a recycled pid (other start time)", os.Getpid(), self.StartTicks + 1, false},
		{"no pid", 0, 0, false},
		{"gone", 1 << 30, 0, false},
	}
	for _, c := range cases {
		if got := Alive(c.pid, c.ticks); got != c.want {
			t.Errorf("%s: Alive = %v, want %v", c.name, got, c.want)
		}
	}
	if v, ok := Env(os.Getpid(), "PATH"); !ok || v == "" {
		t.Errorf("Env PATH = %q, %v", v, ok)
	}
}

// An exited child nobody has waited for is a zombie: dead, though /proc
// still lists it and signal 0 still reaches it.
func TestZombieIsDead(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer cmd.Wait()
	st, _ := ReadStat(cmd.Process.Pid)
	for deadline := time.Now().Add(5 * time.Second); !st.Dead() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		st, _ = ReadStat(cmd.Process.Pid)
	}
	if !st.Dead() || Alive(cmd.Process.Pid, st.StartTicks) {
		t.Fatalf("exited child: %+v, Alive=%v", st, Alive(cmd.Process.Pid, st.StartTicks))
	}
}

func TestBootID(t *testing.T) {
	raw, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skip(err)
	}
	b := BootID()
	if b == "" || b != strings.TrimSpace(string(raw)) || strings.ContainsAny(b, " \n") {
		t.Fatalf("BootID() = %q; file says %q", b, raw)
	}
	if BootID() != b {
		t.Fatal("BootID changed between calls")
	}
}

func TestIdentity(t *testing.T) {
	self, err := Identify(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	st, _ := ReadStat(os.Getpid())
	if self.PID != os.Getpid() || self.StartTicks != st.StartTicks || self.BootID != BootID() {
		t.Fatalf("Identify(self) = %+v; stat %+v, boot %q", self, st, BootID())
	}
	if BootID() == "" {
		t.Log("this kernel offers no boot ID; the boot cases below all count as this boot")
	}
	cases := []struct {
		name string
		id   Identity
		want bool
	}{
		{"this process", self, true},
		{"a record from before boot IDs (empty) counts as this boot", Identity{PID: self.PID, StartTicks: self.StartTicks}, true},
		{"another boot, same pid and ticks", Identity{PID: self.PID, StartTicks: self.StartTicks, BootID: "0f0f0f0f-0000-4000-8000-000000000000"}, BootID() == ""},
		{"a recycled pid (other start time)", Identity{PID: self.PID, StartTicks: self.StartTicks + 1, BootID: self.BootID}, false},
		{"no pid", Identity{}, false},
		{"gone", Identity{PID: 1 << 30, BootID: self.BootID}, false},
	}
	for _, c := range cases {
		if got := c.id.Alive(); got != c.want {
			t.Errorf("%s: %+v.Alive() = %v, want %v", c.name, c.id, got, c.want)
		}
	}
	for _, pid := range []int{0, -1, 1 << 30} {
		if id, err := Identify(pid); err == nil {
			t.Errorf("Identify(%d) = %+v, nil; want an error", pid, id)
		}
	}
}

// Records written before the boot ID existed read back as this boot's.
func TestIdentityJSON(t *testing.T) {
	tests := []struct {
		in   string
		want Identity
	}{
		{`{"pid":42,"start_ticks":7}`, Identity{PID: 42, StartTicks: 7}},
		{`{"pid":42,"start_ticks":7,"boot_id":"b"}`, Identity{PID: 42, StartTicks: 7, BootID: "b"}},
	}
	for _, tc := range tests {
		var got Identity
		if err := json.Unmarshal([]byte(tc.in), &got); err != nil || got != tc.want {
			t.Errorf("Unmarshal(%s) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		b, _ := json.Marshal(tc.want)
		var back Identity
		if err := json.Unmarshal(b, &back); err != nil || back != tc.want {
			t.Errorf("round trip of %+v: %s → %+v, %v", tc.want, b, back, err)
		}
	}
}

func TestZombieIdentityIsDead(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer cmd.Wait()
	id, err := Identify(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for id.Alive() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if id.Alive() {
		t.Fatalf("exited child %+v still Alive", id)
	}
	if _, err := Identify(cmd.Process.Pid); err != nil {
		t.Errorf("Identify(zombie): %v; a zombie still has an identity", err)
	}
}

// A shell has the default disposition for SIGUSR1 until it traps it, and
// SIGTERM ignored when it inherits it ignored.
func TestSignalDisposition(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", `trap '' TERM; read -r x < "$1/go"; trap 'exit 0' USR1; : > "$1/trapped"; read -r x < "$1/go2"`, "sh", dir)
	for _, f := range []string{"go", "go2"} {
		if err := syscall.Mkfifo(dir+"/"+f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	until := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s in 10s", what)
			}
		}
	}
	until("TERM ignored", func() bool { d, _ := SignalDisposition(pid, syscall.SIGTERM); return d == SignalIgnored })
	if d, err := SignalDisposition(pid, syscall.SIGUSR1); err != nil || d != SignalDefault {
		t.Errorf("USR1 before its trap: %v, %v; want default", d, err)
	}
	// Let it trap USR1.
	go func() {
		f, err := os.OpenFile(dir+"/go", os.O_WRONLY, 0)
		if err == nil {
			f.WriteString("\n")
			f.Close()
		}
	}()
	until("trap", func() bool { _, err := os.Stat(dir + "/trapped"); return err == nil })
	if d, err := SignalDisposition(pid, syscall.SIGUSR1); err != nil || d != SignalCaught {
		t.Errorf("USR1 trapped: %v, %v; want caught", d, err)
	}
	if _, err := SignalDisposition(1<<30, syscall.SIGUSR1); err == nil {
		t.Error("no such process: no error")
	}
	if _, err := SignalDisposition(pid, 0); err == nil {
		t.Error("signal 0: no error")
	}
}
