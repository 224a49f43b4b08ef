package controller

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
)

// A dead leader's lock passes within the lock TTL: Nomad holds it twice
// the TTL it is given, then the lock delay; the follower's retry and
// request fit in what is left.
func TestNomadLockTTL(t *testing.T) {
	tests := []struct {
		lockTTL, delay, want time.Duration
	}{
		{23 * time.Second, time.Second, 10 * time.Second},
		{30 * time.Second, time.Second, 13500 * time.Millisecond},
		{time.Minute, 5 * time.Second, 26500 * time.Millisecond},
	}
	for _, tt := range tests {
		got := NomadLockTTL(tt.lockTTL, tt.delay)
		if got != tt.want {
			t.Errorf("NomadLockTTL(%s, %s) = %s, want %s", tt.lockTTL, tt.delay, got, tt.want)
		}
		if passes := 2*got + tt.delay + FollowerRetry + takeoverSlack; passes > tt.lockTTL {
			t.Errorf("lock TTL %s: the lock passes %s after the last renewal", tt.lockTTL, passes)
		}
	}
	if got := NomadLockTTL(MinLockTTL(time.Second), time.Second); got != nomadMinLockTTL {
		t.Errorf("at MinLockTTL Nomad is given %s, want its least, %s", got, nomadMinLockTTL)
	}
}

// fakeLease takes the lock at once; its renewals fail after okRenewals.
type fakeLease struct {
	okRenewals int32
	renewals   atomic.Int32
	released   atomic.Bool
}

func (f *fakeLease) Acquire(context.Context) error { return nil }
func (f *fakeLease) Renew(context.Context) error {
	if f.renewals.Add(1) > f.okRenewals {
		return errors.New("lock lost")
	}
	return nil
}
func (f *fakeLease) Release(context.Context) error { f.released.Store(true); return nil }

// A failed (or late) renewal stops the leader's work and releases the
// lock.
func TestLeaderStopsWhenRenewalFails(t *testing.T) {
	lease := &fakeLease{okRenewals: 2}
	l := &Leader{Lease: lease, TTL: 300 * time.Millisecond, Margin: 100 * time.Millisecond, Retry: time.Hour,
		Logger: hclog.NewNullLogger()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan struct{})
	go l.Run(ctx, func(work context.Context) error {
		<-work.Done()
		close(stopped)
		cancel() // ends Run: no second term
		return nil
	})
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the work went on after the renewal failed")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !lease.released.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !lease.released.Load() {
		t.Error("the lock was not released")
	}
}

// hangingLease takes the lock at once; its renewals after ok hang until
// unblock is closed (honouring their context or not), then fail.
type hangingLease struct {
	ok        int
	honourCtx bool
	unblock   chan struct{}

	mu       sync.Mutex
	renewals int
	// lastGood is when the last good renewal (or the acquisition) was
	// asked for: the lock is Nomad's to pass on from then on.
	lastGood time.Time
	released bool
}

func (f *hangingLease) Acquire(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastGood = time.Now()
	return nil
}

func (f *hangingLease) Renew(ctx context.Context) error {
	f.mu.Lock()
	f.renewals++
	if f.renewals <= f.ok {
		f.lastGood = time.Now()
		f.mu.Unlock()
		return nil
	}
	f.mu.Unlock()
	if f.honourCtx {
		select {
		case <-f.unblock:
		case <-ctx.Done():
		}
	} else {
		<-f.unblock
	}
	return errors.New("lock lost")
}

func (f *hangingLease) Release(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = true
	return nil
}

// A renewal that hangs is no renewal: the leader stops its work once the
// last good renewal is TTL−Margin old, as it does when one fails, and
// does not wait for the stuck call to answer, or it would act on after
// Nomad passed the lock to another replica. The bubble's clock is fake:
// the test takes no wall time and the times it compares are exact.
func TestLeaderStopsWhileARenewalHangs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		honourCtx bool
	}{
		{"the renewal ignores its context", false},
		{"the renewal ends with its context", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const ttl, margin = 3 * time.Second, time.Second
				lease := &hangingLease{ok: 2, honourCtx: tc.honourCtx, unblock: make(chan struct{})}
				l := &Leader{Lease: lease, TTL: ttl, Margin: margin, Retry: time.Hour, Logger: hclog.NewNullLogger()}
				ctx, cancel := context.WithCancel(context.Background())
				stoppedAt := make(chan time.Time, 1)
				ran := make(chan struct{})
				go func() {
					defer close(ran)
					l.Run(ctx, func(work context.Context) error {
						<-work.Done()
						stoppedAt <- time.Now()
						return nil
					})
				}()
				select {
				case at := <-stoppedAt:
					lease.mu.Lock()
					limit := lease.lastGood.Add(ttl - margin)
					lease.mu.Unlock()
					if at.After(limit) {
						t.Errorf("the work stopped %s after the last good renewal, want at most TTL−Margin (%s)", at.Sub(limit.Add(margin-ttl)), ttl-margin)
					}
				case <-time.After(10 * ttl):
					t.Errorf("the work went on for %s after the last good renewal while a renewal hung", 10*ttl)
				}
				close(lease.unblock)
				cancel()
				<-ran
				lease.mu.Lock()
				defer lease.mu.Unlock()
				if !lease.released {
					t.Error("the lock was not released")
				}
			})
		})
	}
}
