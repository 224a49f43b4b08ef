package driver

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Start, stats, signal, inspect, destroy and fingerprint at once, on tasks
// that come and go: `go test -race` is the judge of the locking, and every
// task must be gone at the end.
func TestConcurrentOperations(t *testing.T) {
	e := newEnv(t)
	d := e.plugin()
	const workers, rounds = 4, 3
	var wg, background sync.WaitGroup
	stop := make(chan struct{})
	background.Add(1)
	go func() {
		defer background.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			d.fingerprint()
			for _, tk := range d.store.all() {
				d.InspectTask(tk.id)
				d.SignalTask(tk.id, "SIGCONT")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	errs := make(chan error, 2*workers*rounds) // a stop and a destroy error a round at most
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				cfg := e.taskConfig(&TaskConfig{Command: "/bin/sleep", Args: []string{"300"}}, nil)
				if _, _, err := d.StartTask(cfg); err != nil {
					errs <- err
					return
				}
				ctx, cancel := context.WithCancel(context.Background())
				ch, err := d.TaskStats(ctx, cfg.ID, 10*time.Millisecond)
				if err == nil {
					<-ch
				}
				cancel()
				if err := d.StopTask(cfg.ID, 50*time.Millisecond, "SIGTERM"); err != nil {
					errs <- err
				}
				if err := d.DestroyTask(cfg.ID, true); err != nil {
					errs <- err
				}
				if left := e.leftovers(d, cfg); len(left) > 0 {
					t.Errorf("task %s left %v", cfg.ID, left)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	background.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(d.store.all()); n != 0 {
		t.Errorf("%d tasks still in the store", n)
	}
}
