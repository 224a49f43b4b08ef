package drivers

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	driverspb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/drivers"
	structspb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/structs"
	"github.com/nomad-gpu/nomad-gpu/wire/structs"
	"github.com/nomad-gpu/nomad-gpu/wire/wiretest"
)

const recoverableTypeURL = "type.googleapis.com/hashicorp.nomad.plugins.shared.structs.RecoverableError"

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("error = %v, want code %v", err, code)
	}
}

// recoverableDetail checks details[0] the way the client reads it and
// returns its flag.
func recoverableDetail(t *testing.T, err error) bool {
	t.Helper()
	st, _ := status.FromError(err)
	ds := st.Proto().GetDetails()
	if len(ds) == 0 {
		t.Fatalf("error %v has no details", err)
	}
	if ds[0].GetTypeUrl() != recoverableTypeURL {
		t.Fatalf("details[0] type URL = %q, want %q", ds[0].GetTypeUrl(), recoverableTypeURL)
	}
	var re structspb.RecoverableError
	if err := ds[0].UnmarshalTo(&re); err != nil {
		t.Fatal(err)
	}
	return re.GetRecoverable()
}

func TestTaskConfigSchema(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noConfig bool
		keys     []string
	}{
		{"tagged struct", false, []string{"args", "command", "count", "labels", "limits", "ratio", "timeout"}},
		{"no task config", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, &fakeDriver{noTaskConfig: tc.noConfig})
			resp, err := c.TaskConfigSchema(ctxT(t), &driverspb.TaskConfigSchemaRequest{})
			if err != nil {
				t.Fatal(err)
			}
			obj := resp.GetSpec().GetObject()
			if obj == nil {
				t.Fatalf("spec = %v, want an object", resp.GetSpec())
			}
			var keys []string
			for k := range obj.GetAttributes() {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if !reflect.DeepEqual(keys, tc.keys) {
				t.Fatalf("keys = %v, want %v", keys, tc.keys)
			}
		})
	}
}

// agentTaskConfig is a task config as the client sends it: every field the
// conversions know set, and the driver config encoded from the schema the
// plugin reported.
func agentTaskConfig(t *testing.T, c driverspb.DriverClient, cfg map[string]any) *driverspb.TaskConfig {
	t.Helper()
	resp, err := c.TaskConfigSchema(ctxT(t), &driverspb.TaskConfigSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := wiretest.EncodeConfig(resp.GetSpec(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &driverspb.TaskConfig{
		Id:                  "alloc1/web/abcdefgh",
		Name:                "web",
		MsgpackDriverConfig: raw,
		Env:                 map[string]string{"NOMAD_TASK_NAME": "web"},
		DeviceEnv:           map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-1"},
		Resources: &driverspb.Resources{
			AllocatedResources: &driverspb.AllocatedTaskResources{
				Cpu:    &driverspb.AllocatedCpuResources{CpuShares: 500},
				Memory: &driverspb.AllocatedMemoryResources{MemoryMb: 256, MemoryMaxMb: 512},
			},
			LinuxResources: &driverspb.LinuxResources{
				CpuShares: 500, MemoryLimitBytes: 512 << 20, CpusetCpus: "0,1",
				PercentTicks: 0.25, CpusetCgroup: "/nomad.slice/x.scope",
			},
			Ports: []*driverspb.PortMapping{{Label: "http", Value: 25000, To: 8080, HostIp: "10.0.0.1"}},
		},
		Mounts:        []*driverspb.Mount{{TaskPath: "/data", HostPath: "/srv/data", Readonly: true, PropagationMode: "private"}},
		Devices:       []*driverspb.Device{{TaskPath: "/dev/nvidia0", HostPath: "/dev/nvidia0", CgroupPermissions: "rwm"}},
		User:          "nobody",
		AllocDir:      "/var/nomad/alloc/alloc1",
		StdoutPath:    "/var/nomad/alloc/alloc1/alloc/logs/.web.stdout.fifo",
		StderrPath:    "/var/nomad/alloc/alloc1/alloc/logs/.web.stderr.fifo",
		TaskGroupName: "group",
		JobName:       "job",
		AllocId:       "alloc1",
		NetworkIsolationSpec: &driverspb.NetworkIsolationSpec{
			Mode: driverspb.NetworkIsolationSpec_GROUP, Path: "/var/run/netns/x",
			Labels:      map[string]string{"a": "b"},
			HostsConfig: &driverspb.HostsConfig{Hostname: "h", Address: "10.1.1.1"},
		},
		Dns:       &driverspb.DNSConfig{Servers: []string{"1.1.1.1"}, Searches: []string{"local"}, Options: []string{"ndots:2"}},
		JobId:     "job-id",
		Namespace: "default",
		NodeName:  "node",
		NodeId:    "node-id",
	}
}

func TestStartTaskDecodesConfigAndConvertsTask(t *testing.T) {
	f := &fakeDriver{}
	c := dial(t, f)
	task := agentTaskConfig(t, c, map[string]any{
		"command": "/bin/serve",
		"args":    []string{"-p", "8080"},
		"ratio":   "0.1", // not an exact float64: the agent sends a decimal string
		"labels":  map[string]any{"team": "ml"},
		"limits":  map[string]any{"cpu": 2},
	})
	if _, err := c.StartTask(ctxT(t), &driverspb.StartTaskRequest{Task: task}); err != nil {
		t.Fatal(err)
	}
	if len(f.rec().started) != 1 {
		t.Fatalf("StartTask called %d times", len(f.rec().started))
	}
	got := f.rec().started[0]
	wantDC := &testTaskConfig{
		Command: "/bin/serve", Args: []string{"-p", "8080"}, Count: 1, Ratio: 0.1,
		Labels: map[string]string{"team": "ml"}, Timeout: 5 * time.Second, Limits: testLimits{CPU: 2},
	}
	if !reflect.DeepEqual(got.DriverConfig, wantDC) {
		t.Fatalf("DriverConfig = %#v, want %#v", got.DriverConfig, wantDC)
	}
	want := &TaskConfig{
		ID: "alloc1/web/abcdefgh", Name: "web", JobName: "job", JobID: "job-id", TaskGroupName: "group",
		Namespace: "default", AllocID: "alloc1", NodeName: "node", NodeID: "node-id",
		DriverConfig: wantDC, RawDriverConfig: task.GetMsgpackDriverConfig(),
		Env:       map[string]string{"NOMAD_TASK_NAME": "web"},
		DeviceEnv: map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-1"},
		Resources: &Resources{
			CPUShares: 500, MemoryMB: 256, MemoryMaxMB: 512,
			Linux: &LinuxResources{CPUShares: 500, MemoryLimitBytes: 512 << 20, CpusetCpus: "0,1",
				PercentTicks: 0.25, CpusetCgroupPath: "/nomad.slice/x.scope"},
			Ports: []PortMapping{{Label: "http", Value: 25000, To: 8080, HostIP: "10.0.0.1"}},
		},
		Mounts:     []Mount{{TaskPath: "/data", HostPath: "/srv/data", Readonly: true, PropagationMode: "private"}},
		Devices:    []DeviceConfig{{TaskPath: "/dev/nvidia0", HostPath: "/dev/nvidia0", Permissions: "rwm"}},
		User:       "nobody",
		AllocDir:   "/var/nomad/alloc/alloc1",
		StdoutPath: "/var/nomad/alloc/alloc1/alloc/logs/.web.stdout.fifo",
		StderrPath: "/var/nomad/alloc/alloc1/alloc/logs/.web.stderr.fifo",
		NetworkIsolation: &NetworkIsolationSpec{Mode: NetIsolationGroup, Path: "/var/run/netns/x",
			Labels: map[string]string{"a": "b"}, Hostname: "h", Address: "10.1.1.1"},
		DNS: &DNSConfig{Servers: []string{"1.1.1.1"}, Searches: []string{"local"}, Options: []string{"ndots:2"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("task config\n got %#v\nwant %#v", got, want)
	}
}

func TestStartTaskHandle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(cfg *TaskConfig) (*TaskHandle, *NetworkOverride, error)
		check func(t *testing.T, req *driverspb.TaskConfig, resp *driverspb.StartTaskResponse)
	}{
		{
			name: "echoed config, version defaulted",
			start: func(cfg *TaskConfig) (*TaskHandle, *NetworkOverride, error) {
				return &TaskHandle{Config: cfg, State: TaskStateRunning, DriverState: []byte("pid=42")}, nil, nil
			},
			check: func(t *testing.T, req *driverspb.TaskConfig, resp *driverspb.StartTaskResponse) {
				h := resp.GetHandle()
				if h.GetVersion() != 1 || h.GetState() != driverspb.TaskState_RUNNING || string(h.GetDriverState()) != "pid=42" {
					t.Fatalf("handle = %v", h)
				}
				if !proto.Equal(h.GetConfig(), req) {
					t.Fatalf("handle config differs from the request\n got %v\nwant %v", h.GetConfig(), req)
				}
			},
		},
		{
			name:  "nil handle",
			start: func(*TaskConfig) (*TaskHandle, *NetworkOverride, error) { return nil, nil, nil },
			check: func(t *testing.T, req *driverspb.TaskConfig, resp *driverspb.StartTaskResponse) {
				if resp.GetHandle().GetVersion() != 1 || !proto.Equal(resp.GetHandle().GetConfig(), req) {
					t.Fatalf("handle = %v", resp.GetHandle())
				}
			},
		},
		{
			name: "handle without config id keeps its version",
			start: func(*TaskConfig) (*TaskHandle, *NetworkOverride, error) {
				return &TaskHandle{Version: 3, Config: &TaskConfig{Name: "web"}}, nil, nil
			},
			check: func(t *testing.T, req *driverspb.TaskConfig, resp *driverspb.StartTaskResponse) {
				if resp.GetHandle().GetVersion() != 3 || !proto.Equal(resp.GetHandle().GetConfig(), req) {
					t.Fatalf("handle = %v", resp.GetHandle())
				}
			},
		},
		{
			name: "same id without raw config gets the request's bytes",
			start: func(cfg *TaskConfig) (*TaskHandle, *NetworkOverride, error) {
				return &TaskHandle{Config: &TaskConfig{ID: cfg.ID, Name: cfg.Name}}, nil, nil
			},
			check: func(t *testing.T, req *driverspb.TaskConfig, resp *driverspb.StartTaskResponse) {
				hc := resp.GetHandle().GetConfig()
				if hc.GetId() != req.GetId() || string(hc.GetMsgpackDriverConfig()) != string(req.GetMsgpackDriverConfig()) {
					t.Fatalf("handle config = %v", hc)
				}
			},
		},
		{
			name: "own config and network override kept",
			start: func(*TaskConfig) (*TaskHandle, *NetworkOverride, error) {
				return &TaskHandle{Version: 2, Config: &TaskConfig{ID: "other"}},
					&NetworkOverride{PortMap: map[string]int32{"http": 8080}, Addr: "10.0.0.9", AutoAdvertise: true}, nil
			},
			check: func(t *testing.T, _ *driverspb.TaskConfig, resp *driverspb.StartTaskResponse) {
				hc := resp.GetHandle().GetConfig()
				if hc.GetId() != "other" || len(hc.GetMsgpackDriverConfig()) != 0 {
					t.Fatalf("handle config = %v", hc)
				}
				want := &driverspb.NetworkOverride{PortMap: map[string]int32{"http": 8080}, Addr: "10.0.0.9", AutoAdvertise: true}
				if !proto.Equal(resp.GetNetworkOverride(), want) {
					t.Fatalf("network override = %v", resp.GetNetworkOverride())
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, &fakeDriver{startFn: tc.start})
			req := agentTaskConfig(t, c, map[string]any{"command": "x"})
			resp, err := c.StartTask(ctxT(t), &driverspb.StartTaskRequest{Task: req})
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, req, resp)
		})
	}
}

func TestStartTaskErrors(t *testing.T) {
	bad, err := msgpack.Marshal(map[string]any{"command": "x", "count": "many"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		task        *driverspb.TaskConfig
		startErr    error
		code        codes.Code
		inMessage   string
		recoverable *bool // nil: no detail expected
		called      bool
	}{
		{name: "undecodable field", task: &driverspb.TaskConfig{Id: "a/t/1", MsgpackDriverConfig: bad},
			code: codes.InvalidArgument, inMessage: "count", recoverable: new(false)},
		{name: "missing required field", task: &driverspb.TaskConfig{Id: "a/t/1"},
			code: codes.InvalidArgument, inMessage: "command", recoverable: new(false)},
		{name: "array32 header claiming 4G elements", task: &driverspb.TaskConfig{Id: "a/t/1", MsgpackDriverConfig: []byte{0xdd, 0xff, 0xff, 0xff, 0xff}},
			code: codes.InvalidArgument, inMessage: "config is not valid msgpack: offset 0: array of 4294967295 elements", recoverable: new(false)},
		{name: "recoverable", startErr: NewRecoverableError(errors.New("image pull timed out"), true),
			code: codes.FailedPrecondition, inMessage: "image pull timed out", recoverable: new(true), called: true},
		{name: "wrapped unrecoverable", startErr: fmt.Errorf("start: %w", NewRecoverableError(errors.New("no such gpu"), false)),
			code: codes.FailedPrecondition, inMessage: "start: no such gpu", recoverable: new(false), called: true},
		{name: "plain error", startErr: errors.New("boom"), code: codes.Unknown, inMessage: "boom", called: true},
		{name: "no task", code: codes.InvalidArgument, inMessage: "missing task"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeDriver{startFn: func(*TaskConfig) (*TaskHandle, *NetworkOverride, error) { return nil, nil, tc.startErr }}
			c := dial(t, f)
			task := tc.task
			if task == nil && tc.name != "no task" {
				task = agentTaskConfig(t, c, map[string]any{"command": "x"})
			}
			_, err := c.StartTask(ctxT(t), &driverspb.StartTaskRequest{Task: task})
			wantCode(t, err, tc.code)
			if !strings.Contains(status.Convert(err).Message(), tc.inMessage) {
				t.Fatalf("message %q does not mention %q", status.Convert(err).Message(), tc.inMessage)
			}
			if tc.recoverable == nil {
				if n := len(status.Convert(err).Details()); n != 0 {
					t.Fatalf("unexpected details: %v", status.Convert(err).Details())
				}
			} else {
				if got := recoverableDetail(t, err); got != *tc.recoverable {
					t.Fatalf("recoverable = %v, want %v", got, *tc.recoverable)
				}
				var re *RecoverableError
				if !errors.As(FromStatus(err), &re) || re.Recoverable != *tc.recoverable {
					t.Fatalf("FromStatus(%v) = %v", err, FromStatus(err))
				}
			}
			if called := len(f.rec().started) > 0; called != tc.called {
				t.Fatalf("plugin StartTask called = %v, want %v", called, tc.called)
			}
		})
	}
}

func TestRecoverTask(t *testing.T) {
	raw, err := msgpack.Marshal(map[string]any{"command": "/bin/serve", "count": 4})
	if err != nil {
		t.Fatal(err)
	}
	handle := func(id string, cfg []byte) *driverspb.TaskHandle {
		return &driverspb.TaskHandle{
			Version: 1, State: driverspb.TaskState_RUNNING, DriverState: []byte("pid=42"),
			Config: &driverspb.TaskConfig{Id: id, Name: "web", AllocId: "alloc1", MsgpackDriverConfig: cfg},
		}
	}
	for _, tc := range []struct {
		name       string
		req        *driverspb.RecoverTaskRequest
		recoverErr error
		code       codes.Code
		wantID     string
		wantDC     any
	}{
		{name: "after client restart: no task_id, no raw config",
			req: &driverspb.RecoverTaskRequest{Handle: handle("alloc1/web/1", nil)}, wantID: "alloc1/web/1"},
		{name: "after plugin crash: raw config decoded",
			req:    &driverspb.RecoverTaskRequest{Handle: handle("alloc1/web/1", raw)},
			wantID: "alloc1/web/1", wantDC: &testTaskConfig{Command: "/bin/serve", Count: 4, Timeout: 5 * time.Second}},
		{name: "undecodable raw config is ignored",
			req: &driverspb.RecoverTaskRequest{Handle: handle("alloc1/web/1", []byte{0xc1})}, wantID: "alloc1/web/1"},
		{name: "raw config claiming 4 GiB is ignored",
			req: &driverspb.RecoverTaskRequest{Handle: handle("alloc1/web/1", []byte{0x81, 0xa7, 'c', 'o', 'm', 'm', 'a', 'n', 'd', 0xdb, 0xff, 0xff, 0xff, 0xff})}, wantID: "alloc1/web/1"},
		{name: "task_id used when config has no id",
			req: &driverspb.RecoverTaskRequest{TaskId: "alloc1/web/2", Handle: handle("", nil)}, wantID: "alloc1/web/2"},
		{name: "no handle", req: &driverspb.RecoverTaskRequest{TaskId: "x"}, code: codes.InvalidArgument},
		{name: "handle without config", req: &driverspb.RecoverTaskRequest{Handle: &driverspb.TaskHandle{Version: 1}}, code: codes.InvalidArgument},
		{name: "no id anywhere", req: &driverspb.RecoverTaskRequest{Handle: handle("", nil)}, code: codes.InvalidArgument},
		{name: "plugin error", req: &driverspb.RecoverTaskRequest{Handle: handle("alloc1/web/1", nil)},
			recoverErr: errors.New("process gone"), code: codes.Unknown, wantID: "alloc1/web/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeDriver{recoverErr: tc.recoverErr}
			c := dial(t, f)
			_, err := c.RecoverTask(ctxT(t), tc.req)
			wantCode(t, err, tc.code)
			if tc.wantID == "" {
				if len(f.rec().recovered) != 0 {
					t.Fatalf("plugin called with %v", f.rec().recovered)
				}
				return
			}
			if len(f.rec().recovered) != 1 {
				t.Fatalf("plugin RecoverTask called %d times", len(f.rec().recovered))
			}
			h := f.rec().recovered[0]
			if h.Config.ID != tc.wantID || h.Version != 1 || h.State != TaskStateRunning || string(h.DriverState) != "pid=42" {
				t.Fatalf("handle = %+v, config = %+v", h, h.Config)
			}
			if tc.wantDC == nil && h.Config.DriverConfig != nil {
				t.Fatalf("DriverConfig = %#v, want nil", h.Config.DriverConfig)
			}
			if tc.wantDC != nil && !reflect.DeepEqual(h.Config.DriverConfig, tc.wantDC) {
				t.Fatalf("DriverConfig = %#v, want %#v", h.Config.DriverConfig, tc.wantDC)
			}
		})
	}
}

func TestWaitTaskBlocksUntilExitForEveryWaiter(t *testing.T) {
	f := &fakeDriver{}
	c := dial(t, f)
	type answer struct {
		resp *driverspb.WaitTaskResponse
		err  error
	}
	answers := make(chan answer, 3)
	for range 3 {
		go func() {
			resp, err := c.WaitTask(ctxT(t), &driverspb.WaitTaskRequest{TaskId: "t1"})
			answers <- answer{resp, err}
		}()
	}
	select {
	case a := <-answers:
		t.Fatalf("WaitTask returned before the task exited: %v %v", a.resp, a.err)
	case <-time.After(300 * time.Millisecond):
	}
	f.finish("t1", &ExitResult{ExitCode: 3, Signal: 9, OOMKilled: true, Err: errors.New("out of memory")})
	want := &driverspb.WaitTaskResponse{Result: &driverspb.ExitResult{ExitCode: 3, Signal: 9, OomKilled: true}, Err: "out of memory"}
	for range 3 {
		select {
		case a := <-answers:
			if a.err != nil || !proto.Equal(a.resp, want) {
				t.Fatalf("WaitTask = %v, %v; want %v", a.resp, a.err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("WaitTask did not return after the exit")
		}
	}
	// After the exit, a new wait answers at once.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := c.WaitTask(ctx, &driverspb.WaitTaskRequest{TaskId: "t1"})
	if err != nil || !proto.Equal(resp, want) {
		t.Fatalf("late WaitTask = %v, %v", resp, err)
	}
	got := WaitResponseFromProto(resp)
	if got.ExitCode != 3 || got.Err == nil || got.Err.Error() != "out of memory" {
		t.Fatalf("WaitResponseFromProto = %+v", got)
	}
}

func TestWaitTaskEnds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		f       *fakeDriver
		taskID  string
		timeout time.Duration
		cancel  time.Duration
		code    codes.Code
	}{
		{name: "client cancels", f: &fakeDriver{}, taskID: "t1", cancel: 100 * time.Millisecond, code: codes.Canceled},
		{name: "client deadline", f: &fakeDriver{}, taskID: "t1", timeout: 100 * time.Millisecond, code: codes.DeadlineExceeded},
		{name: "no task id", f: &fakeDriver{}, code: codes.InvalidArgument},
		{name: "unknown task", f: &fakeDriver{waitErr: fmt.Errorf("t9: %w", ErrTaskNotFound)}, taskID: "t9", code: codes.NotFound},
		{name: "plugin error", f: &fakeDriver{waitErr: errors.New("boom")}, taskID: "t1", code: codes.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, tc.f)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.timeout > 0 {
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			if tc.cancel > 0 {
				time.AfterFunc(tc.cancel, cancel)
			}
			start := time.Now()
			_, err := c.WaitTask(ctx, &driverspb.WaitTaskRequest{TaskId: tc.taskID})
			wantCode(t, err, tc.code)
			if time.Since(start) > 5*time.Second {
				t.Fatal("WaitTask took too long to end")
			}
		})
	}
}

func TestWaitTaskServerSideWaitEndsOnCancel(t *testing.T) {
	// The fake's WaitTask goroutine ends only when its ctx does; a server
	// that did not pass the RPC ctx through would leave it running.
	f := &fakeDriver{}
	c := dial(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := c.WaitTask(ctx, &driverspb.WaitTaskRequest{TaskId: "t1"})
	wantCode(t, err, codes.Canceled)
}

func TestStopDestroySignalShutdown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		callErr error
		code    codes.Code
	}{
		{"success", nil, codes.OK},
		{"plugin error", errors.New("kill failed"), codes.Unknown},
		{"unknown task", fmt.Errorf("t1: %w", ErrTaskNotFound), codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeDriver{callErr: tc.callErr}
			c := dial(t, f)
			ctx := ctxT(t)
			_, err := c.StopTask(ctx, &driverspb.StopTaskRequest{TaskId: "t1", Timeout: durationpb.New(5 * time.Second), Signal: "SIGTERM"})
			wantCode(t, err, tc.code)
			_, err = c.StopTask(ctx, &driverspb.StopTaskRequest{TaskId: "t2"})
			wantCode(t, err, tc.code)
			_, err = c.DestroyTask(ctx, &driverspb.DestroyTaskRequest{TaskId: "t1", Force: true})
			wantCode(t, err, tc.code)
			_, err = c.SignalTask(ctx, &driverspb.SignalTaskRequest{TaskId: "t1", Signal: "SIGHUP"})
			wantCode(t, err, tc.code)
			_, err = c.Shutdown(ctx, &driverspb.ShutdownRequest{})
			wantCode(t, err, tc.code)
			want := []string{"stop t1 SIGTERM", "stop t2 ", "destroy t1 force", "signal t1 SIGHUP"}
			if !reflect.DeepEqual(f.rec().calls, want) {
				t.Fatalf("calls = %q, want %q", f.rec().calls, want)
			}
			if f.rec().stopTimeout != 0 || f.rec().shutdowns != 1 {
				t.Fatalf("last stop timeout = %v (want 0 for none), shutdowns = %d", f.rec().stopTimeout, f.rec().shutdowns)
			}
			if tc.code != codes.OK && !strings.Contains(status.Convert(err).Message(), tc.callErr.Error()) {
				t.Fatalf("message %q lost the plugin's %q", status.Convert(err).Message(), tc.callErr)
			}
		})
	}
}

func TestStopTaskTimeout(t *testing.T) {
	f := &fakeDriver{}
	c := dial(t, f)
	if _, err := c.StopTask(ctxT(t), &driverspb.StopTaskRequest{TaskId: "t1", Timeout: durationpb.New(7 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if f.rec().stopTimeout != 7*time.Second {
		t.Fatalf("timeout = %v", f.rec().stopTimeout)
	}
}

func TestInitAndNetworks(t *testing.T) {
	c := dial(t, &fakeDriver{})
	ctx := ctxT(t)
	if _, err := c.Init(ctx, &driverspb.InitRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreateNetwork(ctx, &driverspb.CreateNetworkRequest{AllocId: "a"})
	wantCode(t, err, codes.Unimplemented)
	_, err = c.DestroyNetwork(ctx, &driverspb.DestroyNetworkRequest{AllocId: "a"})
	wantCode(t, err, codes.Unimplemented)
}

func TestInspectTask(t *testing.T) {
	started := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, tc := range []struct {
		name   string
		status *TaskStatus
		err    error
		code   codes.Code
		want   *TaskStatus
	}{
		{name: "exited",
			status: &TaskStatus{ID: "t1", Name: "web", State: TaskStateExited, StartedAt: started, CompletedAt: started.Add(time.Minute),
				ExitResult: &ExitResult{ExitCode: 2}, Attributes: map[string]string{"pid": "42"}},
			want: &TaskStatus{ID: "t1", Name: "web", State: TaskStateExited, StartedAt: started, CompletedAt: started.Add(time.Minute),
				ExitResult: &ExitResult{ExitCode: 2}, Attributes: map[string]string{"pid": "42"}}},
		{name: "running, nothing known",
			status: &TaskStatus{ID: "t1", State: TaskStateRunning},
			want:   &TaskStatus{ID: "t1", State: TaskStateRunning, ExitResult: &ExitResult{}}},
		{name: "nil status", want: &TaskStatus{ID: "t1", ExitResult: &ExitResult{}}},
		{name: "unknown task", err: ErrTaskNotFound, code: codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, &fakeDriver{inspect: tc.status, inspectErr: tc.err})
			resp, err := c.InspectTask(ctxT(t), &driverspb.InspectTaskRequest{TaskId: "t1"})
			wantCode(t, err, tc.code)
			if err != nil {
				return
			}
			task := resp.GetTask()
			if task == nil || task.StartedAt == nil || task.CompletedAt == nil || task.Result == nil || resp.GetDriver() == nil {
				t.Fatalf("response has nil fields the client dereferences: %v", resp)
			}
			got := InspectResponseFromProto(resp)
			if !got.StartedAt.Equal(tc.want.StartedAt) || !got.CompletedAt.Equal(tc.want.CompletedAt) {
				t.Fatalf("times = %v, %v; want %v, %v", got.StartedAt, got.CompletedAt, tc.want.StartedAt, tc.want.CompletedAt)
			}
			got.StartedAt, got.CompletedAt = tc.want.StartedAt, tc.want.CompletedAt
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("status = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestTaskStats(t *testing.T) {
	stamp := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	samples := []*TaskResourceUsage{
		{
			Timestamp: stamp,
			Usage: ResourceUsage{
				CPU:    CPUStats{Percent: 150, TotalTicks: 3000, Measured: []string{CPUPercent, CPUTotalTicks, "Bogus"}},
				Memory: MemoryStats{RSS: 1 << 20, Usage: 2 << 20, Swap: 3, Measured: []string{MemRSS, MemUsage, MemSwap}},
			},
			Pids: map[string]*ResourceUsage{"42": {CPU: CPUStats{Percent: 1}}, "43": nil},
		},
		nil, // skipped, not sent as an empty sample
		{Usage: ResourceUsage{Memory: MemoryStats{RSS: 7, Measured: []string{MemRSS}}}},
	}
	for _, tc := range []struct {
		name     string
		interval *durationpb.Duration
		want     time.Duration
	}{
		{"client interval", durationpb.New(250 * time.Millisecond), 250 * time.Millisecond},
		{"no interval", nil, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeDriver{stats: samples}
			c := dial(t, f)
			stream, err := c.TaskStats(ctxT(t), &driverspb.TaskStatsRequest{TaskId: "t1", CollectionInterval: tc.interval})
			if err != nil {
				t.Fatal(err)
			}
			var got []*driverspb.TaskStats
			for {
				resp, err := stream.Recv()
				if err != nil {
					if err.Error() != "EOF" {
						t.Fatalf("stream ended with %v, want EOF", err)
					}
					break
				}
				got = append(got, resp.GetStats())
			}
			if len(got) != 2 {
				t.Fatalf("got %d samples, want 2", len(got))
			}
			for _, s := range got {
				if s.GetTimestamp() == nil || s.GetAggResourceUsage().GetCpu() == nil || s.GetAggResourceUsage().GetMemory() == nil || s.GetId() != "t1" {
					t.Fatalf("sample misses required fields: %v", s)
				}
			}
			if !got[0].GetTimestamp().AsTime().Equal(stamp) {
				t.Fatalf("timestamp = %v", got[0].GetTimestamp().AsTime())
			}
			if age := time.Since(got[1].GetTimestamp().AsTime()); age < 0 || age > 10*time.Second {
				t.Fatalf("a sample without timestamp should be stamped now, got %v", got[1].GetTimestamp().AsTime())
			}
			cpu, mem := got[0].GetAggResourceUsage().GetCpu(), got[0].GetAggResourceUsage().GetMemory()
			if !reflect.DeepEqual(cpu.GetMeasuredFields(), []driverspb.CPUUsage_Fields{driverspb.CPUUsage_PERCENT, driverspb.CPUUsage_TOTAL_TICKS}) {
				t.Fatalf("cpu measured = %v", cpu.GetMeasuredFields())
			}
			if !reflect.DeepEqual(mem.GetMeasuredFields(), []driverspb.MemoryUsage_Fields{driverspb.MemoryUsage_RSS, driverspb.MemoryUsage_USAGE, driverspb.MemoryUsage_SWAP}) {
				t.Fatalf("memory measured = %v", mem.GetMeasuredFields())
			}
			if cpu.GetPercent() != 150 || cpu.GetTotalTicks() != 3000 || mem.GetRss() != 1<<20 || mem.GetUsage() != 2<<20 || mem.GetSwap() != 3 {
				t.Fatalf("values = %v %v", cpu, mem)
			}
			pids := got[0].GetResourceUsageByPid()
			if len(pids) != 2 || pids["42"].GetCpu().GetPercent() != 1 || pids["43"].GetCpu() == nil || pids["43"].GetMemory() == nil {
				t.Fatalf("by pid = %v", pids)
			}
			if f.rec().statsInterval != tc.want {
				t.Fatalf("interval = %v, want %v", f.rec().statsInterval, tc.want)
			}
		})
	}
}

func TestTaskStatsOpenError(t *testing.T) {
	c := dial(t, &fakeDriver{statsErr: fmt.Errorf("t1: %w", ErrTaskNotFound)})
	stream, err := c.TaskStats(ctxT(t), &driverspb.TaskStatsRequest{TaskId: "t1"})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.NotFound)
}

// recvAsync runs one Recv in the background so a test can tell a stream
// that stays open from one that ended.
func recvAsync[T any](recv func() (T, error)) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := recv()
		done <- err
	}()
	return done
}

func expectOpenThenCancel(t *testing.T, next <-chan error, cancel context.CancelFunc) {
	t.Helper()
	select {
	case err := <-next:
		t.Fatalf("stream ended while the client still wanted it: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-next:
		wantCode(t, err, codes.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("stream did not end after the client cancelled")
	}
}

func TestFingerprintStaysOpen(t *testing.T) {
	healthy := &Fingerprint{
		Health: HealthHealthy, HealthDescription: "ready",
		Attributes: map[string]structs.Attribute{
			"driver.fake.version": structs.NewString("1.0"),
			"driver.fake.bad":     {Bool: new(true), Unit: "MiB"}, // the client would reject it
		},
	}
	for _, tc := range []struct {
		name  string
		f     func() *fakeDriver
		first *driverspb.FingerprintResponse
	}{
		{
			name: "source closes after one fingerprint",
			f: func() *fakeDriver {
				ch := make(chan *Fingerprint, 2)
				ch <- nil // ignored
				ch <- healthy
				close(ch)
				return &fakeDriver{fpCh: ch}
			},
			first: &driverspb.FingerprintResponse{
				Health: driverspb.FingerprintResponse_HEALTHY, HealthDescription: "ready",
				Attributes: map[string]*structspb.Attribute{"driver.fake.version": {Value: &structspb.Attribute_StringVal{StringVal: "1.0"}}},
			},
		},
		{
			name: "fingerprint error",
			f: func() *fakeDriver {
				ch := make(chan *Fingerprint, 1)
				ch <- &Fingerprint{Err: errors.New("nvml gone")}
				return &fakeDriver{fpCh: ch}
			},
			first: &driverspb.FingerprintResponse{Err: "nvml gone"},
		},
		{
			name:  "open fails",
			f:     func() *fakeDriver { return &fakeDriver{fpOpenErr: errors.New("no runtime")} },
			first: &driverspb.FingerprintResponse{Health: driverspb.FingerprintResponse_UNHEALTHY, HealthDescription: "fingerprinting failed: no runtime"},
		},
		{
			name: "source closes without a fingerprint",
			f: func() *fakeDriver {
				ch := make(chan *Fingerprint)
				close(ch)
				return &fakeDriver{fpCh: ch}
			},
			first: &driverspb.FingerprintResponse{Health: driverspb.FingerprintResponse_UNHEALTHY, HealthDescription: "driver fingerprinting stopped"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := dial(t, tc.f())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stream, err := c.Fingerprint(ctx, &driverspb.FingerprintRequest{})
			if err != nil {
				t.Fatal(err)
			}
			first, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(first, tc.first) {
				t.Fatalf("first fingerprint = %v, want %v", first, tc.first)
			}
			expectOpenThenCancel(t, recvAsync(stream.Recv), cancel)
		})
	}
}

func TestTaskEventsStayOpen(t *testing.T) {
	stamp := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		f    func() *fakeDriver
		want []*driverspb.DriverTaskEvent
	}{
		{
			name: "source closes after events",
			f: func() *fakeDriver {
				ch := make(chan *TaskEvent, 2)
				ch <- &TaskEvent{TaskID: "t1", AllocID: "a1", TaskName: "web", Timestamp: stamp, Message: "pulling", Annotations: map[string]string{"k": "v"}}
				ch <- nil
				close(ch)
				return &fakeDriver{evCh: ch}
			},
			want: []*driverspb.DriverTaskEvent{{TaskId: "t1", AllocId: "a1", TaskName: "web", Timestamp: timestamppb.New(stamp),
				Message: "pulling", Annotations: map[string]string{"k": "v"}}},
		},
		{
			name: "open fails",
			f:    func() *fakeDriver { return &fakeDriver{evOpenErr: errors.New("no events")} },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := dial(t, tc.f())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stream, err := c.TaskEvents(ctx, &driverspb.TaskEventsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				got, err := stream.Recv()
				if err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(got, want) {
					t.Fatalf("event = %v, want %v", got, want)
				}
			}
			expectOpenThenCancel(t, recvAsync(stream.Recv), cancel)
		})
	}
}

func TestCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name string
		caps *Capabilities
		want *driverspb.DriverCapabilities
	}{
		{
			name: "all fields",
			caps: &Capabilities{
				SendSignals: true, Exec: true, FSIsolation: FSIsolationImage,
				NetIsolationModes: []NetIsolationMode{NetIsolationHost, NetIsolationGroup, NetIsolationTask, NetIsolationNone},
				MountConfigs:      MountConfigsNone, DisableLogCollection: true, DynamicWorkloadUsers: true,
			},
			want: &driverspb.DriverCapabilities{
				SendSignals: true, Exec: true, FsIsolation: driverspb.DriverCapabilities_IMAGE,
				NetworkIsolationModes: []driverspb.NetworkIsolationSpec_NetworkIsolationMode{
					driverspb.NetworkIsolationSpec_HOST, driverspb.NetworkIsolationSpec_GROUP,
					driverspb.NetworkIsolationSpec_TASK, driverspb.NetworkIsolationSpec_NONE},
				MountConfigs: driverspb.DriverCapabilities_NO_MOUNTS, DisableLogCollection: true, DynamicWorkloadUsers: true,
			},
		},
		{name: "nil", want: &driverspb.DriverCapabilities{}},
		{
			name: "network creation is never advertised",
			caps: &Capabilities{MustInitiateNetwork: true, FSIsolation: FSIsolationChroot},
			want: &driverspb.DriverCapabilities{FsIsolation: driverspb.DriverCapabilities_CHROOT, MountConfigs: driverspb.DriverCapabilities_ANY_MOUNTS},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, &fakeDriver{caps: tc.caps})
			resp, err := c.Capabilities(ctxT(t), &driverspb.CapabilitiesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetCapabilities() == nil || !proto.Equal(resp.GetCapabilities(), tc.want) {
				t.Fatalf("capabilities = %v, want %v", resp.GetCapabilities(), tc.want)
			}
		})
	}
}

func TestExecTask(t *testing.T) {
	for _, tc := range []struct {
		name    string
		result  *ExecTaskResult
		callErr error
		code    codes.Code
		want    *driverspb.ExecTaskResponse
	}{
		{name: "output and exit code",
			result: &ExecTaskResult{Stdout: []byte("ok"), Stderr: []byte("warn"), ExitResult: &ExitResult{ExitCode: 1}},
			want:   &driverspb.ExecTaskResponse{Stdout: []byte("ok"), Stderr: []byte("warn"), Result: &driverspb.ExitResult{ExitCode: 1}}},
		{name: "no exit result", result: &ExecTaskResult{Stdout: []byte("ok")},
			want: &driverspb.ExecTaskResponse{Stdout: []byte("ok"), Result: &driverspb.ExitResult{}}},
		{name: "nil result", want: &driverspb.ExecTaskResponse{Result: &driverspb.ExitResult{}}},
		{name: "plugin error", callErr: errors.New("no such task"), code: codes.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeDriver{execResult: tc.result, callErr: tc.callErr}
			c := dial(t, f)
			resp, err := c.ExecTask(ctxT(t), &driverspb.ExecTaskRequest{TaskId: "t1", Command: []string{"sh", "-c", "true"}, Timeout: durationpb.New(3 * time.Second)})
			wantCode(t, err, tc.code)
			if err != nil {
				return
			}
			if resp.GetResult() == nil || !proto.Equal(resp, tc.want) {
				t.Fatalf("response = %v, want %v", resp, tc.want)
			}
			if !reflect.DeepEqual(f.rec().execCmd, []string{"sh", "-c", "true"}) || f.rec().execTimeout != 3*time.Second {
				t.Fatalf("plugin got %q, %v", f.rec().execCmd, f.rec().execTimeout)
			}
		})
	}
}
