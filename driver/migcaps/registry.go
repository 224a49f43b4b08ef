// Package migcaps hands MIG capability device nodes (/dev/nvidia-caps/nvidia-capN)
// to the users of the tasks that hold a MIG instance, and takes them back.
//
// A non-root process can only use a MIG instance if it can open the instance's
// capability nodes: the GPU instance's "access" cap and the compute instance's
// cap. Several tasks can need one node at once (two compute instances of one
// GPU instance share the GPU instance's cap), so a grant cannot belong to a
// task: it belongs to the node, counted over the tasks holding it. The
// Registry is that count, node-wide and on disk, so a restarted plugin still
// knows each node's original owner and who holds it.
//
// # Crash consistency
//
// The plugin can be killed between any two steps. Every step that changes a
// node is bracketed so that whatever is on disk at the moment of the kill
// still leads back to the node's true original:
//
//   - Grant saves the node's original owner and mode, with the task as holder,
//     before it chowns. Had it chowned first, a kill in between would leave a
//     node owned by the task's user with no record of who owned it before: the
//     next Stat would see the task's uid and mistake it for the original,
//     the mistake the record exists to prevent. Saved first, a kill before the
//     chown leaves a record whose "original" is still the node's current state,
//     so replaying it (Grant again) or undoing it (Release) are both right.
//   - Release restores the node before it forgets the record. Forgetting first
//     would lose the original if killed before the restore, leaving the node
//     with the task's user for good. Restored first, a kill before the forget
//     leaves a record whose restore is simply done again: restoring is
//     idempotent.
//   - Removing one holder of several touches nothing on the node, so it is a
//     single save.
//   - The table file is replaced atomically (temp file, fsync, rename, fsync of
//     the directory), so a kill mid-save leaves the old table or the new one,
//     never half of one.
//
// So after a restart every node is either untouched, or recorded with its
// original and at least one holder; reconciling the holders (Grant again for
// tasks that still run, Release for the rest) brings each node to its right
// state.
//
// A record also keeps the node's identity (device, inode, rdev). A node that
// was destroyed and made again with its MIG instance is a different node that
// this package never touched, so it is not "restored" on release.
//
// One Registry must own a table file: it serialises its own callers but does
// not lock the file against another process.
package migcaps

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/internal/atomicfile"
)

// tableVersion is the on-disk format this code writes and understands.
const tableVersion = 1

// ErrHeldByOtherUser is wrapped by Grant's error when a node is held by tasks
// running as a different user than the one asking.
var ErrHeldByOtherUser = errors.New("MIG capability held by tasks of another user")

// Registry is the node's table of capability grants; one per plugin state
// dir. It is safe for concurrent use.
type Registry struct {
	path    string
	capsDir string

	// allowRegular lets regular files stand in for character devices (tests).
	allowRegular bool
	// step, when set, is called between the steps that must survive a kill;
	// tests panic in it to simulate one.
	step func(name string)

	mu  sync.Mutex
	tab *table
}

// table is the file's content.
type table struct {
	Version int              `json:"version"`
	Nodes   map[string]*node `json:"nodes"`
}

// node is one capability node some task holds.
type node struct {
	// Identity of the node when first recorded.
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	Rdev uint64 `json:"rdev"`
	// Grant is set when the registry changed the node's owner; nil when the
	// holders could read the node as it was.
	Grant *grant `json:"grant,omitempty"`
	// Holders maps each holding task to the uid it runs as.
	Holders map[string]uint32 `json:"holders"`
}

// grant is what the registry did to a node and what to put back.
type grant struct {
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Orig attrs  `json:"orig"`
}

// attrs are a node's owner and permission bits.
type attrs struct {
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Mode uint32 `json:"mode"`
}

type option func(*Registry)

// withRegularFiles accepts regular files as capability nodes (tests).
func withRegularFiles() option { return func(r *Registry) { r.allowRegular = true } }

// withStepHook calls f between crash-relevant steps (tests).
func withStepHook(f func(string)) option { return func(r *Registry) { r.step = f } }

// Open loads the table at path, creating it (and its directory) if missing.
// capsDir is the directory capability nodes must live in, normally
// /dev/nvidia-caps; it need not exist yet.
func Open(path, capsDir string) (*Registry, error) {
	return open(path, capsDir)
}

func open(path, capsDir string, opts ...option) (*Registry, error) {
	capsDir = filepath.Clean(capsDir)
	if !filepath.IsAbs(capsDir) {
		return nil, fmt.Errorf("migcaps: capability directory %q is not absolute", capsDir)
	}
	r := &Registry{path: path, capsDir: capsDir}
	for _, o := range opts {
		o(r)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("migcaps: %v", err)
	}
	// Temp files of a save cut short by a kill; the rename never happened,
	// so they hold nothing the table needs.
	if stale, _ := filepath.Glob(filepath.Join(dir, atomicfile.TempPattern(path))); len(stale) > 0 {
		for _, s := range stale {
			_ = os.Remove(s)
		}
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		t := &table{Version: tableVersion, Nodes: map[string]*node{}}
		if err := r.save(t); err != nil {
			return nil, err
		}
		r.tab = t
		return r, nil
	case err != nil:
		return nil, fmt.Errorf("migcaps: %v", err)
	}
	t, err := r.decode(data)
	if err != nil {
		return nil, fmt.Errorf("migcaps: table %s: %w", path, err)
	}
	r.tab = t
	return r, nil
}

func (r *Registry) decode(data []byte) (*table, error) {
	var v struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("unreadable: %v", err)
	}
	switch {
	case v.Version == nil:
		return nil, errors.New(`no "version" field`)
	case *v.Version > tableVersion:
		return nil, fmt.Errorf("version %d is newer than version %d, the newest this plugin understands; "+
			"refusing to guess at the capability grants it records (was the plugin downgraded?)", *v.Version, tableVersion)
	case *v.Version < 1:
		return nil, fmt.Errorf("unknown version %d", *v.Version)
	}
	var t table
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("unreadable: %v", err)
	}
	if t.Nodes == nil {
		t.Nodes = map[string]*node{}
	}
	for p, n := range t.Nodes {
		if _, err := r.checkPath(p); err != nil {
			return nil, err
		}
		if n == nil || len(n.Holders) == 0 {
			return nil, fmt.Errorf("node %s has no holders", p)
		}
		if n.Grant != nil && n.Grant.Orig.Mode&^0o7777 != 0 {
			return nil, fmt.Errorf("node %s: bad original mode %#o", p, n.Grant.Orig.Mode)
		}
	}
	return &t, nil
}

// Grant lets task taskID, running as uid/gid, open every node in paths, all or
// nothing: if it fails, nothing this call granted stays granted (nodes the
// task already held stay held).
//
// A path must name a character device directly inside the capability
// directory. A node the user can already read needs no change but is still
// recorded as held, so that no other user is given it underneath the task. The
// first grant of a node that the user cannot read records its original owner
// and mode and gives it to uid/gid with u+r added; a later grant for the same
// uid only adds a holder; one for a different uid fails with
// ErrHeldByOtherUser. Granting a task again is idempotent and re-applies the
// owner and mode, which is how recovery completes a grant cut short.
//
// uid 0 reads every node anyway; its grants only check the paths.
func (r *Registry) Grant(taskID string, paths []string, uid, gid uint32) error {
	if taskID == "" {
		return errors.New("migcaps: grant with an empty task ID")
	}
	var clean []string
	for _, p := range paths {
		c, err := r.checkPath(p)
		if err != nil {
			return err
		}
		if !slices.Contains(clean, c) {
			clean = append(clean, c)
		}
	}

	if len(clean) == 0 {
		return nil
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	if err := r.checkCapsDir(); err != nil {
		return err
	}
	if uid == 0 {
		for _, p := range clean {
			h, _, err := r.openNode(p)
			if err != nil {
				return err
			}
			h.close()
		}
		return nil
	}
	var added []string
	for _, p := range clean {
		isNew, err := r.grantOne(taskID, p, uid, gid)
		if err != nil {
			// Undo in reverse, each undo being an ordinary release of a
			// holder this call added, with the same crash ordering.
			for i := len(added) - 1; i >= 0; i-- {
				if uerr := r.releaseOne(taskID, added[i]); uerr != nil {
					err = errors.Join(err, fmt.Errorf("undoing grant of %s: %w", added[i], uerr))
				}
			}
			return err
		}
		if isNew {
			added = append(added, p)
		}
	}
	return nil
}

// grantOne grants node p to taskID, reporting whether taskID is a new holder.
// On error it leaves p as it found it.
func (r *Registry) grantOne(taskID, p string, uid, gid uint32) (bool, error) {
	h, st, err := r.openNode(p)
	if err != nil {
		return false, err
	}
	defer h.close()

	if n := r.tab.Nodes[p]; n != nil && !n.same(st) {
		// The node was destroyed and made again since it was recorded, so the
		// recorded original belongs to a node that is gone and the
		// present one has never been changed by us. Re-base the record on it;
		// the holders keep their claim, and a grant below re-applies to it.
		t := r.tab.clone()
		nn := t.Nodes[p]
		nn.setIdentity(st)
		if nn.Grant != nil {
			nn.Grant.Orig = attrsOf(st)
		}
		if err := r.commit(t); err != nil {
			return false, err
		}
	}

	n := r.tab.Nodes[p]
	held := false
	if n != nil {
		_, held = n.Holders[taskID]
	}
	switch {
	case n == nil && canRead(st, uid, gid):
		t := r.tab.clone()
		nn := &node{Holders: map[string]uint32{taskID: uid}}
		nn.setIdentity(st)
		t.Nodes[p] = nn
		return true, r.commit(t)

	case n == nil:
		t := r.tab.clone()
		nn := &node{
			Grant:   &grant{UID: uid, GID: gid, Orig: attrsOf(st)},
			Holders: map[string]uint32{taskID: uid},
		}
		nn.setIdentity(st)
		t.Nodes[p] = nn
		// Intent first: see the package comment.
		if err := r.commit(t); err != nil {
			return false, err
		}
		r.hook("grant:recorded")
		if err := r.apply(h, p, nn.Grant); err != nil {
			return false, r.undoFirstGrant(p, h, nn.Grant.Orig, err)
		}
		r.hook("grant:applied")
		return true, nil

	case n.Grant != nil:
		if n.Grant.UID != uid {
			return false, heldError(p, n, taskID, uid)
		}
		if !held {
			t := r.tab.clone()
			t.Nodes[p].Holders[taskID] = uid
			if err := r.commit(t); err != nil {
				return false, err
			}
		}
		// Re-applied on every grant: a grant cut short by a kill, or a node
		// made again, is completed here.
		if err := r.apply(h, p, n.Grant); err != nil {
			if !held {
				t := r.tab.clone()
				delete(t.Nodes[p].Holders, taskID)
				err = errors.Join(err, r.commit(t))
			}
			return false, err
		}
		r.hook("grant:applied")
		return !held, nil

	default: // held, unchanged by us: the holders read it as it is
		if held {
			return false, nil
		}
		if canRead(st, uid, gid) {
			t := r.tab.clone()
			t.Nodes[p].Holders[taskID] = uid
			return true, r.commit(t)
		}
		if others := otherUIDs(n, uid); len(others) > 0 {
			return false, heldError(p, n, taskID, uid)
		}
		// All holders run as uid yet uid cannot read the node: its mode was
		// changed under them. Take it over like a first grant.
		t := r.tab.clone()
		nn := t.Nodes[p]
		nn.Grant = &grant{UID: uid, GID: gid, Orig: attrsOf(st)}
		nn.Holders[taskID] = uid
		if err := r.commit(t); err != nil {
			return false, err
		}
		r.hook("grant:recorded")
		if err := r.apply(h, p, nn.Grant); err != nil {
			orig := nn.Grant.Orig
			if rerr := h.set(orig); rerr != nil {
				return false, errors.Join(err, fmt.Errorf("migcaps: restoring %s: %w", p, rerr))
			}
			t := r.tab.clone()
			t.Nodes[p].Grant = nil
			delete(t.Nodes[p].Holders, taskID)
			return false, errors.Join(err, r.commit(t))
		}
		r.hook("grant:applied")
		return true, nil
	}
}

// undoFirstGrant takes back a first grant of p whose chown or chmod failed:
// restore, then forget, as in Release.
func (r *Registry) undoFirstGrant(p string, h nodeHandle, orig attrs, cause error) error {
	if err := h.set(orig); err != nil {
		// Keep the record: it is the only copy of the original.
		return errors.Join(cause, fmt.Errorf("migcaps: restoring %s: %w", p, err))
	}
	t := r.tab.clone()
	delete(t.Nodes, p)
	return errors.Join(cause, r.commit(t))
}

// apply gives the node to the grant's user with u+r added.
func (r *Registry) apply(h nodeHandle, p string, g *grant) error {
	if err := h.set(attrs{UID: g.UID, GID: g.GID, Mode: g.Orig.Mode | 0o400}); err != nil {
		return fmt.Errorf("migcaps: giving %s to uid %d: %w", p, g.UID, err)
	}
	return nil
}

// Release drops taskID from every node it holds; the last holder's release
// restores the node's recorded original owner and mode. An unknown task is a
// no-op. A node that is gone, or was made again since it was granted, is
// forgotten without being touched. On an error restoring a node the task
// stays its holder, so a later Release retries.
func (r *Registry) Release(taskID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, p := range r.tab.held(taskID) {
		if err := r.releaseOne(taskID, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// releaseOne drops taskID from node p, restoring p if it was the last holder.
func (r *Registry) releaseOne(taskID, p string) error {
	n := r.tab.Nodes[p]
	if n == nil {
		return nil
	}
	if _, ok := n.Holders[taskID]; !ok {
		return nil
	}
	t := r.tab.clone()
	if len(n.Holders) > 1 {
		delete(t.Nodes[p].Holders, taskID)
		return r.commit(t)
	}
	if n.Grant != nil {
		if err := r.restore(p, n); err != nil {
			return err
		}
		r.hook("release:restored")
	}
	delete(t.Nodes, p)
	return r.commit(t)
}

// restore puts back n's original owner and mode on p, if p is still the node
// that was granted.
func (r *Registry) restore(p string, n *node) error {
	h, st, err := r.openNode(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // gone with its MIG instance
	}
	if err != nil {
		var nn *notNodeError
		if errors.As(err, &nn) {
			return nil // replaced by something we never touched
		}
		return err
	}
	defer h.close()
	if !n.same(st) {
		return nil // made again since: not ours to change
	}
	if err := h.set(n.Grant.Orig); err != nil {
		return fmt.Errorf("migcaps: restoring %s to uid %d gid %d mode %#o: %w",
			p, n.Grant.Orig.UID, n.Grant.Orig.GID, n.Grant.Orig.Mode, err)
	}
	return nil
}

// Holders lists each task with the nodes it holds, sorted, including nodes it
// could read without a change.
func (r *Registry) Holders() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for p, n := range r.tab.Nodes {
		for id := range n.Holders {
			out[id] = append(out[id], p)
		}
	}
	for _, ps := range out {
		sort.Strings(ps)
	}
	return out
}

func (r *Registry) hook(name string) {
	if r.step != nil {
		r.step(name)
	}
}

// commit saves t and makes it the current table; on error the current table
// stays, matching what is on disk.
func (r *Registry) commit(t *table) error {
	if err := r.save(t); err != nil {
		return err
	}
	r.tab = t
	return nil
}

// save writes t to the table file atomically.
func (r *Registry) save(t *table) error {
	data, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return fmt.Errorf("migcaps: %v", err)
	}
	if err := atomicfile.Write(r.path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("migcaps: saving table %s: %v", r.path, err)
	}
	return nil
}

// checkPath cleans p and checks that it names an entry directly inside the
// capability directory. Nested directories are refused: the capability
// directory is flat, and refusing them means no directory component but
// capsDir itself is ever resolved.
func (r *Registry) checkPath(p string) (string, error) {
	c := filepath.Clean(p)
	if !filepath.IsAbs(c) || filepath.Dir(c) != r.capsDir {
		return "", fmt.Errorf("migcaps: %q is not a capability node in %s", p, r.capsDir)
	}
	return c, nil
}

// checkCapsDir refuses a capability directory that is a symlink: every node
// path is resolved through it.
func (r *Registry) checkCapsDir() error {
	fi, err := os.Lstat(r.capsDir)
	if err != nil {
		return fmt.Errorf("migcaps: %v", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("migcaps: %s is not a directory", r.capsDir)
	}
	return nil
}

func (t *table) clone() *table {
	c := &table{Version: t.Version, Nodes: make(map[string]*node, len(t.Nodes))}
	for p, n := range t.Nodes {
		nn := *n
		if n.Grant != nil {
			g := *n.Grant
			nn.Grant = &g
		}
		nn.Holders = make(map[string]uint32, len(n.Holders))
		for k, v := range n.Holders {
			nn.Holders[k] = v
		}
		c.Nodes[p] = &nn
	}
	return c
}

// held lists, sorted, the nodes taskID holds.
func (t *table) held(taskID string) []string {
	var ps []string
	for p, n := range t.Nodes {
		if _, ok := n.Holders[taskID]; ok {
			ps = append(ps, p)
		}
	}
	sort.Strings(ps)
	return ps
}

func (n *node) setIdentity(st *unix.Stat_t) {
	n.Dev, n.Ino, n.Rdev = uint64(st.Dev), uint64(st.Ino), uint64(st.Rdev)
}

func (n *node) same(st *unix.Stat_t) bool {
	return n.Dev == uint64(st.Dev) && n.Ino == uint64(st.Ino) && n.Rdev == uint64(st.Rdev)
}

func attrsOf(st *unix.Stat_t) attrs {
	return attrs{UID: st.Uid, GID: st.Gid, Mode: st.Mode & 0o7777}
}

// canRead reports whether a process of uid, with primary group gid, may read
// the node as it is, by the kernel's rule: the owner bits apply to the owner,
// else the group bits to the group, else the other bits. Supplementary groups
// are not known here, so a node readable only through one is granted anyway.
func canRead(st *unix.Stat_t, uid, gid uint32) bool {
	switch {
	case st.Uid == uid:
		return st.Mode&0o400 != 0
	case st.Gid == gid:
		return st.Mode&0o040 != 0
	default:
		return st.Mode&0o004 != 0
	}
}

// otherUIDs lists the uids other than uid holding n, sorted.
func otherUIDs(n *node, uid uint32) []uint32 {
	var out []uint32
	for _, u := range n.Holders {
		if u != uid && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

func heldError(p string, n *node, taskID string, uid uint32) error {
	byUID := map[uint32][]string{}
	for id, u := range n.Holders {
		if u != uid {
			byUID[u] = append(byUID[u], id)
		}
	}
	var parts []string
	for _, u := range otherUIDs(n, uid) {
		ids := byUID[u]
		sort.Strings(ids)
		word := "task"
		if len(ids) > 1 {
			word = "tasks"
		}
		parts = append(parts, fmt.Sprintf("uid %d (%s %s)", u, word, strings.Join(ids, ", ")))
	}
	return fmt.Errorf("%w: %s is held by %s, so task %s running as uid %d cannot be given it; "+
		"tasks sharing a GPU instance must run as one user",
		ErrHeldByOtherUser, p, strings.Join(parts, " and "), taskID, uid)
}
