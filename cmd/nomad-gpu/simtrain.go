package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/internal/simtrain"
)

func init() {
	register("sim-train", command{
		summary: "simulate one member of a distributed training job (a gang): rendezvous, lockstep steps, checkpoints naming their step",
		run:     runSimTrain,
	})
}

const simTrainUsage = `usage: nomad-gpu sim-train [flags]

Simulates one member of a distributed training job, for gangs on sim nodes
(docs/design/gangs.md). It reads its rank, the world size and rank 0's
address and port from the gpu driver's NOMAD_GPU_GANG_* variables (without
them it trains alone): rank 0 listens on its port, every other rank joins
it, and every step ends at a barrier all ranks pass together. A peer that
does not join, or is lost mid-run, is reported and the member then hangs
(as a collective call does) until it is stopped or --peer-timeout passes,
when it exits 1.

With a checkpoint block it resumes from the step in NOMAD_GPU_RESTORE_DIR,
commits a checkpoint every --checkpoint-every steps naming its step in the
commit marker, and commits at once when the checkpoint signal
(NOMAD_GPU_CHECKPOINT_SIGNAL) asks. SIGINT and SIGTERM end it with exit 0.

Flags:
  --steps N              steps in all, restored ones included (default 0:
                         until stopped)
  --step-time D          what one step takes (default 1s)
  --checkpoint-every N   steps between checkpoints (default 1; 0: only when
                         the driver asks)
  --peer-timeout D       longest wait for a peer to join or at a barrier,
                         and the hang after one is lost (default 2m)
  --commit-timeout D     longest wait for the driver to take a commit
                         (default 20s)

Output: "rank R of W: restored step S" or "... starting at step 0", a
"rendezvous: ..." line, "step N" per step and "checkpoint: step N" per
commit.
`

func runSimTrain(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := parseSimTrain(args, os.Getenv, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "nomad-gpu sim-train: %v\n", err)
		return 2
	}
	requests := make(chan struct{}, 1)
	if name := os.Getenv(contract.EnvCheckpointSignal); name != "" {
		sig := unix.SignalNum(strings.ToUpper(name))
		if sig == 0 {
			fmt.Fprintf(stderr, "nomad-gpu sim-train: %s=%q is no signal\n", contract.EnvCheckpointSignal, name)
			return 2
		}
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, sig)
		go func() {
			for range signals {
				select {
				case requests <- struct{}{}:
				default:
				}
			}
		}()
	}
	if err := simtrain.Run(ctx, cfg, requests, stdout); err != nil {
		fmt.Fprintf(stderr, "nomad-gpu sim-train: %v\n", err)
		return 1
	}
	return 0
}

func parseSimTrain(args []string, getenv func(string) string, stderr io.Writer) (simtrain.Config, error) {
	fset := flag.NewFlagSet("sim-train", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() { fmt.Fprint(stderr, simTrainUsage) }
	steps := fset.String("steps", "0", "")
	stepTime := fset.String("step-time", "1s", "")
	every := fset.String("checkpoint-every", "1", "")
	peerTimeout := fset.String("peer-timeout", "2m", "")
	commitTimeout := fset.String("commit-timeout", "20s", "")
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return simtrain.Config{}, err
		}
		return simtrain.Config{}, errUsage
	}
	if fset.NArg() > 0 {
		return simtrain.Config{}, fmt.Errorf("unexpected argument %q; sim-train takes flags only", fset.Arg(0))
	}
	var cfg simtrain.Config
	var err error
	for _, c := range []struct {
		flag, v string
		to      *int64
	}{{"--steps", *steps, &cfg.Steps}, {"--checkpoint-every", *every, &cfg.CheckpointEvery}} {
		if *c.to, err = strconv.ParseInt(c.v, 10, 64); err != nil || *c.to < 0 {
			return cfg, fmt.Errorf("%s: %q; allowed: an integer ≥ 0", c.flag, c.v)
		}
	}
	for _, c := range []struct {
		flag, v string
		to      *time.Duration
	}{{"--step-time", *stepTime, &cfg.StepTime}, {"--peer-timeout", *peerTimeout, &cfg.PeerTimeout}, {"--commit-timeout", *commitTimeout, &cfg.CommitTimeout}} {
		if *c.to, err = parseDuration(c.flag, c.v); err != nil {
			return cfg, err
		}
		if *c.to == 0 && c.flag != "--step-time" {
			return cfg, fmt.Errorf("%s: 0; allowed: a duration above 0", c.flag)
		}
	}
	return simtrain.FromEnv(cfg, getenv)
}
