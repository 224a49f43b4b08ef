package drivers

import (
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	driverspb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/drivers"
	structspb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/structs"
	"github.com/nomad-gpu/nomad-gpu/wire/structs"
)

// Conversions between the plain Go types and the wire messages, in both
// directions: the server uses the ToProto half, tests and client-side tools
// the FromProto half. FromProto functions accept nil and never decode the
// driver config (that needs the plugin's NewTaskConfig; the server does it).

// TaskConfigToProto writes RawDriverConfig as msgpack_driver_config;
// DriverConfig itself is not re-encoded.
func TaskConfigToProto(c *TaskConfig) *driverspb.TaskConfig {
	if c == nil {
		return nil
	}
	out := &driverspb.TaskConfig{
		Id:                   c.ID,
		Name:                 c.Name,
		MsgpackDriverConfig:  c.RawDriverConfig,
		Env:                  c.Env,
		DeviceEnv:            c.DeviceEnv,
		Resources:            resourcesToProto(c.Resources),
		User:                 c.User,
		AllocDir:             c.AllocDir,
		StdoutPath:           c.StdoutPath,
		StderrPath:           c.StderrPath,
		TaskGroupName:        c.TaskGroupName,
		JobName:              c.JobName,
		AllocId:              c.AllocID,
		NetworkIsolationSpec: NetworkIsolationToProto(c.NetworkIsolation),
		JobId:                c.JobID,
		Namespace:            c.Namespace,
		NodeName:             c.NodeName,
		NodeId:               c.NodeID,
	}
	for _, m := range c.Mounts {
		out.Mounts = append(out.Mounts, &driverspb.Mount{
			TaskPath: m.TaskPath, HostPath: m.HostPath, Readonly: m.Readonly,
			PropagationMode: m.PropagationMode, SelinuxLabel: m.SELinuxLabel,
		})
	}
	for _, d := range c.Devices {
		out.Devices = append(out.Devices, &driverspb.Device{
			TaskPath: d.TaskPath, HostPath: d.HostPath, CgroupPermissions: d.Permissions,
		})
	}
	if c.DNS != nil {
		out.Dns = &driverspb.DNSConfig{Servers: c.DNS.Servers, Searches: c.DNS.Searches, Options: c.DNS.Options}
	}
	return out
}

// TaskConfigFromProto leaves DriverConfig nil and keeps the raw bytes.
func TaskConfigFromProto(p *driverspb.TaskConfig) *TaskConfig {
	if p == nil {
		return nil
	}
	out := &TaskConfig{
		ID:               p.GetId(),
		Name:             p.GetName(),
		JobName:          p.GetJobName(),
		JobID:            p.GetJobId(),
		TaskGroupName:    p.GetTaskGroupName(),
		Namespace:        p.GetNamespace(),
		AllocID:          p.GetAllocId(),
		NodeName:         p.GetNodeName(),
		NodeID:           p.GetNodeId(),
		RawDriverConfig:  p.GetMsgpackDriverConfig(),
		Env:              p.GetEnv(),
		DeviceEnv:        p.GetDeviceEnv(),
		Resources:        resourcesFromProto(p.GetResources()),
		User:             p.GetUser(),
		AllocDir:         p.GetAllocDir(),
		StdoutPath:       p.GetStdoutPath(),
		StderrPath:       p.GetStderrPath(),
		NetworkIsolation: NetworkIsolationFromProto(p.GetNetworkIsolationSpec()),
	}
	for _, m := range p.GetMounts() {
		out.Mounts = append(out.Mounts, Mount{
			TaskPath: m.GetTaskPath(), HostPath: m.GetHostPath(), Readonly: m.GetReadonly(),
			PropagationMode: m.GetPropagationMode(), SELinuxLabel: m.GetSelinuxLabel(),
		})
	}
	for _, d := range p.GetDevices() {
		out.Devices = append(out.Devices, DeviceConfig{
			TaskPath: d.GetTaskPath(), HostPath: d.GetHostPath(), Permissions: d.GetCgroupPermissions(),
		})
	}
	if d := p.GetDns(); d != nil {
		out.DNS = &DNSConfig{Servers: d.GetServers(), Searches: d.GetSearches(), Options: d.GetOptions()}
	}
	return out
}

func resourcesToProto(r *Resources) *driverspb.Resources {
	if r == nil {
		return nil
	}
	out := &driverspb.Resources{
		AllocatedResources: &driverspb.AllocatedTaskResources{
			Cpu:    &driverspb.AllocatedCpuResources{CpuShares: r.CPUShares},
			Memory: &driverspb.AllocatedMemoryResources{MemoryMb: r.MemoryMB, MemoryMaxMb: r.MemoryMaxMB},
		},
	}
	if l := r.Linux; l != nil {
		out.LinuxResources = &driverspb.LinuxResources{
			CpuPeriod:        l.CPUPeriod,
			CpuQuota:         l.CPUQuota,
			CpuShares:        l.CPUShares,
			MemoryLimitBytes: l.MemoryLimitBytes,
			OomScoreAdj:      l.OOMScoreAdj,
			CpusetCpus:       l.CpusetCpus,
			PercentTicks:     l.PercentTicks,
			CpusetCgroup:     l.CpusetCgroupPath,
		}
	}
	for _, pm := range r.Ports {
		out.Ports = append(out.Ports, &driverspb.PortMapping{Label: pm.Label, Value: pm.Value, To: pm.To, HostIp: pm.HostIP})
	}
	return out
}

func resourcesFromProto(p *driverspb.Resources) *Resources {
	if p == nil {
		return nil
	}
	a := p.GetAllocatedResources()
	out := &Resources{
		CPUShares:   a.GetCpu().GetCpuShares(),
		MemoryMB:    a.GetMemory().GetMemoryMb(),
		MemoryMaxMB: a.GetMemory().GetMemoryMaxMb(),
	}
	if l := p.GetLinuxResources(); l != nil {
		out.Linux = &LinuxResources{
			CPUPeriod:        l.GetCpuPeriod(),
			CPUQuota:         l.GetCpuQuota(),
			CPUShares:        l.GetCpuShares(),
			MemoryLimitBytes: l.GetMemoryLimitBytes(),
			OOMScoreAdj:      l.GetOomScoreAdj(),
			CpusetCpus:       l.GetCpusetCpus(),
			PercentTicks:     l.GetPercentTicks(),
			CpusetCgroupPath: l.GetCpusetCgroup(),
		}
	}
	for _, pm := range p.GetPorts() {
		out.Ports = append(out.Ports, PortMapping{Label: pm.GetLabel(), Value: pm.GetValue(), To: pm.GetTo(), HostIP: pm.GetHostIp()})
	}
	return out
}

func NetworkIsolationToProto(n *NetworkIsolationSpec) *driverspb.NetworkIsolationSpec {
	if n == nil {
		return nil
	}
	out := &driverspb.NetworkIsolationSpec{
		Mode:   driverspb.NetworkIsolationSpec_NetworkIsolationMode(n.Mode),
		Path:   n.Path,
		Labels: n.Labels,
	}
	if n.Hostname != "" || n.Address != "" {
		out.HostsConfig = &driverspb.HostsConfig{Hostname: n.Hostname, Address: n.Address}
	}
	return out
}

func NetworkIsolationFromProto(p *driverspb.NetworkIsolationSpec) *NetworkIsolationSpec {
	if p == nil {
		return nil
	}
	return &NetworkIsolationSpec{
		Mode:     NetIsolationMode(p.GetMode()),
		Path:     p.GetPath(),
		Labels:   p.GetLabels(),
		Hostname: p.GetHostsConfig().GetHostname(),
		Address:  p.GetHostsConfig().GetAddress(),
	}
}

func TaskHandleToProto(h *TaskHandle) *driverspb.TaskHandle {
	if h == nil {
		return nil
	}
	return &driverspb.TaskHandle{
		Version:     h.Version,
		Config:      TaskConfigToProto(h.Config),
		State:       driverspb.TaskState(h.State),
		DriverState: h.DriverState,
	}
}

func TaskHandleFromProto(p *driverspb.TaskHandle) *TaskHandle {
	if p == nil {
		return nil
	}
	return &TaskHandle{
		Version:     p.GetVersion(),
		Config:      TaskConfigFromProto(p.GetConfig()),
		State:       TaskState(p.GetState()),
		DriverState: p.GetDriverState(),
	}
}

func NetworkOverrideToProto(n *NetworkOverride) *driverspb.NetworkOverride {
	if n == nil {
		return nil
	}
	return &driverspb.NetworkOverride{PortMap: n.PortMap, Addr: n.Addr, AutoAdvertise: n.AutoAdvertise}
}

func NetworkOverrideFromProto(p *driverspb.NetworkOverride) *NetworkOverride {
	if p == nil {
		return nil
	}
	return &NetworkOverride{PortMap: p.GetPortMap(), Addr: p.GetAddr(), AutoAdvertise: p.GetAutoAdvertise()}
}

// CapabilitiesToProto never returns nil.
func CapabilitiesToProto(c *Capabilities) *driverspb.DriverCapabilities {
	out := &driverspb.DriverCapabilities{}
	if c == nil {
		return out
	}
	out.SendSignals = c.SendSignals
	out.Exec = c.Exec
	out.FsIsolation = driverspb.DriverCapabilities_FSIsolation(c.FSIsolation)
	for _, m := range c.NetIsolationModes {
		out.NetworkIsolationModes = append(out.NetworkIsolationModes, driverspb.NetworkIsolationSpec_NetworkIsolationMode(m))
	}
	out.MustCreateNetwork = c.MustInitiateNetwork
	out.MountConfigs = driverspb.DriverCapabilities_MountConfigs(c.MountConfigs)
	out.DisableLogCollection = c.DisableLogCollection
	out.DynamicWorkloadUsers = c.DynamicWorkloadUsers
	return out
}

func CapabilitiesFromProto(p *driverspb.DriverCapabilities) *Capabilities {
	if p == nil {
		return nil
	}
	out := &Capabilities{
		SendSignals:          p.GetSendSignals(),
		Exec:                 p.GetExec(),
		FSIsolation:          FSIsolation(p.GetFsIsolation()),
		MustInitiateNetwork:  p.GetMustCreateNetwork(),
		MountConfigs:         MountConfigs(p.GetMountConfigs()),
		DisableLogCollection: p.GetDisableLogCollection(),
		DynamicWorkloadUsers: p.GetDynamicWorkloadUsers(),
	}
	for _, m := range p.GetNetworkIsolationModes() {
		out.NetIsolationModes = append(out.NetIsolationModes, NetIsolationMode(m))
	}
	return out
}

// FingerprintToProto drops attributes the client would reject; logger may
// be nil.
func FingerprintToProto(fp *Fingerprint, logger hclog.Logger) *driverspb.FingerprintResponse {
	out := &driverspb.FingerprintResponse{}
	if fp == nil {
		return out
	}
	out.Health = driverspb.FingerprintResponse_HealthState(fp.Health)
	out.HealthDescription = fp.HealthDescription
	if fp.Err != nil {
		out.Err = fp.Err.Error()
	}
	if len(fp.Attributes) > 0 {
		out.Attributes = make(map[string]*structspb.Attribute, len(fp.Attributes))
	}
	for k, a := range fp.Attributes {
		if err := a.Validate(); err != nil {
			if logger != nil {
				logger.Error("dropping invalid driver attribute", "attribute", k, "error", err)
			}
			continue
		}
		out.Attributes[k] = structs.AttributeToProto(a)
	}
	return out
}

func FingerprintFromProto(p *driverspb.FingerprintResponse) *Fingerprint {
	if p == nil {
		return nil
	}
	out := &Fingerprint{
		Health:            HealthState(p.GetHealth()),
		HealthDescription: p.GetHealthDescription(),
	}
	if p.GetErr() != "" {
		out.Err = errors.New(p.GetErr())
	}
	if len(p.GetAttributes()) > 0 {
		out.Attributes = make(map[string]structs.Attribute, len(p.GetAttributes()))
		for k, a := range p.GetAttributes() {
			out.Attributes[k] = structs.AttributeFromProto(a)
		}
	}
	return out
}

// ExitResultToProto never returns nil: the client dereferences results.
// Err has no place in ExitResult on the wire; see WaitResponseToProto.
func ExitResultToProto(r *ExitResult) *driverspb.ExitResult {
	if r == nil {
		return &driverspb.ExitResult{}
	}
	return &driverspb.ExitResult{ExitCode: int32(r.ExitCode), Signal: int32(r.Signal), OomKilled: r.OOMKilled}
}

func ExitResultFromProto(p *driverspb.ExitResult) *ExitResult {
	if p == nil {
		return nil
	}
	return &ExitResult{ExitCode: int(p.GetExitCode()), Signal: int(p.GetSignal()), OOMKilled: p.GetOomKilled()}
}

func WaitResponseToProto(r *ExitResult) *driverspb.WaitTaskResponse {
	out := &driverspb.WaitTaskResponse{Result: ExitResultToProto(r)}
	if r != nil && r.Err != nil {
		out.Err = r.Err.Error()
	}
	return out
}

func WaitResponseFromProto(p *driverspb.WaitTaskResponse) *ExitResult {
	out := ExitResultFromProto(p.GetResult())
	if out == nil {
		out = &ExitResult{}
	}
	if p.GetErr() != "" {
		out.Err = errors.New(p.GetErr())
	}
	return out
}

// timeToProto sends the zero time as 0001-01-01, as upstream drivers do,
// rather than nil, which the client would dereference.
func timeToProto(t time.Time) *timestamppb.Timestamp {
	return timestamppb.New(t)
}

func timeFromProto(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	t := ts.AsTime()
	if t.IsZero() {
		return time.Time{}
	}
	return t
}

// InspectResponseToProto fills started_at, completed_at and result even when
// unknown: the client dereferences all three.
func InspectResponseToProto(s *TaskStatus) *driverspb.InspectTaskResponse {
	if s == nil {
		s = &TaskStatus{}
	}
	return &driverspb.InspectTaskResponse{
		Task: &driverspb.TaskStatus{
			Id:          s.ID,
			Name:        s.Name,
			State:       driverspb.TaskState(s.State),
			StartedAt:   timeToProto(s.StartedAt),
			CompletedAt: timeToProto(s.CompletedAt),
			Result:      ExitResultToProto(s.ExitResult),
		},
		Driver: &driverspb.TaskDriverStatus{Attributes: s.Attributes},
	}
}

func InspectResponseFromProto(p *driverspb.InspectTaskResponse) *TaskStatus {
	if p == nil {
		return nil
	}
	t := p.GetTask()
	return &TaskStatus{
		ID:          t.GetId(),
		Name:        t.GetName(),
		State:       TaskState(t.GetState()),
		StartedAt:   timeFromProto(t.GetStartedAt()),
		CompletedAt: timeFromProto(t.GetCompletedAt()),
		ExitResult:  ExitResultFromProto(t.GetResult()),
		Attributes:  p.GetDriver().GetAttributes(),
	}
}

var (
	cpuFields = map[string]driverspb.CPUUsage_Fields{
		CPUSystemMode:       driverspb.CPUUsage_SYSTEM_MODE,
		CPUUserMode:         driverspb.CPUUsage_USER_MODE,
		CPUTotalTicks:       driverspb.CPUUsage_TOTAL_TICKS,
		CPUThrottledPeriods: driverspb.CPUUsage_THROTTLED_PERIODS,
		CPUThrottledTime:    driverspb.CPUUsage_THROTTLED_TIME,
		CPUPercent:          driverspb.CPUUsage_PERCENT,
	}
	memFields = map[string]driverspb.MemoryUsage_Fields{
		MemRSS:            driverspb.MemoryUsage_RSS,
		MemCache:          driverspb.MemoryUsage_CACHE,
		MemMaxUsage:       driverspb.MemoryUsage_MAX_USAGE,
		MemKernelUsage:    driverspb.MemoryUsage_KERNEL_USAGE,
		MemKernelMaxUsage: driverspb.MemoryUsage_KERNEL_MAX_USAGE,
		MemUsage:          driverspb.MemoryUsage_USAGE,
		MemSwap:           driverspb.MemoryUsage_SWAP,
	}
	cpuFieldNames = invert(cpuFields)
	memFieldNames = invert(memFields)
)

func invert[E comparable](m map[string]E) map[E]string {
	out := make(map[E]string, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

// ResourceUsageToProto always sets cpu and memory. Measured names that are
// not one of the CPU*/Mem* constants are dropped: the wire has no room for them.
func ResourceUsageToProto(u *ResourceUsage) *driverspb.TaskResourceUsage {
	if u == nil {
		u = &ResourceUsage{}
	}
	cpu := &driverspb.CPUUsage{
		SystemMode:       u.CPU.SystemMode,
		UserMode:         u.CPU.UserMode,
		TotalTicks:       u.CPU.TotalTicks,
		ThrottledPeriods: u.CPU.ThrottledPeriods,
		ThrottledTime:    u.CPU.ThrottledTime,
		Percent:          u.CPU.Percent,
	}
	for _, name := range u.CPU.Measured {
		if f, ok := cpuFields[name]; ok {
			cpu.MeasuredFields = append(cpu.MeasuredFields, f)
		}
	}
	mem := &driverspb.MemoryUsage{
		Rss:            u.Memory.RSS,
		Cache:          u.Memory.Cache,
		MaxUsage:       u.Memory.MaxUsage,
		KernelUsage:    u.Memory.KernelUsage,
		KernelMaxUsage: u.Memory.KernelMaxUsage,
		Usage:          u.Memory.Usage,
		Swap:           u.Memory.Swap,
	}
	for _, name := range u.Memory.Measured {
		if f, ok := memFields[name]; ok {
			mem.MeasuredFields = append(mem.MeasuredFields, f)
		}
	}
	return &driverspb.TaskResourceUsage{Cpu: cpu, Memory: mem}
}

func ResourceUsageFromProto(p *driverspb.TaskResourceUsage) *ResourceUsage {
	if p == nil {
		return nil
	}
	c, m := p.GetCpu(), p.GetMemory()
	out := &ResourceUsage{
		CPU: CPUStats{
			SystemMode:       c.GetSystemMode(),
			UserMode:         c.GetUserMode(),
			TotalTicks:       c.GetTotalTicks(),
			ThrottledPeriods: c.GetThrottledPeriods(),
			ThrottledTime:    c.GetThrottledTime(),
			Percent:          c.GetPercent(),
		},
		Memory: MemoryStats{
			RSS:            m.GetRss(),
			Cache:          m.GetCache(),
			MaxUsage:       m.GetMaxUsage(),
			KernelUsage:    m.GetKernelUsage(),
			KernelMaxUsage: m.GetKernelMaxUsage(),
			Usage:          m.GetUsage(),
			Swap:           m.GetSwap(),
		},
	}
	for _, f := range c.GetMeasuredFields() {
		if name, ok := cpuFieldNames[f]; ok {
			out.CPU.Measured = append(out.CPU.Measured, name)
		}
	}
	for _, f := range m.GetMeasuredFields() {
		if name, ok := memFieldNames[f]; ok {
			out.Memory.Measured = append(out.Memory.Measured, name)
		}
	}
	return out
}

// TaskStatsToProto stamps a sample without a timestamp with the current
// time: the client drops samples that have none.
func TaskStatsToProto(taskID string, u *TaskResourceUsage) *driverspb.TaskStatsResponse {
	if u == nil {
		u = &TaskResourceUsage{}
	}
	ts := u.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	st := &driverspb.TaskStats{
		Id:               taskID,
		Timestamp:        timestamppb.New(ts),
		AggResourceUsage: ResourceUsageToProto(&u.Usage),
	}
	if len(u.Pids) > 0 {
		st.ResourceUsageByPid = make(map[string]*driverspb.TaskResourceUsage, len(u.Pids))
		for pid, pu := range u.Pids {
			st.ResourceUsageByPid[pid] = ResourceUsageToProto(pu)
		}
	}
	return &driverspb.TaskStatsResponse{Stats: st}
}

func TaskStatsFromProto(p *driverspb.TaskStatsResponse) *TaskResourceUsage {
	st := p.GetStats()
	if st == nil {
		return nil
	}
	out := &TaskResourceUsage{Timestamp: timeFromProto(st.GetTimestamp())}
	if agg := ResourceUsageFromProto(st.GetAggResourceUsage()); agg != nil {
		out.Usage = *agg
	}
	if len(st.GetResourceUsageByPid()) > 0 {
		out.Pids = make(map[string]*ResourceUsage, len(st.GetResourceUsageByPid()))
		for pid, pu := range st.GetResourceUsageByPid() {
			out.Pids[pid] = ResourceUsageFromProto(pu)
		}
	}
	return out
}

// TaskEventToProto stamps an event without a timestamp with the current
// time, which is when the client would otherwise show 0001-01-01.
func TaskEventToProto(e *TaskEvent) *driverspb.DriverTaskEvent {
	if e == nil {
		return nil
	}
	ts := e.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	return &driverspb.DriverTaskEvent{
		TaskId:      e.TaskID,
		AllocId:     e.AllocID,
		TaskName:    e.TaskName,
		Timestamp:   timestamppb.New(ts),
		Message:     e.Message,
		Annotations: e.Annotations,
	}
}

func TaskEventFromProto(p *driverspb.DriverTaskEvent) *TaskEvent {
	if p == nil {
		return nil
	}
	return &TaskEvent{
		TaskID:      p.GetTaskId(),
		AllocID:     p.GetAllocId(),
		TaskName:    p.GetTaskName(),
		Timestamp:   timeFromProto(p.GetTimestamp()),
		Message:     p.GetMessage(),
		Annotations: p.GetAnnotations(),
	}
}

// ExecTaskResultToProto never leaves result nil: the client dereferences it.
func ExecTaskResultToProto(r *ExecTaskResult) *driverspb.ExecTaskResponse {
	if r == nil {
		return &driverspb.ExecTaskResponse{Result: &driverspb.ExitResult{}}
	}
	return &driverspb.ExecTaskResponse{Stdout: r.Stdout, Stderr: r.Stderr, Result: ExitResultToProto(r.ExitResult)}
}

func ExecTaskResultFromProto(p *driverspb.ExecTaskResponse) *ExecTaskResult {
	if p == nil {
		return nil
	}
	return &ExecTaskResult{Stdout: p.GetStdout(), Stderr: p.GetStderr(), ExitResult: ExitResultFromProto(p.GetResult())}
}

// ToStatus turns a plugin error into the gRPC status the client expects:
// a *RecoverableError anywhere in the chain becomes FailedPrecondition with
// the RecoverableError detail (the only error shape the client inspects),
// ErrTaskNotFound becomes NotFound, context errors keep their code, an
// error that already carries a status keeps it, and anything else gets code.
func ToStatus(err error, code codes.Code) error {
	if err == nil {
		return nil
	}
	var rerr *RecoverableError
	if errors.As(err, &rerr) {
		return recoverableStatus(codes.FailedPrecondition, err.Error(), rerr.Recoverable)
	}
	if errors.Is(err, ErrTaskNotFound) {
		return status.Error(codes.NotFound, err.Error())
	}
	if st := status.FromContextError(err); st.Code() != codes.Unknown {
		return st.Err()
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		if st, ok := status.FromError(err); ok {
			return st.Err()
		}
	}
	return status.Error(code, err.Error())
}

// recoverableStatus carries the RecoverableError detail as details[0], where
// the client looks for it.
func recoverableStatus(code codes.Code, msg string, recoverable bool) error {
	st, err := status.New(code, msg).WithDetails(&structspb.RecoverableError{Recoverable: recoverable})
	if err != nil {
		// Only possible for codes.OK, which no caller passes.
		return status.Error(code, msg)
	}
	return st.Err()
}

// FromStatus undoes ToStatus for client-side code: a RecoverableError detail
// becomes a *RecoverableError and NotFound wraps ErrTaskNotFound; other
// errors come back unchanged.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if re, ok := d.(*structspb.RecoverableError); ok {
			return &RecoverableError{Err: errors.New(st.Message()), Recoverable: re.GetRecoverable()}
		}
	}
	if st.Code() == codes.NotFound {
		return notFoundError(st.Message())
	}
	return err
}

// notFoundError keeps the server's message as is while matching
// ErrTaskNotFound under errors.Is.
type notFoundError string

func (e notFoundError) Error() string { return string(e) }
func (e notFoundError) Unwrap() error { return ErrTaskNotFound }
