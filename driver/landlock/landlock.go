// Package landlock confines a task's filesystem view with Landlock, as
// unveil-style rules "<modes>:<path>" from the jobspec: the shim calls
// RestrictThread as its last step before syscall.Exec, so the domain binds the
// exec'd program and never the shim's other threads nor the plugin.
//
// It uses go-landlock's low-level landlock/syscall package rather than its
// Config.RestrictPaths, because RestrictPaths confines every thread of the
// process (through psx, or TSYNC from ABI 8) where only the thread that execs
// must be, and its best-effort downgrade (also behind Config.NewRulesetFD) can
// neither report a skipped path nor choose file or directory rights from the
// descriptor actually added, and on ABI 1 a rule granting REFER makes it
// enforce nothing at all. So the per-ABI masking here is ours, and a test
// holds it to the library's per-ABI tables.
//
// Handled: every filesystem right of ABI 1 to 7, whatever newer ABI the
// kernel has. ABI 9's RESOLVE_UNIX (connecting to pathname unix sockets) is
// left unhandled for the same reason as abstract unix sockets are left
// unscoped: GPU and MPI stacks rendezvous over unix sockets of both kinds
// (the CUDA MPS control socket, NCCL's IPC handle exchange, PMIx), between
// processes that need not share the task's domain (the MPS daemon, a
// launcher, another task), and a pathname socket is still guarded by its
// file's permissions. Signals are scoped where the kernel can (ABI 6
// with the fix that lets threads of one process signal each other), so a task
// cannot signal processes outside its domain, its supervisor included. The
// network is not restricted.
package landlock

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Access is a set of unveil modes.
type Access uint8

const (
	Read Access = 1 << iota
	Write
	Exec
)

const allAccess = Read | Write | Exec

// modes lists the letters in the order String writes them, so that
// ParseRule(r.String()) round-trips.
var modes = [...]struct {
	letter byte
	access Access
}{{'r', Read}, {'w', Write}, {'x', Exec}}

// String writes a in the jobspec's mode letters, e.g. "rx".
func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	if a&^allAccess != 0 {
		return fmt.Sprintf("Access(%#x)", uint8(a))
	}
	var b []byte
	for _, m := range modes {
		if a&m.access != 0 {
			b = append(b, m.letter)
		}
	}
	return string(b)
}

// Rule allows Access beneath Path (a directory: everything under it; a file,
// e.g. a device node: that file only).
type Rule struct {
	Path   string `json:"path"`
	Access Access `json:"access"`
}

// String writes r in the jobspec's unveil syntax.
func (r Rule) String() string { return r.Access.String() + ":" + r.Path }

// ParseRule parses the jobspec's unveil syntax "<modes>:<path>", modes a
// non-empty subset of "rwx" and path absolute and clean.
func ParseRule(s string) (Rule, error) {
	// Modes never hold a colon, paths may.
	ms, path, ok := strings.Cut(s, ":")
	if !ok || !strings.HasPrefix(path, "/") {
		return Rule{}, fmt.Errorf(`%q: want "<modes>:<absolute path>", e.g. "r:/data/models"`, s)
	}
	if ms == "" {
		return Rule{}, fmt.Errorf(`%q: no modes before ":", want a non-empty subset of "rwx"`, s)
	}
	var a Access
	for i := 0; i < len(ms); i++ {
		m := modeOf(ms[i])
		if m == 0 {
			return Rule{}, fmt.Errorf(`%q: unknown mode %q, want a subset of "rwx"`, s, ms[i])
		}
		if a&m != 0 {
			return Rule{}, fmt.Errorf("%q: mode %q given twice", s, ms[i])
		}
		a |= m
	}
	if strings.IndexByte(path, 0) >= 0 {
		return Rule{}, fmt.Errorf("%q: path holds a NUL byte", s)
	}
	if c := filepath.Clean(path); c != path {
		return Rule{}, fmt.Errorf("%q: path %q is not clean, want %q", s, path, c)
	}
	return Rule{Path: path, Access: a}, nil
}

func modeOf(c byte) Access {
	for _, m := range modes {
		if m.letter == c {
			return m.access
		}
	}
	return 0
}

// Allows says whether rules grant every mode of a at path, as the kernel
// would: the rights of every rule whose path is path or a directory above
// it add up. Rules bind the file their path resolved to when they were
// added, so symlinks are resolved on both sides where they can be.
func Allows(rules []Rule, path string, a Access) bool {
	target := realPath(path)
	var granted Access
	for _, r := range rules {
		if beneath(target, realPath(r.Path)) {
			granted |= r.Access
		}
	}
	return granted&a == a
}

// realPath resolves the symlinks of p's longest existing prefix.
func realPath(p string) string {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	parent := filepath.Dir(p)
	if parent == p {
		return p
	}
	return filepath.Join(realPath(parent), filepath.Base(p))
}

// beneath: p is dir or below it.
func beneath(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// validate catches rules that did not come through ParseRule, so a caller
// building them by hand gets the same guarantees.
func (r Rule) validate() error {
	if r.Access == 0 || r.Access&^allAccess != 0 {
		return fmt.Errorf("landlock: rule for %q: access %v, want a non-empty subset of rwx", r.Path, r.Access)
	}
	if !filepath.IsAbs(r.Path) || strings.IndexByte(r.Path, 0) >= 0 {
		return fmt.Errorf("landlock: rule %q: want an absolute path", r.String())
	}
	return nil
}

// Options are the parts of a Landlock domain beyond its filesystem rules.
type Options struct {
	// ScopeSignals keeps the task from signalling any process outside its
	// domain (ABI 6 and later). Where the task has a PID namespace of its
	// own that adds nothing, and it would keep `nomad alloc exec`
	// sessions, which get a domain of their own, from signalling the task.
	ScopeSignals bool
}
