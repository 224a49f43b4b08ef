package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/nomadview"
)

// LeaderVariable is the Nomad variable whose lock the leader holds, in
// the controller's namespace. Its item holderItem names the replica that
// took it, for people (nomad-gpu top).
const LeaderVariable = "nomad-gpu/controller/leader"

const holderItem = "holder"

// Lease is what Leader needs of a lock: Nomad's variable lock in the
// controller, a fake one in tests.
type Lease interface {
	// Acquire takes the lock; ErrHeld when another holder has it.
	Acquire(ctx context.Context) error
	// Renew extends the lock; any error means it may be lost.
	Renew(ctx context.Context) error
	Release(ctx context.Context) error
}

// FollowerRetry is how often a replica that does not lead tries to take
// the lock.
const FollowerRetry = time.Second

// NomadLockTTL is the TTL the controller gives Nomad's lock so that a
// dead leader's lock passes within lockTTL: Nomad expires a variable lock
// twice its TTL after the last renewal it took (nomad/locks.go, like
// Consul's sessions), keeps it lockDelay more, a follower tries every
// FollowerRetry, and takeoverSlack is for the follower's request and
// Nomad's own raft writes. Nomad takes 10s to 24h: lockTTL at least
// MinLockTTL(lockDelay).
func NomadLockTTL(lockTTL, lockDelay time.Duration) time.Duration {
	return (lockTTL - lockDelay - FollowerRetry - takeoverSlack) / 2
}

// MinLockTTL is the shortest lock TTL Nomad's 10s lower bound allows
// with lockDelay.
func MinLockTTL(lockDelay time.Duration) time.Duration {
	return 2*nomadMinLockTTL + lockDelay + FollowerRetry + takeoverSlack
}

const takeoverSlack = time.Second

// nomadMinLockTTL and nomadMaxLockTTL are Nomad's bounds on a variable
// lock's TTL.
const nomadMinLockTTL, nomadMaxLockTTL = 10 * time.Second, 24 * time.Hour

// ErrHeld: the lock is held by another replica.
var ErrHeld = errors.New("the lock is held by another replica")

// Leader runs its work only while this replica holds the lock, and stops
// it before the lock can pass to another: the work's context is cancelled
// when a renewal fails or when the last good renewal is TTL−Margin old,
// whichever comes first. With Nomad's lock delay after the TTL, that
// leaves no instant at which two replicas act.
type Leader struct {
	Lease Lease
	// TTL is the lock's, as Nomad is given it; Renew runs every TTL/3.
	TTL time.Duration
	// Margin is how long before the TTL, counted from the moment the last
	// good renewal was sent, an unrenewed leader stops acting: the
	// longest a write may take to land. Nomad holds the lock at least
	// twice the TTL from that moment.
	Margin time.Duration
	// Retry is how often a follower tries to take the lock.
	Retry  time.Duration
	Logger hclog.Logger
	// OnChange is told when this replica becomes or stops being leader.
	OnChange func(leading bool)
}

// Run takes the lock whenever it can and runs lead while it holds it,
// until ctx is done; then it releases the lock.
func (l *Leader) Run(ctx context.Context, lead func(ctx context.Context) error) {
	for ctx.Err() == nil {
		sent := time.Now()
		err := l.Lease.Acquire(ctx)
		switch {
		case err == nil:
			// A lead that failed (the ledger unreadable) is tried again
			// after Retry, not at once.
			l.hold(ctx, sent, lead)
		case errors.Is(err, ErrHeld):
		default:
			l.Logger.Warn("cannot take the leader lock", "error", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(l.Retry):
		}
	}
}

// hold runs lead while renewals keep the lock, taken by a request sent at
// acquired, and releases it after.
func (l *Leader) hold(ctx context.Context, acquired time.Time, lead func(ctx context.Context) error) {
	work, stop := context.WithCancel(ctx)
	defer stop()
	l.Logger.Info("leading: this replica holds the lock", "ttl", l.TTL)
	l.change(true)
	defer l.change(false)
	done := make(chan error, 1)
	go func() { done <- lead(work) }()
	renewed := acquired
	tick := time.NewTicker(l.TTL / 3)
	defer tick.Stop()
	// A renewal runs beside this loop, so that one that hangs (whatever
	// its context says) cannot hold off the deadline: only the deadline
	// keeps this replica from acting once Nomad may pass the lock on.
	// answer is the renewal in flight's, nil when none is.
	var answer chan error
	var sent time.Time
	for {
		deadline := time.Until(renewed.Add(l.TTL - l.Margin))
		select {
		case err := <-done:
			if err != nil && ctx.Err() == nil {
				l.Logger.Error("leading stopped", "error", err)
			}
			stop() // ends a renewal in flight before the release
			l.release()
			return
		case <-tick.C:
			if answer != nil {
				continue // the last renewal has not answered: one at a time
			}
			// The lock is Nomad's from the moment it took the renewal,
			// which is after this one: the deadline counts from here.
			sent, answer = time.Now(), make(chan error, 1)
			go func(answer chan<- error) {
				rctx, cancel := context.WithTimeout(work, l.TTL/3)
				defer cancel()
				answer <- l.Lease.Renew(rctx)
			}(answer)
			continue
		case err := <-answer:
			answer = nil
			if err == nil {
				renewed = sent
				continue
			}
			l.Logger.Warn("lost the leader lock: renewing failed", "error", err)
		case <-time.After(deadline):
			l.Logger.Warn("lost the leader lock: not renewed in time", "since", time.Since(renewed).Round(time.Millisecond))
		}
		stop()
		<-done
		l.release()
		return
	}
}

func (l *Leader) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Lease.Release(ctx); err != nil {
		l.Logger.Debug("releasing the leader lock", "error", err)
	}
}

func (l *Leader) change(leading bool) {
	if l.OnChange != nil {
		l.OnChange(leading)
	}
}

// VariableLease is a Lease over a Nomad variable lock.
type VariableLease struct {
	api       *api.Client
	namespace string
	mu        sync.Mutex // guards v: Acquire sets its lock ID, Renew and Release read it
	v         *api.Variable
}

// NewVariableLease is the lock of the variable at path in namespace,
// with ttl (10s to 24h, Nomad's bounds) and delay, Nomad's lock delay:
// how long after a lapsed lease no one may take the lock. holder names
// this replica in the variable while it holds the lock.
func NewVariableLease(c *api.Client, namespace, path, holder string, ttl, delay time.Duration) (*VariableLease, error) {
	if ttl < nomadMinLockTTL || ttl > nomadMaxLockTTL {
		return nil, fmt.Errorf("the TTL given to Nomad's lock, %s, is out of range; allowed: %s to %s", ttl, nomadMinLockTTL, nomadMaxLockTTL)
	}
	if delay <= 0 {
		return nil, fmt.Errorf("lock_delay: %s; allowed: more than 0", delay)
	}
	return &VariableLease{api: c, namespace: namespace, v: &api.Variable{
		Path: path, Namespace: namespace, Items: api.VariableItems{holderItem: holder},
		Lock: &api.VariableLock{TTL: ttl.String(), LockDelay: delay.String()},
	}}, nil
}

func (l *VariableLease) opts(ctx context.Context) *api.WriteOptions {
	return (&api.WriteOptions{Namespace: l.namespace}).WithContext(ctx)
}

// Acquire implements Lease.
func (l *VariableLease) Acquire(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	want := *l.v
	want.Lock = &api.VariableLock{TTL: l.v.Lock.TTL, LockDelay: l.v.Lock.LockDelay}
	out, _, err := l.api.Variables().AcquireLock(&want, l.opts(ctx))
	if nomadview.StatusCode(err) == http.StatusConflict {
		return ErrHeld
	}
	if err != nil {
		return err
	}
	l.v.Lock.ID = out.LockID()
	return nil
}

// Renew implements Lease.
func (l *VariableLease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _, err := l.api.Variables().RenewLock(l.v, l.opts(ctx))
	return err
}

// Release implements Lease.
func (l *VariableLease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _, err := l.api.Variables().ReleaseLock(l.v, l.opts(ctx))
	return err
}
