package drivers

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	structspb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/structs"
	"github.com/nomad-gpu/nomad-gpu/wire/structs"
)

func TestRecoverableErrorTypeURL(t *testing.T) {
	a, err := anypb.New(&structspb.RecoverableError{Recoverable: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.GetTypeUrl() != recoverableTypeURL {
		t.Fatalf("type URL = %q, want %q", a.GetTypeUrl(), recoverableTypeURL)
	}
}

func TestRoundTrips(t *testing.T) {
	stamp := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	for _, tc := range []struct {
		name string
		in   any
		rt   func(any) any
	}{
		{"full task config", &TaskConfig{
			ID: "a/t/1", Name: "t", JobName: "j", JobID: "jid", TaskGroupName: "g", Namespace: "ns", AllocID: "a",
			NodeName: "n", NodeID: "nid", RawDriverConfig: []byte{0x80},
			Env: map[string]string{"A": "1"}, DeviceEnv: map[string]string{"B": "2"},
			Resources: &Resources{CPUShares: 1, MemoryMB: 2, MemoryMaxMB: 3,
				Linux: &LinuxResources{CPUPeriod: 4, CPUQuota: 5, CPUShares: 6, MemoryLimitBytes: 7, OOMScoreAdj: 8,
					CpusetCpus: "0-3", PercentTicks: 0.5, CpusetCgroupPath: "/c"},
				Ports: []PortMapping{{Label: "p", Value: 1, To: 2, HostIP: "h"}}},
			Mounts:  []Mount{{TaskPath: "/a", HostPath: "/b", Readonly: true, PropagationMode: "rshared", SELinuxLabel: "z"}},
			Devices: []DeviceConfig{{TaskPath: "/dev/a", HostPath: "/dev/b", Permissions: "rw"}},
			User:    "u", AllocDir: "/alloc", StdoutPath: "/o", StderrPath: "/e",
			NetworkIsolation: &NetworkIsolationSpec{Mode: NetIsolationTask, Path: "/ns", Labels: map[string]string{"x": "y"}, Hostname: "h", Address: "a"},
			DNS:              &DNSConfig{Servers: []string{"s"}, Searches: []string{"q"}, Options: []string{"o"}},
		}, func(v any) any { return TaskConfigFromProto(TaskConfigToProto(v.(*TaskConfig))) }},
		{"minimal task config", &TaskConfig{ID: "a/t/1"},
			func(v any) any { return TaskConfigFromProto(TaskConfigToProto(v.(*TaskConfig))) }},
		{"handle", &TaskHandle{Version: 2, Config: &TaskConfig{ID: "x"}, State: TaskStateExited, DriverState: []byte("s")},
			func(v any) any { return TaskHandleFromProto(TaskHandleToProto(v.(*TaskHandle))) }},
		{"capabilities", &Capabilities{SendSignals: true, Exec: true, FSIsolation: FSIsolationUnveil,
			NetIsolationModes: []NetIsolationMode{NetIsolationGroup}, MustInitiateNetwork: true, MountConfigs: MountConfigsNone,
			DisableLogCollection: true, DynamicWorkloadUsers: true},
			func(v any) any { return CapabilitiesFromProto(CapabilitiesToProto(v.(*Capabilities))) }},
		{"fingerprint", &Fingerprint{Health: HealthUnhealthy, HealthDescription: "d",
			Attributes: map[string]structs.Attribute{"a": structs.NewInt(3, "MiB"), "b": structs.NewString("")}},
			func(v any) any { return FingerprintFromProto(FingerprintToProto(v.(*Fingerprint), nil)) }},
		{"network override", &NetworkOverride{PortMap: map[string]int32{"a": 1}, Addr: "x", AutoAdvertise: true},
			func(v any) any { return NetworkOverrideFromProto(NetworkOverrideToProto(v.(*NetworkOverride))) }},
		{"exit result", &ExitResult{ExitCode: 1, Signal: 2, OOMKilled: true},
			func(v any) any { return ExitResultFromProto(ExitResultToProto(v.(*ExitResult))) }},
		{"stats", &TaskResourceUsage{Timestamp: stamp,
			Usage: ResourceUsage{
				CPU: CPUStats{SystemMode: 1, UserMode: 2, TotalTicks: 3, ThrottledPeriods: 4, ThrottledTime: 5, Percent: 6,
					Measured: []string{CPUSystemMode, CPUUserMode, CPUTotalTicks, CPUThrottledPeriods, CPUThrottledTime, CPUPercent}},
				Memory: MemoryStats{RSS: 1, Cache: 2, MaxUsage: 3, KernelUsage: 4, KernelMaxUsage: 5, Usage: 6, Swap: 7,
					Measured: []string{MemRSS, MemCache, MemMaxUsage, MemKernelUsage, MemKernelMaxUsage, MemUsage, MemSwap}},
			},
			Pids: map[string]*ResourceUsage{"1": {CPU: CPUStats{Percent: 1, Measured: []string{CPUPercent}}}}},
			func(v any) any { return TaskStatsFromProto(TaskStatsToProto("t", v.(*TaskResourceUsage))) }},
		{"event", &TaskEvent{TaskID: "t", AllocID: "a", TaskName: "n", Timestamp: stamp, Message: "m", Annotations: map[string]string{"k": "v"}},
			func(v any) any { return TaskEventFromProto(TaskEventToProto(v.(*TaskEvent))) }},
		{"exec result", &ExecTaskResult{Stdout: []byte("o"), Stderr: []byte("e"), ExitResult: &ExitResult{ExitCode: 1}},
			func(v any) any { return ExecTaskResultFromProto(ExecTaskResultToProto(v.(*ExecTaskResult))) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rt(tc.in); !reflect.DeepEqual(got, tc.in) {
				t.Fatalf("round trip\n got %#v\nwant %#v", got, tc.in)
			}
		})
	}
}

func TestFromProtoAcceptsNil(t *testing.T) {
	if TaskConfigFromProto(nil) != nil || TaskHandleFromProto(nil) != nil || CapabilitiesFromProto(nil) != nil ||
		FingerprintFromProto(nil) != nil || NetworkOverrideFromProto(nil) != nil || ExitResultFromProto(nil) != nil ||
		InspectResponseFromProto(nil) != nil || ResourceUsageFromProto(nil) != nil || TaskStatsFromProto(nil) != nil ||
		TaskEventFromProto(nil) != nil || ExecTaskResultFromProto(nil) != nil || NetworkIsolationFromProto(nil) != nil {
		t.Fatal("a FromProto function returned non-nil for nil")
	}
	if r := WaitResponseFromProto(nil); r == nil || r.Err != nil {
		t.Fatalf("WaitResponseFromProto(nil) = %+v", r)
	}
}

type codedError struct{}

func (codedError) Error() string { return "already exists" }
func (codedError) GRPCStatus() *status.Status {
	return status.New(codes.AlreadyExists, "already exists")
}

func TestToStatus(t *testing.T) {
	for _, tc := range []struct {
		name        string
		err         error
		code        codes.Code
		recoverable *bool
		notFound    bool
	}{
		{name: "nil", err: nil, code: codes.OK},
		{name: "plain", err: errors.New("x"), code: codes.Unknown},
		{name: "recoverable", err: NewRecoverableError(errors.New("x"), true), code: codes.FailedPrecondition, recoverable: new(true)},
		{name: "wrapped unrecoverable", err: fmt.Errorf("a: %w", NewRecoverableError(errors.New("x"), false)),
			code: codes.FailedPrecondition, recoverable: new(false)},
		{name: "not found", err: fmt.Errorf("t1: %w", ErrTaskNotFound), code: codes.NotFound, notFound: true},
		{name: "canceled", err: fmt.Errorf("wait: %w", context.Canceled), code: codes.Canceled},
		{name: "deadline", err: context.DeadlineExceeded, code: codes.DeadlineExceeded},
		{name: "already a status", err: codedError{}, code: codes.AlreadyExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ToStatus(tc.err, codes.Unknown)
			wantCode(t, err, tc.code)
			if tc.err != nil && status.Convert(err).Message() != tc.err.Error() {
				t.Fatalf("message = %q, want %q", status.Convert(err).Message(), tc.err.Error())
			}
			if tc.recoverable != nil && recoverableDetail(t, err) != *tc.recoverable {
				t.Fatalf("recoverable detail wrong for %v", err)
			}
			back := FromStatus(err)
			if errors.Is(back, ErrTaskNotFound) != tc.notFound {
				t.Fatalf("FromStatus(%v) = %v; errors.Is(ErrTaskNotFound) should be %v", err, back, tc.notFound)
			}
			if tc.notFound && back.Error() != tc.err.Error() {
				t.Fatalf("FromStatus message = %q", back.Error())
			}
			var re *RecoverableError
			if errors.As(back, &re) != (tc.recoverable != nil) {
				t.Fatalf("FromStatus(%v) = %#v", err, back)
			}
		})
	}
}
