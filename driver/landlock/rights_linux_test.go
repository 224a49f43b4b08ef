package landlock

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// The library's per-ABI tables are the reference for what each ABI knows.
func TestHandledFSMatchesLibrary(t *testing.T) {
	lib := []landlock.Config{landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6, landlock.V7}
	if handledFS(0) != 0 {
		t.Errorf("handledFS(0) = %#x, want 0", handledFS(0))
	}
	for i, c := range lib {
		abi := i + 1
		if got, want := handledFS(abi), uint64(c.HandledAccessFS); got != want {
			t.Errorf("handledFS(%d) = %#x, want the library's %#x", abi, got, want)
		}
	}
	// Newer ABIs add RESOLVE_UNIX, which stays unhandled on purpose.
	for _, abi := range []int{8, 9, 10, 11, 99} {
		if got, want := handledFS(abi), uint64(landlock.V7.HandledAccessFS); got != want {
			t.Errorf("handledFS(%d) = %#x, want ABI 7's %#x", abi, got, want)
		}
	}
}

func TestAllowedFS(t *testing.T) {
	const (
		dir  = unix.S_IFDIR
		reg  = unix.S_IFREG
		chr  = unix.S_IFCHR
		blk  = unix.S_IFBLK
		sock = unix.S_IFSOCK

		rf   = ll.AccessFSReadFile
		rd   = ll.AccessFSReadDir
		wf   = ll.AccessFSWriteFile
		x    = ll.AccessFSExecute
		tr   = ll.AccessFSTruncate
		ref  = ll.AccessFSRefer
		ioc  = ll.AccessFSIoctlDev
		mk   = ll.AccessFSMakeReg | ll.AccessFSMakeDir | ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeSym
		rm   = ll.AccessFSRemoveDir | ll.AccessFSRemoveFile
		dirW = wf | rm | mk
	)
	for _, tc := range []struct {
		a    Access
		typ  uint32
		abi  int
		want uint64
	}{
		{Read, dir, 7, rf | rd},
		{Read, reg, 7, rf},
		{Exec, dir, 7, x},
		{Exec, reg, 7, x},
		{Read | Exec, dir, 1, rf | rd | x},
		{Write, dir, 7, dirW | tr | ref},
		{Write, dir, 3, dirW | tr | ref},
		{Write, dir, 2, dirW | ref},
		{Write, dir, 1, dirW},
		{Write, reg, 7, wf | tr},
		{Write, reg, 2, wf},
		{Read | Write, sock, 7, rf | wf | tr},
		{Read | Write | Exec, dir, 7, rf | rd | x | dirW | tr | ref},
		// Devices: only an explicit character device rule may ioctl.
		{Read, chr, 7, rf | ioc},
		{Write, chr, 5, wf | tr | ioc},
		{Read | Write, chr, 4, rf | wf | tr},
		{Exec, chr, 7, x},
		{Read | Write, blk, 7, rf | wf | tr},
		{Read | Write, dir, 7, rf | rd | dirW | tr | ref},
	} {
		t.Run(fmt.Sprintf("%v/%s/abi%d", tc.a, typeNames[tc.typ], tc.abi), func(t *testing.T) {
			got := allowedFS(tc.a, tc.typ, tc.abi)
			if got != tc.want {
				t.Errorf("allowedFS = %#x, want %#x", got, tc.want)
			}
			if got&^handledFS(tc.abi) != 0 {
				t.Errorf("allowedFS = %#x grants rights ABI %d does not handle", got, tc.abi)
			}
			if got&(ll.AccessFSMakeChar|ll.AccessFSMakeBlock) != 0 {
				t.Errorf("allowedFS = %#x lets the task make device nodes", got)
			}
		})
	}
}

var typeNames = map[uint32]string{
	unix.S_IFDIR: "dir", unix.S_IFREG: "file", unix.S_IFCHR: "chardev", unix.S_IFBLK: "blockdev", unix.S_IFSOCK: "socket",
}

// The kernel is the judge of which rights a rule on each kind of file may
// carry: every ABI up to the running one must build a ruleset it accepts.
// Nothing is enforced, so this runs in the test process itself.
func TestKernelAcceptsRulesets(t *testing.T) {
	kernel := requireLandlock(t)
	tmp := t.TempDir()
	reg := filepath.Join(tmp, "file")
	if err := os.WriteFile(reg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	paths := []string{tmp, reg, "/dev/null"}
	for abi := 1; abi <= min(kernel, 7); abi++ {
		attr := ll.RulesetAttr{HandledAccessFS: handledFS(abi)}
		if abi >= 6 {
			attr.Scoped = ll.ScopeSignal
		}
		fd, err := ll.LandlockCreateRuleset(&attr, 0)
		if err != nil {
			t.Fatalf("ABI %d: create ruleset handling %#x: %v", abi, attr.HandledAccessFS, err)
		}
		for _, p := range paths {
			for a := Read; a <= allAccess; a++ {
				if _, err := addRule(fd, Rule{p, a}, abi); err != nil {
					t.Errorf("ABI %d: %v", abi, err)
				}
			}
		}
		unix.Close(fd)
	}
}

func requireLandlock(t *testing.T) int {
	t.Helper()
	abi, err := Status()
	if err != nil {
		testenv.Skipf(t, testenv.Landlock, "no Landlock on this kernel: %v", err)
	}
	return abi
}
