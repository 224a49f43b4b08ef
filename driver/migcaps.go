package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nomad-gpu/nomad-gpu/wire/drivers"
)

// capsDir holds the MIG capability device nodes (/dev/nvidia-caps/nvidia-capN)
// that gate access to a GPU and compute instance; a variable for tests.
var capsDir = "/dev/nvidia-caps"

// capGrant records a capability node handed to a task's user, so the grant
// can be taken back when the task goes.
type capGrant struct {
	Path string `json:"path"`
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Mode uint32 `json:"mode"`
}

// grantMIGCaps lets a non-root task open the capability nodes of the MIG
// instance it holds. A MIG instance belongs to one task at a time, so the
// nodes of that instance are given to the task's user for its lifetime;
// nodes it can already read are left alone.
func grantMIGCaps(devices []drivers.DeviceConfig, uid, gid uint32) ([]capGrant, error) {
	var grants []capGrant
	for _, d := range devices {
		p := filepath.Clean(d.HostPath)
		if !strings.HasPrefix(p, capsDir+"/") {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			revokeMIGCaps(grants)
			return nil, fmt.Errorf("MIG capability %s: %v", p, err)
		}
		if uid == 0 || st.Mode&0o004 != 0 || (st.Uid == uid && st.Mode&0o400 != 0) {
			continue
		}
		g := capGrant{Path: p, UID: st.Uid, GID: st.Gid, Mode: st.Mode & 0o7777}
		if err := os.Chown(p, int(uid), int(gid)); err != nil {
			revokeMIGCaps(grants)
			return nil, fmt.Errorf("MIG capability %s: giving it to uid %d: %v", p, uid, err)
		}
		if err := os.Chmod(p, os.FileMode(g.Mode|0o400)); err != nil {
			_ = os.Chown(p, int(g.UID), int(g.GID))
			revokeMIGCaps(grants)
			return nil, fmt.Errorf("MIG capability %s: %v", p, err)
		}
		grants = append(grants, g)
	}
	return grants, nil
}

// revokeMIGCaps restores owners and modes; best effort, since the node may
// be gone with the instance.
func revokeMIGCaps(grants []capGrant) {
	for _, g := range grants {
		_ = os.Chown(g.Path, int(g.UID), int(g.GID))
		_ = os.Chmod(g.Path, os.FileMode(g.Mode))
	}
}
