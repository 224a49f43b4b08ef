package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/nomad-autoscaler/plugins/apm"
	pbase "github.com/hashicorp/nomad-autoscaler/plugins/base"
	"github.com/hashicorp/nomad-autoscaler/plugins/strategy"
	"github.com/hashicorp/nomad-autoscaler/plugins/target"
	"github.com/hashicorp/nomad-autoscaler/sdk"
	"github.com/hashicorp/nomad/api"
	"google.golang.org/grpc/status"
)

// LaunchOption changes how Launch starts a plugin.
type LaunchOption func(*launchConfig)

type launchConfig struct {
	args  []string
	nomad *api.Config
}

// WithArgs is the plugin block's args: the binary's arguments.
func WithArgs(args ...string) LaunchOption {
	return func(c *launchConfig) { c.args = args }
}

// WithNomad is the agent's Nomad connection config, whose settings go into
// the config maps as the agent puts them (NomadConfigKeys); nil adds none.
// Without this option Launch uses what an agent with no nomad block would:
// the Nomad API's defaults and NOMAD_* environment (address
// http://127.0.0.1:4646 unless NOMAD_ADDR says otherwise) and a
// block-query wait time of 5m.
func WithNomad(cfg *api.Config) LaunchOption {
	return func(c *launchConfig) { c.nomad = cfg }
}

// AgentNomadDefault is the Nomad config of an agent without a nomad block
// (see WithNomad).
func AgentNomadDefault() *api.Config {
	cfg := api.DefaultConfig()
	cfg.WaitTime = 5 * time.Minute
	return cfg
}

// Client is a plugin binary launched as the agent launches it, with the
// agent's side of every call in plain types. Calls end when the plugin
// does; none is bounded in time but Status, which the agent bounds by the
// config's ConfigKeyGRPCTimeout, as the agent does.
type Client struct {
	client *plugin.Client
	// rpc is upstream's client of the plugin's type: the agent's own
	// (apm.APM, strategy.Strategy or target.Target).
	rpc    pbase.Base
	typ    PluginType
	driver string
	nomad  *api.Config
}

// Launch starts the plugin binary at path as a typ plugin the way
// nomad-autoscaler launches an external plugin from its plugin_dir: the
// command with the block's args (WithArgs), the autoscaler's handshake,
// gRPC only; it dispenses the type, calls PluginInfo and refuses a plugin
// whose name differs from the binary's file name (the block's driver) or
// whose type differs from typ; then SetConfig with config, to which it
// adds the agent's Nomad settings (SetConfig). Any failure kills the
// plugin and is the error the agent would fail to start with. The plugin
// is killed when ctx is done, or by Kill.
func Launch(ctx context.Context, path string, typ PluginType, config map[string]string, opts ...LaunchOption) (*Client, error) {
	lc := launchConfig{nomad: AgentNomadDefault()}
	for _, o := range opts {
		o(&lc)
	}
	if _, err := typeName(typ); err != nil {
		return nil, err
	}
	driver := filepath.Base(path)
	set, _ := pluginSet(driver, typ, nil, nil)
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          set,
		Cmd:              exec.Command(path, lc.args...),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.NewNullLogger(),
	})
	stop := context.AfterFunc(ctx, pc.Kill)
	c, err := launch(pc, typ, driver)
	if err == nil {
		c.nomad = lc.nomad
		err = c.SetConfig(config)
		if err != nil {
			err = fmt.Errorf("failed to set config on plugin %s: %w", driver, err)
		}
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		stop()
		pc.Kill()
		return nil, err
	}
	return c, nil
}

func launch(pc *plugin.Client, typ PluginType, driver string) (*Client, error) {
	proto, err := pc.Client()
	if err != nil {
		return nil, fmt.Errorf("failed to instantiate plugin %s client: %w", driver, err)
	}
	raw, err := proto.Dispense(typ.String())
	if err != nil {
		return nil, fmt.Errorf("failed to dispense plugin %s: %w", driver, err)
	}
	b, ok := raw.(pbase.Base)
	if !ok {
		return nil, fmt.Errorf("failed to dispense plugin %s: %T is not a plugin client", driver, raw)
	}
	c := &Client{client: pc, rpc: b, typ: typ, driver: driver}
	name, got, err := c.PluginInfo()
	if err != nil {
		return nil, fmt.Errorf("failed to call PluginInfo on %s: %w", driver, err)
	}
	if name != driver || got != typ {
		return nil, fmt.Errorf("plugin %s remote info doesn't match local config: it is %s %q, the agent wants %s %q",
			driver, got, name, typ, driver)
	}
	return c, nil
}

// Kill stops the plugin as the agent does: go-plugin's graceful shutdown,
// then SIGKILL after 2s.
func (c *Client) Kill() { c.client.Kill() }

// Exited says whether the plugin process has exited.
func (c *Client) Exited() bool { return c.client.Exited() }

// PluginInfo asks the plugin what it is. A type outside APM, strategy and
// target is an error, as in the agent.
func (c *Client) PluginInfo() (name string, typ PluginType, err error) {
	info, err := c.rpc.PluginInfo()
	if err != nil {
		return "", 0, err
	}
	typ, err = typeFromName(info.PluginType)
	if err != nil {
		return "", 0, err
	}
	return info.Name, typ, nil
}

// SetConfig sends a plugin block's config as the agent does at start and
// on reload: a copy, with the Nomad settings (WithNomad) added where the
// map leaves a key empty, unless it sets ConfigKeyNomadConfigInherit to
// false (or to anything that is not a bool, which the agent logs).
func (c *Client) SetConfig(config map[string]string) error {
	cfg := maps.Clone(config)
	if cfg == nil {
		cfg = map[string]string{}
	}
	inherit := true
	if v, ok := cfg[ConfigKeyNomadConfigInherit]; ok {
		b, err := strconv.ParseBool(v)
		inherit = err == nil && b
	}
	if inherit {
		mergeNomad(cfg, c.nomad)
	}
	return c.rpc.SetConfig(cfg)
}

// mergeNomad is the agent's MergeMapWithAgentConfig.
func mergeNomad(m map[string]string, cfg *api.Config) {
	if cfg == nil {
		return
	}
	set := func(key, v string) {
		if v != "" && m[key] == "" {
			m[key] = v
		}
	}
	set("nomad_address", cfg.Address)
	set("nomad_region", cfg.Region)
	set("nomad_namespace", cfg.Namespace)
	set("nomad_token", cfg.SecretID)
	if t := cfg.TLSConfig; t != nil {
		set("nomad_ca-cert", t.CACert)
		set("nomad_ca-path", t.CAPath)
		set("nomad_client-cert", t.ClientCert)
		set("nomad_client-key", t.ClientKey)
		set("nomad_tls-server-name", t.TLSServerName)
		if t.Insecure {
			set("nomad_skip-verify", "true")
		}
	}
	if a := cfg.HttpAuth; a != nil && m["nomad_http-auth"] == "" {
		auth := a.Username
		if a.Password != "" {
			auth += ":" + a.Password
		}
		m["nomad_http-auth"] = auth
	}
	if cfg.WaitTime != 0 {
		set("nomad_block-query-wait-time", cfg.WaitTime.String())
	}
}

func (c *Client) want(t PluginType) error {
	if c.typ != t {
		return fmt.Errorf("plugin %s is a %s plugin, not a %s", c.driver, c.typ, t)
	}
	return nil
}

// Query is an APM call. Like the agent's client it returns what the
// plugin sent: no metrics is no error here (the agent's check then fails
// with "no metrics"), order as sent (the agent sorts), a missing
// timestamp as the Unix epoch.
func (c *Client) Query(query string, r TimeRange) ([]Metric, error) {
	if err := c.want(TypeAPM); err != nil {
		return nil, err
	}
	ms, err := c.rpc.(apm.APM).Query(query, timeRangeToSDK(r))
	if err != nil {
		return nil, err
	}
	return metricsFromSDK(ms), nil
}

// QueryMultiple is the APM call only Enterprise Dynamic Application Sizing
// makes.
func (c *Client) QueryMultiple(query string, r TimeRange) ([][]Metric, error) {
	if err := c.want(TypeAPM); err != nil {
		return nil, err
	}
	sets, err := c.rpc.(apm.APM).QueryMultiple(query, timeRangeToSDK(r))
	if err != nil {
		return nil, err
	}
	out := make([][]Metric, len(sets))
	for i, ms := range sets {
		out[i] = metricsFromSDK(ms)
	}
	return out, nil
}

// Run is a strategy call as the agent makes it: an empty action in the
// request, the check, metrics and current count. The answer is read as
// the agent reads it: a direction that is not none, down or up, or meta
// that is not a JSON object, is an error; meta JSON numbers are float64;
// no meta is an empty map (the agent canonicalizes it so, and sends it on
// to the target as {}).
func (c *Client) Run(check Check, metrics []Metric, count int64) (Action, error) {
	if err := c.want(TypeStrategy); err != nil {
		return Action{}, err
	}
	eval, err := c.rpc.(strategy.Strategy).Run(&sdk.ScalingCheckEvaluation{Check: checkToSDK(check), Metrics: metricsToSDK(metrics)}, count)
	if err != nil {
		return Action{}, err
	}
	if eval.Action == nil {
		return Action{Direction: DirectionNone}, nil
	}
	return actionFromSDK(*eval.Action)
}

// scaleNoOp is what Scale returns for code Aborted.
type scaleNoOp struct{ msg string }

func (e *scaleNoOp) Error() string        { return e.msg }
func (e *scaleNoOp) Is(target error) bool { return target == ErrScaleNoOp }

// Scale is a target call. An action the agent could not encode (no
// direction) is an error before the call; a plugin's Aborted answer comes
// back as an error that errors.Is ErrScaleNoOp with the plugin's message,
// any other as the gRPC error.
func (c *Client) Scale(action Action, config map[string]string) error {
	if err := c.want(TypeTarget); err != nil {
		return err
	}
	a, err := actionToSDK(action)
	if err != nil {
		return err
	}
	err = c.rpc.(target.Target).Scale(a, config)
	var noop *sdk.TargetScalingNoOpError
	if errors.As(err, &noop) {
		return &scaleNoOp{msg: noop.Error()}
	}
	return err
}

// Status is a target call, bounded by the config's ConfigKeyGRPCTimeout
// when it has one (the agent puts it in every policy's target config); an
// unparsable timeout is an error, as in the agent.
func (c *Client) Status(config map[string]string) (TargetStatus, error) {
	if err := c.want(TypeTarget); err != nil {
		return TargetStatus{}, err
	}
	st, err := c.rpc.(target.Target).Status(config)
	if err != nil {
		return TargetStatus{}, err
	}
	return TargetStatus{Ready: st.Ready, Count: st.Count, Meta: st.Meta}, nil
}

// ErrorMessage is err's message as the plugin wrote it: a gRPC error's
// description without the "rpc error: code = … desc = " wrapping.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var noop *scaleNoOp
	if errors.As(err, &noop) {
		return noop.msg
	}
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return strings.TrimSpace(err.Error())
}
