package drivers

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nomad-gpu/nomad-gpu/wire/base"
	driverspb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/drivers"
	hclspecpb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/hclspec"
	"github.com/nomad-gpu/nomad-gpu/wire/schema"
)

// PluginSet is the go-plugin map the agent dispenses from, "base" and
// "driver"; base.Serve serves it.
func PluginSet(impl Plugin, logger hclog.Logger) map[string]plugin.Plugin {
	return base.PluginSet(impl, logger, "driver",
		func(s *grpc.Server, logger hclog.Logger) { driverspb.RegisterDriverServer(s, NewServer(impl, logger)) },
		func(c *grpc.ClientConn) any { return driverspb.NewDriverClient(c) })
}

// NewServer returns the gRPC Driver service for impl, for callers that run
// their own grpc.Server (go-plugin users want PluginSet).
func NewServer(impl Plugin, logger hclog.Logger) driverspb.DriverServer {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &server{impl: impl, logger: logger}
}

type server struct {
	driverspb.UnimplementedDriverServer
	impl   Plugin
	logger hclog.Logger
}

// Init needs nothing from the plugin; the client calls it after every
// dispense, including reattach, and only wants success.
func (s *server) Init(context.Context, *driverspb.InitRequest) (*driverspb.InitResponse, error) {
	return &driverspb.InitResponse{}, nil
}

// TaskConfigSchema never answers with a nil spec: the task runner turns
// one into a start failure.
func (s *server) TaskConfigSchema(context.Context, *driverspb.TaskConfigSchemaRequest) (*driverspb.TaskConfigSchemaResponse, error) {
	cfg := s.impl.NewTaskConfig()
	if cfg == nil {
		return &driverspb.TaskConfigSchemaResponse{Spec: &hclspecpb.Spec{
			Block: &hclspecpb.Spec_Object{Object: &hclspecpb.Object{}},
		}}, nil
	}
	spec, err := schema.Spec(cfg)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &driverspb.TaskConfigSchemaResponse{Spec: spec}, nil
}

func (s *server) Capabilities(context.Context, *driverspb.CapabilitiesRequest) (*driverspb.CapabilitiesResponse, error) {
	caps := CapabilitiesToProto(s.impl.Capabilities())
	if caps.MustCreateNetwork {
		// The client would then call CreateNetwork, which this adapter does
		// not serve, and fail every allocation with a group network.
		s.logger.Error("driver asks to create networks, which this adapter does not support; not advertising it")
		caps.MustCreateNetwork = false
	}
	return &driverspb.CapabilitiesResponse{Capabilities: caps}, nil
}

// Fingerprint never ends the stream on its own: the client reopens a
// finished stream at once, so ending it would spin a hot loop.
func (s *server) Fingerprint(_ *driverspb.FingerprintRequest, stream driverspb.Driver_FingerprintServer) error {
	ctx := stream.Context()
	ch, err := s.impl.Fingerprint(ctx)
	if err != nil {
		s.logger.Error("driver fingerprint failed to start; reporting unhealthy", "error", err)
		if err := stream.Send(unhealthy("fingerprinting failed: " + err.Error())); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}
	sent := false
	return base.Pump(ctx, ch,
		func(fp *Fingerprint) error {
			if fp == nil {
				return nil
			}
			if err := stream.Send(FingerprintToProto(fp, s.logger)); err != nil {
				return err
			}
			sent = true
			return nil
		},
		func() error {
			s.logger.Error("driver fingerprint source ended early; keeping the stream open")
			if sent {
				return nil
			}
			// The client waits for a first fingerprint before it considers
			// the driver at all.
			return stream.Send(unhealthy("driver fingerprinting stopped"))
		})
}

func unhealthy(desc string) *driverspb.FingerprintResponse {
	return &driverspb.FingerprintResponse{Health: driverspb.FingerprintResponse_UNHEALTHY, HealthDescription: desc}
}

// TaskEvents stays open for the same reason as Fingerprint.
func (s *server) TaskEvents(_ *driverspb.TaskEventsRequest, stream driverspb.Driver_TaskEventsServer) error {
	ctx := stream.Context()
	ch, err := s.impl.TaskEvents(ctx)
	if err != nil {
		s.logger.Error("driver task events failed to start; keeping the stream open", "error", err)
		<-ctx.Done()
		return nil
	}
	return base.Pump(ctx, ch,
		func(ev *TaskEvent) error {
			if ev == nil {
				return nil
			}
			return stream.Send(TaskEventToProto(ev))
		},
		func() error {
			s.logger.Error("driver task event source ended early; keeping the stream open")
			return nil
		})
}

// decodeTaskConfig returns NewTaskConfig's value filled from raw, or nil
// when the plugin declares no task config.
func (s *server) decodeTaskConfig(raw []byte) (any, error) {
	cfg := s.impl.NewTaskConfig()
	if cfg == nil {
		return nil, nil
	}
	if err := schema.DecodeAt(raw, cfg, "config"); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (s *server) StartTask(_ context.Context, req *driverspb.StartTaskRequest) (*driverspb.StartTaskResponse, error) {
	task := req.GetTask()
	if task == nil {
		return nil, status.Error(codes.InvalidArgument, "start task: missing task config")
	}
	cfg := TaskConfigFromProto(task)
	dc, err := s.decodeTaskConfig(task.GetMsgpackDriverConfig())
	if err != nil {
		// Retrying cannot fix a bad job config, so say so explicitly.
		return nil, recoverableStatus(codes.InvalidArgument, "invalid task config: "+err.Error(), false)
	}
	cfg.DriverConfig = dc
	h, net, err := s.impl.StartTask(cfg)
	if err != nil {
		return nil, ToStatus(err, codes.Unknown)
	}
	ph := TaskHandleToProto(h)
	if ph == nil {
		ph = &driverspb.TaskHandle{State: driverspb.TaskState_RUNNING}
	}
	if ph.Version < 1 {
		ph.Version = 1 // 0 marks a pre-0.9 handle to the client
	}
	switch {
	case ph.Config.GetId() == "":
		// Without config.id the client cannot restore the task later and
		// would start it a second time.
		ph.Config = task
	case ph.Config.Id == task.GetId() && len(ph.Config.MsgpackDriverConfig) == 0:
		ph.Config.MsgpackDriverConfig = task.GetMsgpackDriverConfig()
	}
	return &driverspb.StartTaskResponse{Handle: ph, NetworkOverride: NetworkOverrideToProto(net)}, nil
}

// RecoverTask takes the id from the handle: the client sends no task_id.
func (s *server) RecoverTask(_ context.Context, req *driverspb.RecoverTaskRequest) (*driverspb.RecoverTaskResponse, error) {
	ph := req.GetHandle()
	if ph == nil || ph.GetConfig() == nil {
		return nil, status.Error(codes.InvalidArgument, "recover task: handle has no task config")
	}
	h := TaskHandleFromProto(ph)
	if h.Config.ID == "" {
		h.Config.ID = req.GetTaskId()
	}
	if h.Config.ID == "" {
		return nil, status.Error(codes.InvalidArgument, "recover task: handle has no task id")
	}
	if raw := ph.GetConfig().GetMsgpackDriverConfig(); len(raw) > 0 {
		// The plugin must cope with a nil DriverConfig anyway (it is empty
		// after every client restart), so a bad payload is not worth
		// failing a running task's recovery over.
		dc, err := s.decodeTaskConfig(raw)
		if err != nil {
			s.logger.Warn("recover task: ignoring undecodable task config", "task_id", h.Config.ID, "error", err)
		} else {
			h.Config.DriverConfig = dc
		}
	}
	if err := s.impl.RecoverTask(h); err != nil {
		return nil, ToStatus(err, codes.Unknown)
	}
	return &driverspb.RecoverTaskResponse{}, nil
}

// WaitTask is a long poll: the client holds it open until the task exits.
func (s *server) WaitTask(ctx context.Context, req *driverspb.WaitTaskRequest) (*driverspb.WaitTaskResponse, error) {
	id := req.GetTaskId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "wait task: missing task id")
	}
	ch, err := s.impl.WaitTask(ctx, id)
	if err != nil {
		return nil, ToStatus(err, codes.Unknown)
	}
	select {
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case res, ok := <-ch:
		if !ok || res == nil {
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return nil, status.Errorf(codes.Unknown, "wait task %s: ended without an exit result", id)
		}
		return WaitResponseToProto(res), nil
	}
}

func (s *server) StopTask(_ context.Context, req *driverspb.StopTaskRequest) (*driverspb.StopTaskResponse, error) {
	if err := s.impl.StopTask(req.GetTaskId(), req.GetTimeout().AsDuration(), req.GetSignal()); err != nil {
		return nil, ToStatus(err, codes.Unknown)
	}
	return &driverspb.StopTaskResponse{}, nil
}

func (s *server) DestroyTask(_ context.Context, req *driverspb.DestroyTaskRequest) (*driverspb.DestroyTaskResponse, error) {
	if err := s.impl.DestroyTask(req.GetTaskId(), req.GetForce()); err != nil {
		return nil, ToStatus(err, codes.Unknown)
	}
	return &driverspb.DestroyTaskResponse{}, nil
}

func (s *server) InspectTask(_ context.Context, req *driverspb.InspectTaskRequest) (*driverspb.InspectTaskResponse, error) {
	st, err := s.impl.InspectTask(req.GetTaskId())
	if err != nil {
		return nil, ToStatus(err, codes.Unknown)
	}
	if st == nil {
		st = &TaskStatus{ID: req.GetTaskId()}
	}
	return InspectResponseToProto(st), nil
}

// TaskStats ends normally when the plugin's source closes (the task
// exited); the client then reopens it after one interval if still wanted.
func (s *server) TaskStats(req *driverspb.TaskStatsRequest, stream driverspb.Driver_TaskStatsServer) error {
	ctx := stream.Context()
	interval := req.GetCollectionInterval().AsDuration()
	if interval <= 0 {
		interval = time.Second
	}
	ch, err := s.impl.TaskStats(ctx, req.GetTaskId(), interval)
	if err != nil {
		return ToStatus(err, codes.Unknown)
	}
	return base.Pump(ctx, ch, func(u *TaskResourceUsage) error {
		if u == nil {
			return nil
		}
		return stream.Send(TaskStatsToProto(req.GetTaskId(), u))
	}, nil)
}

func (s *server) Shutdown(context.Context, *driverspb.ShutdownRequest) (*driverspb.ShutdownResponse, error) {
	if err := s.impl.Shutdown(); err != nil {
		return nil, ToStatus(err, codes.Unknown)
	}
	return &driverspb.ShutdownResponse{}, nil
}

func (s *server) SignalTask(_ context.Context, req *driverspb.SignalTaskRequest) (*driverspb.SignalTaskResponse, error) {
	if err := s.impl.SignalTask(req.GetTaskId(), req.GetSignal()); err != nil {
		return nil, ToStatus(err, codes.Unknown)
	}
	return &driverspb.SignalTaskResponse{}, nil
}

func (s *server) ExecTask(_ context.Context, req *driverspb.ExecTaskRequest) (*driverspb.ExecTaskResponse, error) {
	res, err := s.impl.ExecTask(req.GetTaskId(), req.GetCommand(), req.GetTimeout().AsDuration())
	if err != nil {
		return nil, ToStatus(err, codes.Unknown)
	}
	return ExecTaskResultToProto(res), nil
}

// CreateNetwork and DestroyNetwork are unimplemented on purpose: the client
// calls them only for drivers advertising must_create_network, which
// Capabilities never does.
func (s *server) CreateNetwork(context.Context, *driverspb.CreateNetworkRequest) (*driverspb.CreateNetworkResponse, error) {
	return nil, status.Error(codes.Unimplemented, "driver does not create networks")
}

func (s *server) DestroyNetwork(context.Context, *driverspb.DestroyNetworkRequest) (*driverspb.DestroyNetworkResponse, error) {
	return nil, status.Error(codes.Unimplemented, "driver does not create networks")
}

// execChunk keeps each output frame well under gRPC's 4 MiB message limit.
const execChunk = 32 << 10

// ExecTaskStreaming serves `nomad alloc exec`: setup first, then stdin,
// terminal sizes and heartbeats from the client; output frames, the two
// close frames and a final exited frame back.
func (s *server) ExecTaskStreaming(stream driverspb.Driver_ExecTaskStreamingServer) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "exec: stream ended before setup")
	}
	if err != nil {
		return err
	}
	setup := first.GetSetup()
	if setup == nil {
		return status.Error(codes.InvalidArgument, "exec: first message must be setup")
	}

	// Cancelled on return, which releases the receive goroutine's waits.
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stdinR, stdinW := io.Pipe()
	// Fails a stdin write still pending when the plugin has returned.
	defer stdinR.Close()
	resize := make(chan TerminalSize, 1)
	go execRecv(ctx, stream, stdinW, resize)

	out := &execSender{stream: stream}
	res, err := s.impl.ExecTaskStreaming(ctx, setup.GetTaskId(), &ExecOptions{
		Command:  setup.GetCommand(),
		Tty:      setup.GetTty(),
		Stdin:    stdinR,
		Stdout:   &execWriter{s: out},
		Stderr:   &execWriter{s: out, stderr: true},
		ResizeCh: resize,
	})
	if err != nil {
		// Output writes that outlive the plugin call must not reach a
		// stream whose handler has returned.
		out.stop()
		return ToStatus(err, codes.Unknown)
	}
	return out.finish(res)
}

// execRecv feeds client frames to the plugin until the client half-closes
// or the stream ends. Stdin goes through a queue so a plugin that is not
// reading stdin does not hold up terminal resizes.
func execRecv(ctx context.Context, stream driverspb.Driver_ExecTaskStreamingServer, stdinW *io.PipeWriter, resize chan TerminalSize) {
	defer close(resize)
	queue := make(chan []byte, 64)
	go pumpStdin(queue, stdinW)
	queueOpen := true
	closeQueue := func() {
		if queueOpen {
			queueOpen = false
			close(queue)
		}
	}
	defer closeQueue()
	for {
		msg, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				// Unblock a plugin reading stdin now; queued data is moot.
				stdinW.CloseWithError(err)
			}
			return
		}
		if sz := msg.GetTtySize(); sz != nil {
			// Only the latest size matters: replace one not yet read.
			select {
			case <-resize:
			default:
			}
			resize <- TerminalSize{Height: int(sz.GetHeight()), Width: int(sz.GetWidth())}
		}
		in := msg.GetStdin()
		if in == nil || !queueOpen {
			continue
		}
		if data := in.GetData(); len(data) > 0 {
			select {
			case queue <- data:
			case <-ctx.Done():
				stdinW.CloseWithError(ctx.Err())
				return
			}
		}
		if in.GetClose() {
			closeQueue()
		}
	}
}

// pumpStdin closes the pipe (EOF for the plugin) once the queue is closed
// and drained; after a failed write it only drains, so the sender never blocks.
func pumpStdin(queue <-chan []byte, w *io.PipeWriter) {
	for data := range queue {
		if _, err := w.Write(data); err != nil {
			for range queue {
			}
			return
		}
	}
	w.Close()
}

// execSender serialises frames: grpc streams do not allow concurrent Send,
// and the plugin may write stdout and stderr from different goroutines.
type execSender struct {
	mu                     sync.Mutex
	stream                 driverspb.Driver_ExecTaskStreamingServer
	stdoutDone, stderrDone bool
	stopped                bool
}

func ioFrame(stderr bool, op *driverspb.ExecTaskStreamingIOOperation) *driverspb.ExecTaskStreamingResponse {
	if stderr {
		return &driverspb.ExecTaskStreamingResponse{Stderr: op}
	}
	return &driverspb.ExecTaskStreamingResponse{Stdout: op}
}

func (s *execSender) done(stderr bool) *bool {
	if stderr {
		return &s.stderrDone
	}
	return &s.stdoutDone
}

func (s *execSender) write(stderr bool, p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || *s.done(stderr) {
		return 0, io.ErrClosedPipe
	}
	n := 0
	for len(p) > 0 {
		c := min(len(p), execChunk)
		// Copied: a Writer must not retain p, and grpc may marshal lazily.
		op := &driverspb.ExecTaskStreamingIOOperation{Data: bytes.Clone(p[:c])}
		if err := s.stream.Send(ioFrame(stderr, op)); err != nil {
			return n, err
		}
		n += c
		p = p[c:]
	}
	return n, nil
}

func (s *execSender) closeLocked(stderr bool) error {
	if s.stopped || *s.done(stderr) {
		return nil
	}
	*s.done(stderr) = true
	return s.stream.Send(ioFrame(stderr, &driverspb.ExecTaskStreamingIOOperation{Close: true}))
}

func (s *execSender) close(stderr bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeLocked(stderr)
}

func (s *execSender) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
}

// finish sends the frames the client waits for, in its order: stdout
// close, stderr close, then exited with the result.
func (s *execSender) finish(res *ExitResult) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.closeLocked(false); err != nil {
		s.stopped = true
		return err
	}
	if err := s.closeLocked(true); err != nil {
		s.stopped = true
		return err
	}
	s.stopped = true
	return s.stream.Send(&driverspb.ExecTaskStreamingResponse{Exited: true, Result: ExitResultToProto(res)})
}

type execWriter struct {
	s      *execSender
	stderr bool
}

func (w *execWriter) Write(p []byte) (int, error) { return w.s.write(w.stderr, p) }
func (w *execWriter) Close() error                { return w.s.close(w.stderr) }
