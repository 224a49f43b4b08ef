package device

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nomad-gpu/nomad-gpu/wire/base"
	devicepb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/device"
	structspb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/structs"
	"github.com/nomad-gpu/nomad-gpu/wire/structs"
)

type server struct {
	devicepb.UnimplementedDevicePluginServer
	impl   Plugin
	logger hclog.Logger
}

// PluginSet is the go-plugin map the agent dispenses from, "base" and
// "device"; base.Serve serves it.
func PluginSet(impl Plugin, logger hclog.Logger) map[string]plugin.Plugin {
	return base.PluginSet(impl, logger, "device",
		func(s *grpc.Server, logger hclog.Logger) {
			devicepb.RegisterDevicePluginServer(s, &server{impl: impl, logger: logger})
		},
		func(c *grpc.ClientConn) any { return devicepb.NewDevicePluginClient(c) })
}

// Fingerprint never ends the stream on its own: the client takes any end
// or error as "plugin gone" and stops managing it until the agent restarts.
func (s *server) Fingerprint(_ *devicepb.FingerprintRequest, stream devicepb.DevicePlugin_FingerprintServer) error {
	ctx := stream.Context()
	ch, err := s.impl.Fingerprint(ctx)
	if err != nil {
		s.logger.Error("fingerprinting failed; reporting no devices", "error", err)
		if err := stream.Send(&devicepb.FingerprintResponse{}); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}
	return base.Pump(ctx, ch,
		func(fp *Fingerprint) error { return stream.Send(FingerprintToProto(fp, s.logger)) },
		func() error {
			s.logger.Error("fingerprint source ended early; keeping the stream open")
			return nil
		})
}

func (s *server) Stats(req *devicepb.StatsRequest, stream devicepb.DevicePlugin_StatsServer) error {
	ctx := stream.Context()
	interval := req.GetCollectionInterval().AsDuration()
	if interval <= 0 {
		interval = time.Second
	}
	ch, err := s.impl.Stats(ctx, interval)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	return base.Pump(ctx, ch,
		func(st *Stats) error { return stream.Send(StatsToProto(st)) },
		func() error {
			s.logger.Error("stats source ended early; keeping the stream open")
			return nil
		})
}

func (s *server) Reserve(_ context.Context, req *devicepb.ReserveRequest) (*devicepb.ReserveResponse, error) {
	if len(req.GetDeviceIds()) == 0 {
		return &devicepb.ReserveResponse{ContainerRes: &devicepb.ContainerReservation{}}, nil
	}
	res, err := s.impl.Reserve(req.GetDeviceIds())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &devicepb.ReserveResponse{ContainerRes: ReservationToProto(res)}, nil
}

// FingerprintToProto converts a snapshot, leaving out whatever the client
// would reject (it would otherwise drop the plugin's devices altogether).
func FingerprintToProto(fp *Fingerprint, logger hclog.Logger) *devicepb.FingerprintResponse {
	out := &devicepb.FingerprintResponse{}
	if fp == nil {
		return out
	}
	for _, g := range fp.Groups {
		if g == nil || g.Vendor == "" || g.Type == "" || g.Name == "" {
			logger.Error("dropping device group without vendor, type or name", "group", fmt.Sprintf("%+v", g))
			continue
		}
		pg := &devicepb.DeviceGroup{
			Vendor:     g.Vendor,
			DeviceType: g.Type,
			DeviceName: g.Name,
			Attributes: make(map[string]*structspb.Attribute, len(g.Attributes)),
		}
		for k, a := range g.Attributes {
			if err := a.Validate(); err != nil {
				logger.Error("dropping invalid device attribute", "group", g.Name, "attribute", k, "error", err)
				continue
			}
			pg.Attributes[k] = structs.AttributeToProto(a)
		}
		for _, d := range g.Devices {
			if d == nil || d.ID == "" {
				logger.Error("dropping device without ID", "group", g.Name)
				continue
			}
			pd := &devicepb.DetectedDevice{ID: d.ID, Healthy: d.Healthy, HealthDescription: d.HealthDescription}
			if d.PCIBusID != "" {
				pd.HwLocality = &devicepb.DeviceLocality{PciBusId: d.PCIBusID}
			}
			pg.Devices = append(pg.Devices, pd)
		}
		out.DeviceGroup = append(out.DeviceGroup, pg)
	}
	return out
}

func ReservationToProto(r *Reservation) *devicepb.ContainerReservation {
	out := &devicepb.ContainerReservation{}
	if r == nil {
		return out
	}
	out.Envs = r.Envs
	for _, m := range r.Mounts {
		out.Mounts = append(out.Mounts, &devicepb.Mount{TaskPath: m.TaskPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range r.Devices {
		out.Devices = append(out.Devices, &devicepb.DeviceSpec{TaskPath: d.TaskPath, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	return out
}

func StatsToProto(st *Stats) *devicepb.StatsResponse {
	out := &devicepb.StatsResponse{}
	if st == nil {
		return out
	}
	for _, g := range st.Groups {
		pg := &devicepb.DeviceGroupStats{
			Vendor: g.Vendor, Type: g.Type, Name: g.Name,
			InstanceStats: make(map[string]*devicepb.DeviceStats, len(g.Instances)),
		}
		for id, ds := range g.Instances {
			ts := ds.Timestamp
			if ts.IsZero() {
				// A nil timestamp makes the client drop the sample.
				ts = time.Now()
			}
			pg.InstanceStats[id] = &devicepb.DeviceStats{
				Summary:   structs.StatValueToProto(ds.Summary),
				Stats:     structs.StatObjectToProto(ds.Stats),
				Timestamp: timestamppb.New(ts),
			}
		}
		out.Groups = append(out.Groups, pg)
	}
	return out
}
