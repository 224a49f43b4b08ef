// Package base is the Nomad side of go-plugin: the handshake, the
// BasePlugin service (info, config schema, config) and the logger, so a
// plugin is a plain Go value implementing Plugin.
package base

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	basepb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/base"
	"github.com/nomad-gpu/nomad-gpu/wire/schema"
)

// Handshake is what the Nomad client expects of every external plugin:
// go-plugin app protocol version 2 and Nomad's magic cookie, which the
// client puts in the plugin's environment.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  2,
	MagicCookieKey:   "NOMAD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
}

// APIVersion is the only device and driver plugin API the agent speaks.
const APIVersion = "v0.1.0"

// Type is Nomad's plugin type; the numbering is Nomad's (there is no 1).
type Type int

const (
	TypeDriver Type = 2
	TypeDevice Type = 3
)

type Info struct {
	Type        Type
	Name        string
	Version     string
	APIVersions []string
}

// AgentConfig is what the client tells a running plugin about itself; it is
// nil while the agent merely validates the plugin's config.
type AgentConfig struct {
	ClientMinPort, ClientMaxPort uint32
}

// Plugin is what every Nomad plugin implements.
type Plugin interface {
	Info() Info
	// NewConfig returns a pointer to a zero config struct whose tags declare
	// the schema (package schema); nil means the plugin takes no config.
	NewConfig() any
	// SetConfig receives a decoded value of NewConfig's type. It may be
	// called several times (the agent validates twice before the real
	// start), so it must be idempotent and cheap when agent is nil.
	SetConfig(cfg any, agent *AgentConfig) error
}

type server struct {
	basepb.UnimplementedBasePluginServer
	impl   Plugin
	logger hclog.Logger
}

func (s *server) PluginInfo(context.Context, *basepb.PluginInfoRequest) (*basepb.PluginInfoResponse, error) {
	info := s.impl.Info()
	versions := info.APIVersions
	if len(versions) == 0 {
		versions = []string{APIVersion}
	}
	return &basepb.PluginInfoResponse{
		Type:              basepb.PluginType(info.Type),
		PluginApiVersions: versions,
		PluginVersion:     info.Version,
		Name:              info.Name,
	}, nil
}

func (s *server) ConfigSchema(context.Context, *basepb.ConfigSchemaRequest) (*basepb.ConfigSchemaResponse, error) {
	cfg := s.impl.NewConfig()
	if cfg == nil {
		return &basepb.ConfigSchemaResponse{}, nil
	}
	spec, err := schema.Spec(cfg)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &basepb.ConfigSchemaResponse{Spec: spec}, nil
}

func (s *server) SetConfig(_ context.Context, req *basepb.SetConfigRequest) (*basepb.SetConfigResponse, error) {
	cfg := s.impl.NewConfig()
	if cfg != nil {
		if err := schema.Decode(req.GetMsgpackConfig(), cfg); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "%s config: %v", s.impl.Info().Name, err)
		}
	}
	var agent *AgentConfig
	if d := req.GetNomadConfig().GetDriver(); d != nil {
		agent = &AgentConfig{ClientMinPort: d.GetClientMinPort(), ClientMaxPort: d.GetClientMaxPort()}
	}
	if err := s.impl.SetConfig(cfg, agent); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s config: %v", s.impl.Info().Name, err)
	}
	return &basepb.SetConfigResponse{}, nil
}

// PluginSet is the go-plugin map the agent dispenses from: "base" (the
// BasePlugin service for impl) and the plugin's own service under key
// ("device", "driver"). register adds that service for impl and logger (never
// nil here) to a server; newClient makes its client. impl may be nil on the
// client side, which never registers.
func PluginSet(impl Plugin, logger hclog.Logger, key string, register func(*grpc.Server, hclog.Logger), newClient func(*grpc.ClientConn) any) map[string]plugin.Plugin {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return map[string]plugin.Plugin{
		"base": &GRPCService{
			Register:  func(s *grpc.Server) { basepb.RegisterBasePluginServer(s, &server{impl: impl, logger: logger}) },
			NewClient: func(_ context.Context, c *grpc.ClientConn) any { return basepb.NewBasePluginClient(c) },
		},
		key: &GRPCService{
			Register:  func(s *grpc.Server) { register(s, logger) },
			NewClient: func(_ context.Context, c *grpc.ClientConn) any { return newClient(c) },
		},
	}
}

// NewLogger logs as Nomad's own plugins do: hclog JSON on the real stderr,
// which the agent parses line by line into its own log, keeping each line's
// level and fields.
func NewLogger(name string) hclog.Logger {
	level := hclog.Trace
	if l := os.Getenv("NOMAD_GPU_LOG_LEVEL"); l != "" {
		level = hclog.LevelFromString(l)
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      level,
		JSONFormat: true,
		Output:     hclog.DefaultOutput,
	})
}

// Launch starts a plugin binary the way the Nomad client does (handshake,
// gRPC only, host environment plus the magic cookie) and returns the client;
// wire tests and tools use it to talk to a built binary.
func Launch(path string, args []string, plugins map[string]plugin.Plugin, logger hclog.Logger) (*plugin.Client, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	// Not bound to a context: go-plugin owns the process lifetime (Kill).
	cmd := exec.Command(path, args...)
	c := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          plugins,
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           logger,
	})
	if _, err := c.Client(); err != nil {
		c.Kill()
		return nil, fmt.Errorf("launch %s: %w", path, err)
	}
	return c, nil
}
