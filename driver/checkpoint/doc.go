// Package checkpoint is the task driver's checkpoint store: where a task
// that opts in writes its checkpoints, how they are committed, and which
// one its next run restores. Its one promise: a checkpoint interrupted at
// any point (the task killed mid-write, the driver killed mid-commit, the
// node crashing) is discarded, and the run after it restores the previous
// committed generation, byte for byte.
//
// # The task's side
//
// Prepare gives each run of a task a staging directory (Run.Staging) and
// the newest committed generation to restore from (Run.Restore, nil when
// there is none). The task writes its checkpoint below the staging
// directory, regular files and directories only, closes every file, and
// then creates an empty file named COMMIT there. The driver sees the
// marker (Run.CommitRequested) and calls Commit. The commit is over when
// the marker is gone: it succeeded if the staging directory is empty again,
// and was refused if the task's files are still in it. While it runs, the
// staging directory is root's and the task can open nothing in it.
//
// # On disk
//
//	<root>/                               root 0711
//	  <namespace>/<job>/<group>/<task>/   root 0711 each (names encoded, see Store.KeyDir)
//	    <alloc index>/                    root 0711: the key's directory
//	      lock                            root 0600: flock, held by Prepare, Commit, Reattach, Remove
//	      state.json                      root 0600: {"version":1,"resumes":N,"run":"staging-…","key":{…}}
//	      gen-00000007/                   uid:gid 0500, directories 0500, files 0400
//	      gen-00000007.manifest.json      root 0600: version, seq, time, trigger, uid, dirs, files (path, size, SHA-256)
//	      gen-00000008/ …
//	      staging-<16 hex>/               uid:gid 0700: the run's next checkpoint
//	      .trash-<16 hex>/                what is being removed
//
// Users may pass through the directories down to the key's, but list and
// change nothing there; a generation and a staging directory are the
// task's user's alone, so no other user of the node reads a checkpoint.
// The key's directory is root's, not the task's: it holds the manifests,
// the resume count and the lock, and a task owning it could swap any of
// them for a symlink under root's feet or hold the lock forever. Below a
// generation or a staging directory, which the task owns and may change at
// any moment, nothing is looked up by path: every entry is opened from its
// parent's descriptor without following symlinks, checked to be the inode
// first seen, and changed through its own descriptor.
//
// # Why every interruption is safe
//
// Commit works in this order; what a kill or crash after each step leaves,
// and what the next Prepare (or Reattach) makes of it:
//
//  1. Freeze: the staging directory becomes root's, 0700, so the task can
//     not change what is read. Left: a root-owned staging
//     directory, discarded like any other staging directory.
//  2. Remove COMMIT. Left: the same. From here on nothing the task does
//     changes what is committed: CommitWith tells its caller so (Taken),
//     and a stop need not wait for the steps after to stop the task.
//  3. Walk the staging directory: refuse what is not a regular file or
//     directory of the task's uid, hash every file, fsync every file and
//     then every directory below its contents. Nothing is changed yet, so
//     a refusal hands the directory back to the task as it was, less the
//     marker. Left: the same.
//  4. Write gen-<N>.manifest.json with atomicfile (synced, and its
//     directory), N one more than any generation or manifest there. Left:
//     a temporary file, or a manifest with no generation directory; both
//     are removed.
//  5. Rename the staging directory to gen-<N>: the commit point. Every
//     byte it names and the manifest that describes it were made durable
//     before, so if the renamed directory is there after a crash, it is
//     whole; if the crash took the rename back, step 4's state is what
//     remains. Then the key's directory is synced.
//  6. Seal: every entry becomes uid:gid, files 0400, directories 0500, the
//     top last, so the task never sees the generation writable. Left: a
//     committed generation not (fully) sealed; Prepare checks it against
//     its manifest and seals it.
//  7. Create a fresh staging directory at the same path. Left: none;
//     Reattach creates it, Prepare makes a new one anyway.
//  8. Prune to the newest keep generations. Each pruned one is renamed to
//     .trash-*, then its manifest removed, then the trash. Left: trash or
//     a manifest without its generation, both removed.
//
// A commit touches no existing generation until step 8, after its own
// commit point, and keep is at least 1: at every moment the newest intact
// generation is either the previous one or the new one, never part of
// either. A task killed mid-write never created COMMIT, or died before the
// driver committed; either way Prepare discards the staging directory.
// So it does with one that holds COMMIT: the marker may have reached the
// disk while the data it vouches for did not, since only a commit's fsyncs
// make the task's writes durable.
//
// Prepare checks every generation's names, kinds, sizes and owners
// against its manifest, which catches what a crash does to unsynced data
// (a file cut short or left empty) and a task meddling with its restored
// copy; Verify also compares every SHA-256, which costs reading it all.
// A generation that does not match, or whose manifest is missing, is
// discarded with the reason, and the newest intact one before it is used.
//
// # Sharing a root between nodes
//
// A task's replacement on another node restores if the root is a shared
// filesystem such as NFS. Every node must then see the same uids, the
// export must let root chown (no_root_squash), and flock must reach the
// server (not local_lock=flock), because the key's lock is what keeps two
// nodes from committing or tidying one key at once. Nomad may start a
// replacement while the allocation it replaces still runs (on a node that
// lost touch): the key's current run is the one Prepare made last, recorded
// in state.json, and the older one, its staging directory discarded, can
// not commit or be reattached (ErrSuperseded).
package checkpoint
