package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
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
