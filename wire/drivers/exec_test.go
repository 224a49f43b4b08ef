package drivers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	driverspb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/drivers"
)

// echoExec is `cat` with a twist: it reports the first terminal size and
// the command on stderr, copies stdin to stdout and exits with code 3.
func echoExec(sizes chan<- TerminalSize) func(context.Context, string, *ExecOptions) (*ExitResult, error) {
	return func(ctx context.Context, id string, opts *ExecOptions) (*ExitResult, error) {
		if opts.Tty {
			select {
			case sz := <-opts.ResizeCh:
				sizes <- sz
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		fmt.Fprintf(opts.Stderr, "%s: %s", id, strings.Join(opts.Command, " "))
		if _, err := io.Copy(opts.Stdout, opts.Stdin); err != nil {
			return nil, err
		}
		return &ExitResult{ExitCode: 3}, nil
	}
}

func setupFrame(tty bool) *driverspb.ExecTaskStreamingRequest {
	return &driverspb.ExecTaskStreamingRequest{Setup: &driverspb.ExecTaskStreamingRequest_Setup{
		TaskId: "t1", Command: []string{"sh", "-i"}, Tty: tty}}
}

func stdinFrame(data string, closed bool) *driverspb.ExecTaskStreamingRequest {
	return &driverspb.ExecTaskStreamingRequest{Stdin: &driverspb.ExecTaskStreamingIOOperation{Data: []byte(data), Close: closed}}
}

// recvAll reads until the stream ends; err is nil on a clean end.
func recvAll(stream driverspb.Driver_ExecTaskStreamingClient) ([]*driverspb.ExecTaskStreamingResponse, error) {
	var out []*driverspb.ExecTaskStreamingResponse
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, msg)
	}
}

// checkFrames verifies the order the client relies on and returns what
// came through stdout and stderr.
func checkFrames(t *testing.T, frames []*driverspb.ExecTaskStreamingResponse, wantExit int32) (stdout, stderr string) {
	t.Helper()
	if len(frames) < 3 {
		t.Fatalf("only %d frames: %v", len(frames), frames)
	}
	tail := frames[len(frames)-3:]
	wantTail := []*driverspb.ExecTaskStreamingResponse{
		{Stdout: &driverspb.ExecTaskStreamingIOOperation{Close: true}},
		{Stderr: &driverspb.ExecTaskStreamingIOOperation{Close: true}},
		{Exited: true, Result: &driverspb.ExitResult{ExitCode: wantExit}},
	}
	for i := range tail {
		if !proto.Equal(tail[i], wantTail[i]) {
			t.Fatalf("frame -%d = %v, want %v", 3-i, tail[i], wantTail[i])
		}
	}
	var o, e bytes.Buffer
	for _, f := range frames[:len(frames)-3] {
		switch {
		case f.GetStdout() != nil && !f.GetStdout().GetClose():
			o.Write(f.GetStdout().GetData())
		case f.GetStderr() != nil && !f.GetStderr().GetClose():
			e.Write(f.GetStderr().GetData())
		default:
			t.Fatalf("unexpected frame before the closes: %v", f)
		}
		if len(f.GetStdout().GetData()) > execChunk || len(f.GetStderr().GetData()) > execChunk {
			t.Fatalf("frame of %d bytes exceeds the chunk size", len(f.GetStdout().GetData())+len(f.GetStderr().GetData()))
		}
	}
	return o.String(), e.String()
}

func TestExecTaskStreamingEndToEnd(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 10<<10) // 160 KiB: several frames
	for _, tc := range []struct {
		name   string
		tty    bool
		frames []*driverspb.ExecTaskStreamingRequest
		stdout string
	}{
		{
			name: "tty: resize, data, heartbeat, close",
			tty:  true,
			frames: []*driverspb.ExecTaskStreamingRequest{
				{TtySize: &driverspb.ExecTaskStreamingRequest_TerminalSize{Height: 24, Width: 80}},
				stdinFrame("hello ", false),
				{}, // heartbeat
				stdinFrame("world", false),
				stdinFrame("", true),
			},
			stdout: "hello world",
		},
		{
			name:   "no tty, data and close in one frame",
			frames: []*driverspb.ExecTaskStreamingRequest{stdinFrame("bye", true)},
			stdout: "bye",
		},
		{
			name:   "large output is chunked",
			frames: []*driverspb.ExecTaskStreamingRequest{stdinFrame(big, true)},
			stdout: big,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sizes := make(chan TerminalSize, 1)
			c := dial(t, &fakeDriver{streamFn: echoExec(sizes)})
			stream, err := c.ExecTaskStreaming(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range append([]*driverspb.ExecTaskStreamingRequest{setupFrame(tc.tty)}, tc.frames...) {
				if err := stream.Send(f); err != nil {
					t.Fatal(err)
				}
			}
			// No CloseSend: stdin{close} alone must finish the exchange.
			frames, err := recvAll(stream)
			if err != nil {
				t.Fatal(err)
			}
			stdout, stderr := checkFrames(t, frames, 3)
			if stdout != tc.stdout || stderr != "t1: sh -i" {
				t.Fatalf("stdout = %.40q (%d bytes), stderr = %q", stdout, len(stdout), stderr)
			}
			if tc.tty {
				if sz := <-sizes; sz != (TerminalSize{Height: 24, Width: 80}) {
					t.Fatalf("terminal size = %+v", sz)
				}
			}
		})
	}
}

func TestExecTaskStreamingClientHalfCloseIsStdinEOF(t *testing.T) {
	c := dial(t, &fakeDriver{streamFn: echoExec(nil)})
	stream, err := c.ExecTaskStreaming(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*driverspb.ExecTaskStreamingRequest{setupFrame(false), stdinFrame("abc", false)} {
		if err := stream.Send(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	frames, err := recvAll(stream)
	if err != nil {
		t.Fatal(err)
	}
	if stdout, _ := checkFrames(t, frames, 3); stdout != "abc" {
		t.Fatalf("stdout = %q", stdout)
	}
}

func TestExecTaskStreamingErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		frames   []*driverspb.ExecTaskStreamingRequest
		stream   func(context.Context, string, *ExecOptions) (*ExitResult, error)
		code     codes.Code
		inOutput string
	}{
		{name: "first frame is not setup", frames: []*driverspb.ExecTaskStreamingRequest{stdinFrame("x", false)}, code: codes.InvalidArgument},
		{name: "heartbeat before setup", frames: []*driverspb.ExecTaskStreamingRequest{{}}, code: codes.InvalidArgument},
		{name: "no frames at all", code: codes.InvalidArgument},
		{
			name:   "plugin error after output",
			frames: []*driverspb.ExecTaskStreamingRequest{setupFrame(false)},
			stream: func(_ context.Context, _ string, o *ExecOptions) (*ExitResult, error) {
				fmt.Fprint(o.Stdout, "partial")
				return nil, errors.New("exec: not found")
			},
			code:     codes.Unknown,
			inOutput: "partial",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called := make(chan struct{}, 1)
			c := dial(t, &fakeDriver{streamFn: func(ctx context.Context, id string, o *ExecOptions) (*ExitResult, error) {
				called <- struct{}{}
				if tc.stream == nil {
					return &ExitResult{}, nil
				}
				return tc.stream(ctx, id, o)
			}})
			stream, err := c.ExecTaskStreaming(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			// The server may end the stream after any frame, making Send
			// fail; the status comes from Recv.
			for _, f := range tc.frames {
				if stream.Send(f) != nil {
					break
				}
			}
			_ = stream.CloseSend()
			frames, err := recvAll(stream)
			wantCode(t, err, tc.code)
			var out string
			for _, f := range frames {
				out += string(f.GetStdout().GetData())
				if f.GetExited() {
					t.Fatalf("exited frame sent despite the error: %v", frames)
				}
			}
			if out != tc.inOutput {
				t.Fatalf("stdout = %q, want %q", out, tc.inOutput)
			}
			if wantCalled := tc.stream != nil; (len(called) == 1) != wantCalled {
				t.Fatalf("plugin called = %v, want %v", len(called) == 1, wantCalled)
			}
		})
	}
}

func TestExecTaskStreamingPluginIgnoresStdin(t *testing.T) {
	// The plugin returns without reading stdin while the client keeps
	// sending; the exchange must still finish.
	c := dial(t, &fakeDriver{streamFn: func(_ context.Context, _ string, o *ExecOptions) (*ExitResult, error) {
		return &ExitResult{ExitCode: 0}, nil
	}})
	stream, err := c.ExecTaskStreaming(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(setupFrame(false)); err != nil {
		t.Fatal(err)
	}
	for range 200 {
		if err := stream.Send(stdinFrame("ignored", false)); err != nil {
			break // the server may already have finished
		}
	}
	frames, err := recvAll(stream)
	if err != nil {
		t.Fatal(err)
	}
	checkFrames(t, frames, 0)
}

// blockingExec reads stdin until it fails and reports how it ended; it
// only returns once both its ctx and its stdin have been released.
func blockingExec(ended chan<- error) func(context.Context, string, *ExecOptions) (*ExitResult, error) {
	return func(ctx context.Context, _ string, o *ExecOptions) (*ExitResult, error) {
		_, err := io.Copy(io.Discard, o.Stdin)
		<-ctx.Done()
		ended <- err
		return nil, ctx.Err()
	}
}

func TestExecTaskStreamingClientGoesAway(t *testing.T) {
	ended := make(chan error, 1)
	c := dial(t, &fakeDriver{streamFn: blockingExec(ended)})
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.ExecTaskStreaming(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(setupFrame(true)); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(stdinFrame("x", false)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("stdin ended cleanly; want the stream's error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("plugin still running after the client went away")
	}
	_, err = recvAll(stream)
	wantCode(t, err, codes.Canceled)
}

func TestExecTaskStreamingLeavesNoGoroutines(t *testing.T) {
	ended := make(chan error, 1)
	c := dial(t, &fakeDriver{streamFn: blockingExec(ended)})
	run := func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stream, err := c.ExecTaskStreaming(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []*driverspb.ExecTaskStreamingRequest{setupFrame(true),
			{TtySize: &driverspb.ExecTaskStreamingRequest_TerminalSize{Height: 1, Width: 1}},
			{TtySize: &driverspb.ExecTaskStreamingRequest_TerminalSize{Height: 2, Width: 2}},
			stdinFrame("x", false)} {
			if err := stream.Send(f); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(20 * time.Millisecond)
		cancel()
		<-ended
		_, _ = recvAll(stream)
	}
	run() // warm up the connection's own goroutines
	base := settledGoroutines(0)
	for range 20 {
		run()
	}
	if n := settledGoroutines(base + 5); n > base+5 {
		t.Fatalf("%d goroutines after 20 cancelled execs, %d before", n, base)
	}
}

// settledGoroutines waits up to 5 s for the count to drop to at most want
// (0: just let things settle for a moment) and returns it.
func settledGoroutines(want int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(50 * time.Millisecond)
		n := runtime.NumGoroutine()
		if (want > 0 && n <= want) || time.Now().After(deadline) || want == 0 {
			return n
		}
	}
}
