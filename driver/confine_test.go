package driver

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

func TestMIGCapsGrantedAndRevoked(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	dir := t.TempDir()
	old := capsDir
	capsDir = dir
	t.Cleanup(func() { capsDir = old })
	private := filepath.Join(dir, "nvidia-cap21")
	public := filepath.Join(dir, "nvidia-cap22")
	for p, mode := range map[string]os.FileMode{private: 0o400, public: 0o444} {
		if err := os.WriteFile(p, nil, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
	}
	devs := []drivers.DeviceConfig{{HostPath: private}, {HostPath: public}, {HostPath: "/dev/nvidiactl"}}
	grants, err := grantMIGCaps(devs, 65534, 65534)
	if err != nil {
		t.Fatal(err)
	}
	if len(grants) != 1 || grants[0].Path != private {
		t.Fatalf("grants %+v: want only the node the user cannot read", grants)
	}
	var st syscall.Stat_t
	syscall.Stat(private, &st)
	if st.Uid != 65534 || st.Mode&0o400 == 0 {
		t.Fatalf("after grant: uid %d mode %o", st.Uid, st.Mode&0o777)
	}
	revokeMIGCaps(grants)
	syscall.Stat(private, &st)
	if st.Uid != 0 || st.Mode&0o777 != 0o400 {
		t.Fatalf("after revoke: uid %d mode %o", st.Uid, st.Mode&0o777)
	}
	if _, err := grantMIGCaps([]drivers.DeviceConfig{{HostPath: filepath.Join(dir, "missing")}}, 65534, 65534); err == nil {
		t.Fatal("a missing capability node must fail the start")
	}
}

func TestOOMKillIsReported(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs python3 to allocate memory")
	}
	cfg := e.taskConfig(&TaskConfig{Command: "/usr/bin/python3", Args: []string{"-c", "b = bytearray(256 << 20); import time; time.sleep(5)"}}, nil)
	cfg.Resources.Linux.MemoryLimitBytes = 32 << 20
	if _, _, err := d.StartTask(cfg); err != nil {
		t.Fatal(err)
	}
	res := wait(t, d, cfg.ID, 30*time.Second)
	if !res.OOMKilled || res.Signal != int(syscall.SIGKILL) {
		t.Fatalf("exit %+v: want an OOM kill", res)
	}
	d.DestroyTask(cfg.ID, true)
}

func TestMPSTaskWithoutMPSBinariesFailsClearly(t *testing.T) {
	e := newEnv(t)
	e.cfg.MPS.ControlBinary = "/nonexistent/nvidia-cuda-mps-control"
	d := e.plugin()
	cfg := e.taskConfig(&TaskConfig{Command: "/bin/true"}, map[string]string{
		"CUDA_VISIBLE_DEVICES": "GPU-x", "NOMAD_GPU_SLICE_TYPE": "mps",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1024M",
	})
	_, _, err := d.StartTask(cfg)
	if err == nil || !strings.Contains(err.Error(), "MPS") || !strings.Contains(err.Error(), "/nonexistent/nvidia-cuda-mps-control") {
		t.Fatalf("error %v: want one naming MPS and the missing binary", err)
	}
	if fp := d.fingerprint(); fp.Attributes["driver.gpu.mps"].Text() != "false" || !strings.Contains(fp.HealthDescription, "MPS") {
		t.Fatalf("fingerprint does not say MPS is unavailable: %+v", fp)
	}
}
