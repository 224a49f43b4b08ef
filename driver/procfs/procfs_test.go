package procfs

import (
	"os"
	"os/exec"
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
