// Package simtrain is a simulated member of a distributed training job,
// `nomad-gpu sim-train`: what a gang's member does on a real cluster, with
// no GPU and no framework, so that gangs can be tried and tested on sim
// nodes. Like torchrun's workers it finds its peers from the rendezvous
// the gpu driver hands it (NOMAD_GPU_GANG_*: rank, world size, rank 0's
// address and port), trains in lockstep (every step ends at a barrier held
// by rank 0, as an all-reduce does), checkpoints naming its step, and
// resumes from the step it is given to restore.
//
// A peer that never comes, or goes mid-run, is what a collective call on
// a real cluster meets: the member says so and then hangs, as NCCL does,
// holding its GPUs, until it is stopped or its peer timeout passes (then
// it fails). That is the case gangs exist for, and the hang is what the
// controller must end by stopping the whole gang.
package simtrain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// Config is one member's.
type Config struct {
	// Rank is 0 … WorldSize−1; rank 0 listens on MasterPort and holds the
	// barriers. A world of 1 trains alone.
	Rank, WorldSize int
	MasterAddr      string
	MasterPort      int
	// Steps ends the run after that many steps in all (restored ones
	// included); 0 trains until stopped.
	Steps int64
	// StepTime is what one step's work takes.
	StepTime time.Duration
	// CheckpointEvery commits a checkpoint every that many steps, where
	// CheckpointDir is set.
	CheckpointEvery int64
	// PeerTimeout bounds the wait for a peer: to join, at a barrier, and
	// the hang after one is lost.
	PeerTimeout time.Duration
	// CheckpointDir, CommitMarker and RestoreDir are the gpu driver's
	// (NOMAD_GPU_CHECKPOINT_DIR, NOMAD_GPU_CHECKPOINT_COMMIT,
	// NOMAD_GPU_RESTORE_DIR); empty without checkpoints, or with nothing
	// to restore.
	CheckpointDir, CommitMarker, RestoreDir string
	// CommitTimeout bounds the wait for the driver to take a commit.
	CommitTimeout time.Duration
}

// stepFile holds the step in a checkpoint.
const stepFile = "step"

// FromEnv fills the rendezvous and checkpoint fields from a gpu task's
// environment. Without NOMAD_GPU_GANG_WORLD_SIZE the member trains alone.
func FromEnv(cfg Config, getenv func(string) string) (Config, error) {
	cfg.CheckpointDir = getenv(contract.EnvCheckpointDir)
	cfg.CommitMarker = getenv(contract.EnvCheckpointCommit)
	cfg.RestoreDir = getenv(contract.EnvRestoreDir)
	cfg.Rank, cfg.WorldSize = 0, 1
	if getenv(contract.EnvGangWorldSize) == "" {
		return cfg, nil
	}
	ints := []struct {
		name string
		to   *int
		min  int
	}{{contract.EnvGangWorldSize, &cfg.WorldSize, 1}, {contract.EnvGangRank, &cfg.Rank, 0}, {contract.EnvGangMasterPort, &cfg.MasterPort, 0}}
	for _, v := range ints {
		n, err := strconv.Atoi(getenv(v.name))
		if err != nil || n < v.min {
			return cfg, fmt.Errorf("%s=%q; allowed: an integer ≥ %d (set by the gpu driver for a gang's member)", v.name, getenv(v.name), v.min)
		}
		*v.to = n
	}
	if cfg.Rank >= cfg.WorldSize {
		return cfg, fmt.Errorf("%s=%d; allowed: below %s=%d", contract.EnvGangRank, cfg.Rank, contract.EnvGangWorldSize, cfg.WorldSize)
	}
	cfg.MasterAddr = getenv(contract.EnvGangMasterAddr)
	if cfg.WorldSize > 1 && (cfg.MasterAddr == "" || cfg.MasterPort == 0) {
		return cfg, fmt.Errorf("%s=%q, %s=%d; allowed: rank 0's address and port (its group's network port labelled %q)",
			contract.EnvGangMasterAddr, cfg.MasterAddr, contract.EnvGangMasterPort, cfg.MasterPort, contract.GangRendezvousPort)
	}
	return cfg, nil
}

// member is one run. mu serialises checkpoints: the training loop's and
// the driver's requests (its signal) write the same staging directory.
type member struct {
	cfg  Config
	out  io.Writer
	mu   sync.Mutex
	done int64 // steps completed; under mu
}

// Run trains until cfg.Steps, ctx's end (a stop: nil), or a failure. A
// checkpoint request (the driver's signal) arriving on requests commits
// the steps completed at once.
func Run(ctx context.Context, cfg Config, requests <-chan struct{}, out io.Writer) error {
	m := &member{cfg: cfg, out: out}
	if err := m.restore(); err != nil {
		return err
	}
	go m.serveRequests(ctx, requests)
	g, err := rendezvous(ctx, cfg, out)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return m.hang(ctx, fmt.Errorf("rendezvous: %w", err))
	}
	defer g.close()
	return m.train(ctx, g)
}

// restore starts from the restored checkpoint's step, or 0.
func (m *member) restore() error {
	if m.cfg.RestoreDir == "" {
		fmt.Fprintf(m.out, "rank %d of %d: starting at step 0\n", m.cfg.Rank, m.cfg.WorldSize)
		return nil
	}
	b, err := os.ReadFile(filepath.Join(m.cfg.RestoreDir, stepFile))
	if err != nil {
		return fmt.Errorf("restoring: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return fmt.Errorf("restoring: %s holds %q, not a step", stepFile, b)
	}
	m.done = n
	fmt.Fprintf(m.out, "rank %d of %d: restored step %d\n", m.cfg.Rank, m.cfg.WorldSize, n)
	return nil
}

// train runs the steps, each ending at the gang's barrier.
func (m *member) train(ctx context.Context, g *group) error {
	for m.cfg.Steps == 0 || m.steps() < m.cfg.Steps {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(m.cfg.StepTime):
		}
		next := m.steps() + 1
		if err := g.barrier(ctx, next); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return m.hang(ctx, fmt.Errorf("step %d: %w", next, err))
		}
		m.mu.Lock()
		m.done = next
		m.mu.Unlock()
		fmt.Fprintf(m.out, "step %d\n", next)
		if m.cfg.CheckpointEvery > 0 && next%m.cfg.CheckpointEvery == 0 {
			if err := m.checkpoint(); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(m.out, "rank %d of %d: trained %d steps\n", m.cfg.Rank, m.cfg.WorldSize, m.steps())
	return nil
}

func (m *member) steps() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.done
}

// hang is what a collective call does when a peer is gone: it waits,
// holding its GPUs, until the member is stopped (nil) or PeerTimeout.
func (m *member) hang(ctx context.Context, err error) error {
	fmt.Fprintf(m.out, "rank %d of %d: %v; waiting up to %s to be stopped\n", m.cfg.Rank, m.cfg.WorldSize, err, m.cfg.PeerTimeout)
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(m.cfg.PeerTimeout):
		return err
	}
}

func (m *member) serveRequests(ctx context.Context, requests <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-requests:
			if err := m.checkpoint(); err != nil {
				fmt.Fprintf(m.out, "rank %d of %d: checkpoint: %v\n", m.cfg.Rank, m.cfg.WorldSize, err)
			}
		}
	}
}

// checkpoint commits the steps completed: it writes the step, then the
// commit marker naming it, whole (written aside and renamed, so the
// driver never reads it half written), and waits for the driver to take
// it.
func (m *member) checkpoint() error {
	if m.cfg.CheckpointDir == "" || m.cfg.CommitMarker == "" {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.awaitCommit(); err != nil {
		return err
	}
	step := strconv.FormatInt(m.done, 10) + "\n"
	if err := os.WriteFile(filepath.Join(m.cfg.CheckpointDir, stepFile), []byte(step), 0o600); err != nil {
		return fmt.Errorf("writing the checkpoint: %w", err)
	}
	aside := filepath.Join(m.cfg.CheckpointDir, ".commit")
	if err := os.WriteFile(aside, []byte(step), 0o600); err != nil {
		return fmt.Errorf("writing the commit marker: %w", err)
	}
	if err := os.Rename(aside, m.cfg.CommitMarker); err != nil {
		return fmt.Errorf("writing the commit marker: %w", err)
	}
	fmt.Fprintf(m.out, "checkpoint: step %d\n", m.done)
	return m.awaitCommit()
}

// awaitCommit waits until the marker is gone: the driver took the
// commit. While it commits, the staging directory is root's, and the
// marker cannot even be looked at (a permission error, not "gone").
func (m *member) awaitCommit() error {
	deadline := time.Now().Add(m.cfg.CommitTimeout)
	for {
		_, err := os.Lstat(m.cfg.CommitMarker)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the driver did not take the commit within %s", m.cfg.CommitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
