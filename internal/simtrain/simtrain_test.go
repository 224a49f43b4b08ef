package simtrain

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a member's output, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeDriver takes a member's commits as the gpu driver does: it removes
// the marker and empties the staging directory, and records the step the
// marker named and the one the checkpoint holds.
type fakeDriver struct {
	staging string
	mu      sync.Mutex
	commits []string // "marker/checkpoint"
}

func (f *fakeDriver) run(ctx context.Context) {
	marker := filepath.Join(f.staging, "COMMIT")
	for ctx.Err() == nil {
		if b, err := os.ReadFile(marker); err == nil {
			data, _ := os.ReadFile(filepath.Join(f.staging, stepFile))
			f.mu.Lock()
			f.commits = append(f.commits, strings.TrimSpace(string(b))+"/"+strings.TrimSpace(string(data)))
			f.mu.Unlock()
			os.Remove(filepath.Join(f.staging, stepFile))
			os.Remove(marker)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fakeDriver) taken() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.commits...)
}

// gang starts n members on a listener of the test's, each with a fake
// driver and a context of its own below ctx (stops[r] stops member r);
// cfg is every member's, less its rank and checkpoint paths.
func gang(t *testing.T, ctx context.Context, n int, cfg Config, restore []string) (errs []chan error, outs []*syncBuffer, drivers []*fakeDriver, stops []context.CancelFunc) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen = func(int) (net.Listener, error) { return l, nil }
	t.Cleanup(func() { listen = defaultListen })
	errs, outs, drivers, stops = make([]chan error, n), make([]*syncBuffer, n), make([]*fakeDriver, n), make([]context.CancelFunc, n)
	for r := range n {
		c := cfg
		c.Rank, c.WorldSize, c.MasterAddr, c.MasterPort = r, n, "127.0.0.1", l.Addr().(*net.TCPAddr).Port
		c.CheckpointDir = t.TempDir()
		c.CommitMarker = filepath.Join(c.CheckpointDir, "COMMIT")
		if restore != nil {
			c.RestoreDir = t.TempDir()
			os.WriteFile(filepath.Join(c.RestoreDir, stepFile), []byte(restore[r]+"\n"), 0o600)
		}
		drivers[r] = &fakeDriver{staging: c.CheckpointDir}
		go drivers[r].run(ctx)
		errs[r], outs[r] = make(chan error, 1), &syncBuffer{}
		mctx, stop := context.WithCancel(ctx)
		stops[r] = stop
		go func() { errs[r] <- Run(mctx, c, nil, outs[r]) }()
	}
	return errs, outs, drivers, stops
}

// await waits until out says want.
func await(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in:\n%s", want, out)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestGangTrainsInLockstepAndCheckpointsItsSteps(t *testing.T) {
	cases := []struct {
		name    string
		restore []string
		want    []string
	}{
		{"from the start", nil, []string{"1/1", "2/2", "3/3"}},
		{"from a restored step", []string{"1", "1"}, []string{"2/2", "3/3"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := Config{Steps: 3, StepTime: 10 * time.Millisecond, CheckpointEvery: 1, PeerTimeout: 10 * time.Second, CommitTimeout: 5 * time.Second}
			errs, outs, drivers, _ := gang(t, ctx, 2, cfg, c.restore)
			for r := range errs {
				if err := <-errs[r]; err != nil {
					t.Fatalf("rank %d: %v\n%s", r, err, outs[r])
				}
				if !strings.Contains(outs[r].String(), "trained 3 steps") {
					t.Errorf("rank %d output:\n%s", r, outs[r])
				}
				if got := drivers[r].taken(); strings.Join(got, " ") != strings.Join(c.want, " ") {
					t.Errorf("rank %d commits (marker/checkpoint) %v, want %v", r, got, c.want)
				}
			}
			if !strings.Contains(outs[0].String(), "rendezvous: all 2 members joined") || !strings.Contains(outs[1].String(), "rendezvous: rank 1 of 2 joined rank 0") {
				t.Errorf("rendezvous not told:\n%s\n%s", outs[0], outs[1])
			}
		})
	}
}

// A lost peer leaves the other hanging at its barrier, holding its GPUs,
// until it is stopped (exit 0) or its peer timeout passes (an error); one
// that never joins is a missing peer.
func TestGangPeerLostOrMissing(t *testing.T) {
	cfg := Config{StepTime: 20 * time.Millisecond, PeerTimeout: 300 * time.Millisecond, CommitTimeout: time.Second}

	for _, c := range []struct {
		name        string
		peerTimeout time.Duration
		stopped     bool // the survivor is stopped while it hangs
	}{
		{"lost mid-run: hangs until stopped", time.Minute, true},
		{"lost mid-run: fails after the peer timeout", 300 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			mc := cfg
			mc.PeerTimeout = c.peerTimeout
			errs, outs, _, stops := gang(t, ctx, 2, mc, nil)
			await(t, outs[1], "step 2\n")
			stops[1]() // rank 1 stops (or dies): its connection closes
			if err := <-errs[1]; err != nil {
				t.Fatalf("rank 1 stopped: %v", err)
			}
			await(t, outs[0], "rank 1 lost")
			if c.stopped {
				select {
				case err := <-errs[0]:
					t.Fatalf("rank 0 ended (%v) instead of hanging:\n%s", err, outs[0])
				case <-time.After(200 * time.Millisecond):
				}
				stops[0]()
			}
			err := <-errs[0]
			if c.stopped != (err == nil) {
				t.Fatalf("rank 0: %v; stopped while hanging %v\n%s", err, c.stopped, outs[0])
			}
		})
	}

	t.Run("missing: fails after the peer timeout", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listen = func(int) (net.Listener, error) { return l, nil }
		defer func() { listen = defaultListen }()
		c := cfg
		c.WorldSize, c.MasterAddr, c.MasterPort = 2, "127.0.0.1", 1
		var out syncBuffer
		err = Run(context.Background(), c, nil, &out)
		if err == nil || !strings.Contains(err.Error(), "peer missing") || !strings.Contains(out.String(), "waiting up to 300ms to be stopped") {
			t.Fatalf("err %v, output:\n%s", err, out.String())
		}
	})
}
