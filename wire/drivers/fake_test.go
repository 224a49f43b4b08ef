package drivers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/wire/base"
	basepb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/base"
	driverspb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/drivers"
	"github.com/nomad-gpu/nomad-gpu/wire/wiretest"
)

type testLimits struct {
	CPU int `hcl:"cpu"`
}

type testTaskConfig struct {
	Command string            `hcl:"command,required"`
	Args    []string          `hcl:"args"`
	Count   int               `hcl:"count" default:"1"`
	Ratio   float64           `hcl:"ratio"`
	Labels  map[string]string `hcl:"labels"`
	Timeout time.Duration     `hcl:"timeout" default:"5s"`
	Limits  testLimits        `hcl:"limits,block"`
}

type fakeExit struct {
	done chan struct{}
	res  *ExitResult
}

// fakeDriver keeps tasks in memory and records what the adapter hands it.
// Tests set the knobs before dialling; recorded fields are read under mu.
type fakeDriver struct {
	noTaskConfig bool
	caps         *Capabilities
	startFn      func(cfg *TaskConfig) (*TaskHandle, *NetworkOverride, error)
	recoverErr   error
	callErr      error
	waitErr      error
	fpOpenErr    error
	fpCh         chan *Fingerprint
	evOpenErr    error
	evCh         chan *TaskEvent
	stats        []*TaskResourceUsage
	statsErr     error
	inspect      *TaskStatus
	inspectErr   error
	execResult   *ExecTaskResult
	streamFn     func(ctx context.Context, id string, opts *ExecOptions) (*ExitResult, error)

	mu            sync.Mutex
	started       []*TaskConfig
	recovered     []*TaskHandle
	calls         []string
	stopTimeout   time.Duration
	exits         map[string]*fakeExit
	shutdowns     int
	statsInterval time.Duration
	execCmd       []string
	execTimeout   time.Duration
}

func (f *fakeDriver) Info() base.Info {
	return base.Info{Type: base.TypeDriver, Name: "fake", Version: "0.1.0"}
}
func (f *fakeDriver) NewConfig() any                         { return nil }
func (f *fakeDriver) SetConfig(any, *base.AgentConfig) error { return nil }

func (f *fakeDriver) NewTaskConfig() any {
	if f.noTaskConfig {
		return nil
	}
	return &testTaskConfig{}
}

func (f *fakeDriver) Capabilities() *Capabilities { return f.caps }

func (f *fakeDriver) Fingerprint(context.Context) (<-chan *Fingerprint, error) {
	if f.fpOpenErr != nil {
		return nil, f.fpOpenErr
	}
	return f.fpCh, nil
}

func (f *fakeDriver) TaskEvents(context.Context) (<-chan *TaskEvent, error) {
	if f.evOpenErr != nil {
		return nil, f.evOpenErr
	}
	return f.evCh, nil
}

func (f *fakeDriver) StartTask(cfg *TaskConfig) (*TaskHandle, *NetworkOverride, error) {
	f.mu.Lock()
	f.started = append(f.started, cfg)
	f.mu.Unlock()
	if f.startFn != nil {
		return f.startFn(cfg)
	}
	return &TaskHandle{Config: cfg, State: TaskStateRunning}, nil, nil
}

func (f *fakeDriver) RecoverTask(h *TaskHandle) error {
	f.mu.Lock()
	f.recovered = append(f.recovered, h)
	f.mu.Unlock()
	return f.recoverErr
}

func (f *fakeDriver) exit(id string) *fakeExit {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.exits == nil {
		f.exits = map[string]*fakeExit{}
	}
	e, ok := f.exits[id]
	if !ok {
		e = &fakeExit{done: make(chan struct{})}
		f.exits[id] = e
	}
	return e
}

// finish makes the task exit; every WaitTask, past and future, sees res.
func (f *fakeDriver) finish(id string, res *ExitResult) {
	e := f.exit(id)
	e.res = res
	close(e.done)
}

func (f *fakeDriver) WaitTask(ctx context.Context, id string) (<-chan *ExitResult, error) {
	if f.waitErr != nil {
		return nil, f.waitErr
	}
	e := f.exit(id)
	ch := make(chan *ExitResult, 1)
	go func() {
		defer close(ch)
		select {
		case <-e.done:
			ch <- e.res
		case <-ctx.Done():
		}
	}()
	return ch, nil
}

func (f *fakeDriver) record(call string) {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
}

func (f *fakeDriver) StopTask(id string, timeout time.Duration, signal string) error {
	f.mu.Lock()
	f.stopTimeout = timeout
	f.mu.Unlock()
	f.record("stop " + id + " " + signal)
	return f.callErr
}

func (f *fakeDriver) DestroyTask(id string, force bool) error {
	if force {
		f.record("destroy " + id + " force")
	} else {
		f.record("destroy " + id)
	}
	return f.callErr
}

func (f *fakeDriver) SignalTask(id, signal string) error {
	f.record("signal " + id + " " + signal)
	return f.callErr
}

func (f *fakeDriver) InspectTask(string) (*TaskStatus, error) { return f.inspect, f.inspectErr }

func (f *fakeDriver) TaskStats(_ context.Context, _ string, interval time.Duration) (<-chan *TaskResourceUsage, error) {
	if f.statsErr != nil {
		return nil, f.statsErr
	}
	f.mu.Lock()
	f.statsInterval = interval
	f.mu.Unlock()
	ch := make(chan *TaskResourceUsage, len(f.stats))
	for _, s := range f.stats {
		ch <- s
	}
	close(ch)
	return ch, nil
}

func (f *fakeDriver) ExecTask(_ string, cmd []string, timeout time.Duration) (*ExecTaskResult, error) {
	f.mu.Lock()
	f.execCmd, f.execTimeout = cmd, timeout
	f.mu.Unlock()
	return f.execResult, f.callErr
}

func (f *fakeDriver) ExecTaskStreaming(ctx context.Context, id string, opts *ExecOptions) (*ExitResult, error) {
	return f.streamFn(ctx, id, opts)
}

// fakeRecord is what the fake saw, copied under its lock: the adapter runs
// the fake on gRPC server goroutines.
type fakeRecord struct {
	started       []*TaskConfig
	recovered     []*TaskHandle
	calls         []string
	stopTimeout   time.Duration
	shutdowns     int
	statsInterval time.Duration
	execCmd       []string
	execTimeout   time.Duration
}

func (f *fakeDriver) rec() fakeRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fakeRecord{
		started: f.started, recovered: f.recovered, calls: f.calls, stopTimeout: f.stopTimeout,
		shutdowns: f.shutdowns, statsInterval: f.statsInterval, execCmd: f.execCmd, execTimeout: f.execTimeout,
	}
}

func (f *fakeDriver) Shutdown() error {
	f.mu.Lock()
	f.shutdowns++
	f.mu.Unlock()
	return f.callErr
}

// dial serves impl through go-plugin's real gRPC server and client, as the
// agent reaches a plugin, and dispenses the "driver" client.
func dial(t *testing.T, impl Plugin) driverspb.DriverClient {
	t.Helper()
	return wiretest.Dispense(t, wiretest.Serve(t, PluginSet(impl, hclog.NewNullLogger())), "driver").(driverspb.DriverClient)
}

func TestPluginSetServesBaseAndDriver(t *testing.T) {
	rpc := wiretest.Serve(t, PluginSet(&fakeDriver{}, nil))
	info, err := wiretest.Dispense(t, rpc, "base").(basepb.BasePluginClient).PluginInfo(context.Background(), &basepb.PluginInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetType() != basepb.PluginType_DRIVER || info.GetName() != "fake" {
		t.Fatalf("plugin info = %v", info)
	}
	if _, err := wiretest.Dispense(t, rpc, "driver").(driverspb.DriverClient).Init(context.Background(), &driverspb.InitRequest{}); err != nil {
		t.Fatalf("Init: %v", err)
	}
}
