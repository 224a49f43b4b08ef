package driver

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// FuzzTaskState feeds arbitrary bytes to the decoders of what Nomad and the
// disk give back to a restarted plugin: the handle's driver state and a
// task's journal. They never panic, and what they accept survives a round
// trip unchanged and names nothing that is not one path component.
func FuzzTaskState(f *testing.F) {
	started := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	for _, st := range []driverState{
		{Version: taskStateVersion, StartedAt: started, User: "nobody"},
		{Version: 1, StateDir: "/var/lib/nomad-gpu/driver/tasks/a.t.x", CgroupPaths: []string{"/sys/fs/cgroup/memory/nomad-gpu/a.t"},
			MPSGPUs: []string{"GPU-1"}, DeviceEnv: map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-1"}, User: "ml",
			MIGCaps: []capGrant{{Path: "/dev/nvidia-caps/nvidia-cap21", UID: 0, Mode: 0o400}}},
	} {
		b, _ := json.Marshal(st)
		f.Add(b, "a.t.x")
		f.Add(b[:len(b)/2], "a.t.x")
	}
	for _, j := range []journal{
		{Version: journalVersion, TaskID: "a/t/x", AllocID: "a", TaskName: "t", CgroupRoot: "nomad-gpu", CgroupName: "a.t", Committed: true},
		{Version: journalVersion, TaskID: "../..", CgroupRoot: "..", CgroupName: "a/b"},
	} {
		b, _ := json.Marshal(j)
		f.Add(b, "a.t.x")
	}
	f.Add([]byte(`{"version": 1e999}`), "")
	f.Add([]byte(`{"version": 2, "started_at": "not a time"}`), "x")
	f.Fuzz(func(t *testing.T, b []byte, dirName string) {
		if st, err := decodeState(b); err == nil {
			again, err := decodeState(st.encode())
			if err != nil {
				t.Fatalf("re-encoded state refused: %v", err)
			}
			if !st.StartedAt.Equal(again.StartedAt) || !reflect.DeepEqual(st.CgroupPaths, again.CgroupPaths) || st.User != again.User || st.StateDir != again.StateDir {
				t.Fatalf("state changed across a round trip: %+v → %+v", st, again)
			}
		}
		if j, err := decodeJournal(b, dirName); err == nil {
			if stateDirName(j.TaskID) != dirName || !validName(j.CgroupRoot) || !validName(j.CgroupName) {
				t.Fatalf("journal accepted with task %q in dir %q, cgroup %q/%q", j.TaskID, dirName, j.CgroupRoot, j.CgroupName)
			}
		}
	})
}
