package autoscaler

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/nomad-autoscaler/plugins/shared"
	sharedpb "github.com/hashicorp/nomad-autoscaler/plugins/shared/proto/v1"
	strategypb "github.com/hashicorp/nomad-autoscaler/plugins/strategy/proto/v1"
	targetpb "github.com/hashicorp/nomad-autoscaler/plugins/target/proto/v1"
	"github.com/hashicorp/nomad/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// pluginName is the test plugin's file name, which is its driver.
const pluginName = "nomad-gpu-testplugin"

var pluginBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "autoscaler-wire")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	pluginBin = filepath.Join(dir, pluginName)
	build := exec.Command("go", "build", "-o", pluginBin, "./internal/testplugin")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building the test plugin: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testNomad is an agent's Nomad config with every setting the agent
// passes on.
func testNomad() *api.Config {
	return &api.Config{
		Address:   "http://10.0.0.1:4646",
		Region:    "eu",
		Namespace: "gpu",
		SecretID:  "secret",
		HttpAuth:  &api.HttpBasicAuth{Username: "u", Password: "p"},
		WaitTime:  time.Minute,
		TLSConfig: &api.TLSConfig{
			CACert: "/ca.pem", CAPath: "/ca", ClientCert: "/c.pem", ClientKey: "/k.pem",
			TLSServerName: "server.eu.nomad", Insecure: true,
		},
	}
}

// start launches the test plugin as a typ plugin of its own kind.
func start(t *testing.T, typ PluginType, config map[string]string, opts ...LaunchOption) *Client {
	t.Helper()
	c, err := Launch(t.Context(), pluginBin, typ, config, append([]LaunchOption{WithArgs(typ.String())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	return c
}

// conn is the plugin's gRPC connection, for the tests that look below the
// Client at what goes on the wire.
func conn(t *testing.T, c *Client) *grpc.ClientConn {
	t.Helper()
	proto, err := c.client.Client()
	if err != nil {
		t.Fatal(err)
	}
	return proto.(*plugin.GRPCClient).Conn
}

func wantCode(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s %q", code, msg)
	}
	if got := status.Code(err); got != code {
		t.Fatalf("error %v: code %s, want %s", err, got, code)
	}
	if msg != "" && ErrorMessage(err) != msg {
		t.Fatalf("error message %q, want %q", ErrorMessage(err), msg)
	}
}

func TestLaunchChecksInfo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		typ     PluginType
		args    []string
		wantErr string
	}{
		{name: "apm", typ: TypeAPM, args: []string{"apm"}},
		{name: "strategy", typ: TypeStrategy, args: []string{"strategy"}},
		{name: "target", typ: TypeTarget, args: []string{"target"}},
		{name: "name differs from driver", typ: TypeAPM, args: []string{"apm", "-name", "other"},
			wantErr: `remote info doesn't match local config: it is apm "other", the agent wants apm "` + pluginName + `"`},
		{name: "type differs from block", typ: TypeStrategy, args: []string{"apm"},
			wantErr: `it is apm "` + pluginName + `", the agent wants strategy`},
		{name: "target served as apm", typ: TypeAPM, args: []string{"target"}, wantErr: "it is target"},
		{name: "unknown type", typ: PluginType(9), args: []string{"apm"}, wantErr: "plugin is of unknown type"},
		{name: "not a plugin", typ: TypeAPM, args: []string{"bogus"}, wantErr: "failed to instantiate plugin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Launch(t.Context(), pluginBin, tc.typ, nil, WithArgs(tc.args...))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				defer c.Kill()
				name, typ, err := c.PluginInfo()
				if err != nil || name != pluginName || typ != tc.typ {
					t.Fatalf("PluginInfo = %q, %s, %v; want %q, %s", name, typ, err, pluginName, tc.typ)
				}
				return
			}
			if err == nil {
				c.Kill()
				t.Fatalf("launched; want error %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestSetConfigErrors(t *testing.T) {
	for _, typ := range []PluginType{TypeAPM, TypeStrategy, TypeTarget} {
		t.Run(typ.String(), func(t *testing.T) {
			// At launch the agent fails to start.
			_, err := Launch(t.Context(), pluginBin, typ, map[string]string{"fail": "key x: want a number"}, WithArgs(typ.String()))
			if err == nil || !strings.Contains(err.Error(), "failed to set config on plugin "+pluginName) {
				t.Fatalf("Launch error %v, want a SetConfig failure", err)
			}
			wantCode(t, errors.Unwrap(err), codes.Unknown, "key x: want a number")
			// On reload the live plugin answers again.
			c := start(t, typ, nil)
			wantCode(t, c.SetConfig(map[string]string{"fail": "bad reload"}), codes.Unknown, "bad reload")
			if err := c.SetConfig(map[string]string{"ok": "1"}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// configSeen is the config the target plugin last got in SetConfig.
func configSeen(t *testing.T, c *Client) map[string]string {
	t.Helper()
	st, err := c.Status(nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range st.Meta {
		if k, ok := strings.CutPrefix(k, "cfg."); ok {
			out[k] = v
		}
	}
	return out
}

func TestSetConfigAddsNomadKeys(t *testing.T) {
	all := map[string]string{
		"nomad_address": "http://10.0.0.1:4646", "nomad_region": "eu", "nomad_namespace": "gpu",
		"nomad_token": "secret", "nomad_http-auth": "u:p", "nomad_ca-cert": "/ca.pem", "nomad_ca-path": "/ca",
		"nomad_client-cert": "/c.pem", "nomad_client-key": "/k.pem", "nomad_tls-server-name": "server.eu.nomad",
		"nomad_skip-verify": "true", "nomad_block-query-wait-time": "1m0s",
	}
	if len(all) != len(NomadConfigKeys) {
		t.Fatalf("test covers %d keys, NomadConfigKeys has %d", len(all), len(NomadConfigKeys))
	}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		nomad  *api.Config
		config map[string]string
		want   map[string]string
	}{
		{name: "all added", nomad: testNomad(), config: map[string]string{"k": "v"}, want: with(all, "k", "v")},
		{name: "block's own kept, empty filled", nomad: testNomad(),
			config: map[string]string{"nomad_address": "http://mine:4646", "nomad_region": ""},
			want:   with(all, "nomad_address", "http://mine:4646")},
		{name: "inherit false", nomad: testNomad(), config: map[string]string{"nomad_config_inherit": "false", "k": "v"},
			want: map[string]string{"nomad_config_inherit": "false", "k": "v"}},
		{name: "inherit true", nomad: testNomad(), config: map[string]string{"nomad_config_inherit": "true"},
			want: with(all, "nomad_config_inherit", "true")},
		{name: "inherit not a bool", nomad: testNomad(), config: map[string]string{"nomad_config_inherit": "nope"},
			want: map[string]string{"nomad_config_inherit": "nope"}},
		{name: "agent without nomad block", nomad: &api.Config{Address: "http://127.0.0.1:4646", WaitTime: 5 * time.Minute, TLSConfig: &api.TLSConfig{}},
			want: map[string]string{"nomad_address": "http://127.0.0.1:4646", "nomad_block-query-wait-time": "5m0s"}},
		{name: "no nomad", nomad: nil, config: map[string]string{"k": "v"}, want: map[string]string{"k": "v"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := start(t, TypeTarget, tc.config, WithNomad(tc.nomad))
			if got := configSeen(t, c); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("plugin got config\n%v\nwant\n%v", got, tc.want)
			}
			// A reload goes the same way, on the live process.
			if err := c.SetConfig(with(tc.config, "reloaded", "yes")); err != nil {
				t.Fatal(err)
			}
			if got := configSeen(t, c); !reflect.DeepEqual(got, with(tc.want, "reloaded", "yes")) {
				t.Fatalf("after reload the plugin got %v", got)
			}
		})
	}
	// The caller's map is not written to.
	cfg := map[string]string{"k": "v"}
	start(t, TypeTarget, cfg, WithNomad(testNomad()))
	if len(cfg) != 1 {
		t.Fatalf("Launch changed the caller's map: %v", cfg)
	}
}

func TestAgentNomadDefault(t *testing.T) {
	t.Setenv("NOMAD_ADDR", "http://nomad.example:4646")
	t.Setenv("NOMAD_TOKEN", "tok")
	cfg := AgentNomadDefault()
	m := map[string]string{}
	mergeNomad(m, cfg)
	want := map[string]string{"nomad_address": "http://nomad.example:4646", "nomad_token": "tok", "nomad_block-query-wait-time": "5m0s"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, m[k], v, m)
		}
	}
}

func TestQuery(t *testing.T) {
	c := start(t, TypeAPM, map[string]string{"x": "42.5"})
	to := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	from := to.Add(-5 * time.Minute)
	r := TimeRange{From: from, To: to}
	for _, tc := range []struct {
		query string
		want  []Metric
		code  codes.Code
		msg   string
	}{
		{query: "range", want: []Metric{{Time: from, Value: 1}, {Time: to, Value: 2}}},
		{query: "fixed:3", want: []Metric{{Time: from, Value: 0}, {Time: from.Add(time.Second), Value: 1}, {Time: from.Add(2 * time.Second), Value: 2}}},
		{query: "empty", want: []Metric{}},
		{query: "config:x", want: []Metric{{Time: to, Value: 42.5}}},
		{query: "error:prometheus is down: dial tcp: refused", code: codes.Unknown, msg: "prometheus is down: dial tcp: refused"},
		{query: "panic", code: codes.Internal, msg: "Query: plugin panicked: query panic"},
		// After a panic the plugin still serves.
		{query: "range", want: []Metric{{Time: from, Value: 1}, {Time: to, Value: 2}}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			got, err := c.Query(tc.query, r)
			if tc.code != codes.OK {
				wantCode(t, err, tc.code, tc.msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Query(%q) = %v, want %v", tc.query, got, tc.want)
			}
		})
	}
	t.Run("instant", func(t *testing.T) {
		got, err := c.Query("range", TimeRange{From: to, To: to})
		if err != nil || len(got) != 2 || !got[0].Time.Equal(to) || !got[1].Time.Equal(to) {
			t.Fatalf("Query = %v, %v", got, err)
		}
	})
	t.Run("multiple", func(t *testing.T) {
		got, err := c.QueryMultiple("fixed:2", r)
		if err != nil || len(got) != 2 || len(got[0]) != 2 || len(got[1]) != 2 {
			t.Fatalf("QueryMultiple = %v, %v", got, err)
		}
	})
	t.Run("not an apm", func(t *testing.T) {
		s := start(t, TypeStrategy, nil)
		if _, err := s.Query("range", r); err == nil {
			t.Fatal("a strategy answered Query")
		}
	})
}

func TestRun(t *testing.T) {
	c := start(t, TypeStrategy, map[string]string{"k": "v"}, WithNomad(nil))
	check := func(cfg map[string]string) Check {
		return Check{Name: "queue", Source: "nomad-gpu-apm", Query: "gpus_queued", QueryWindow: 5 * time.Minute,
			Strategy: "gpu-queue", Config: cfg}
	}
	for _, tc := range []struct {
		name   string
		config map[string]string
		want   Action
		errMsg string
	}{
		{name: "none", config: map[string]string{"direction": "none"},
			want: Action{Count: 4, Reason: "check queue", Direction: DirectionNone, Meta: map[string]any{}}},
		{name: "down", config: map[string]string{"direction": "down"},
			want: Action{Count: 4, Reason: "check queue", Direction: DirectionDown, Meta: map[string]any{}}},
		{name: "up with error flag", config: map[string]string{"direction": "up", "error_flag": "true"},
			want: Action{Count: 4, Reason: "check queue", Error: true, Direction: DirectionUp, Meta: map[string]any{}}},
		{name: "meta", config: map[string]string{"direction": "up", "meta": `{"a":1,"b":"x","c":{"d":[1,2.5,true,null]}}`},
			want: Action{Count: 4, Reason: "check queue", Direction: DirectionUp,
				Meta: map[string]any{"a": 1.0, "b": "x", "c": map[string]any{"d": []any{1.0, 2.5, true, nil}}}}},
		{name: "empty meta", config: map[string]string{"meta": `{}`},
			want: Action{Count: 4, Reason: "check queue", Direction: DirectionNone, Meta: map[string]any{}}},
		{name: "unspecified direction refused", config: map[string]string{"direction": "0"},
			errMsg: "strategy returned a bad action: scale direction is unknown: 0 (want none, down or up)"},
		{name: "unknown direction refused", config: map[string]string{"direction": "127"},
			errMsg: "strategy returned a bad action: scale direction is unknown: 127 (want none, down or up)"},
		{name: "domain error", config: map[string]string{"error": "threshold: want a number, got \"x\""},
			errMsg: "threshold: want a number, got \"x\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Run(check(tc.config), nil, 3)
			if tc.errMsg != "" {
				wantCode(t, err, codes.Unknown, tc.errMsg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Run = %#v\nwant %#v", got, tc.want)
			}
		})
	}

	t.Run("request round trip", func(t *testing.T) {
		ts := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		metrics := []Metric{{Time: ts, Value: 1.5}, {Time: ts.Add(time.Second), Value: -2}}
		chk := check(map[string]string{"echo": "true", "threshold": "0.5"})
		got, err := c.Run(chk, metrics, 7)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"check": chk, "metrics": metrics, "count": 7, "config": map[string]string{"k": "v"}}
		wantJSON, _ := json.Marshal(want)
		var wantMeta map[string]any
		_ = json.Unmarshal(wantJSON, &wantMeta)
		if !reflect.DeepEqual(got.Meta, wantMeta) {
			t.Fatalf("the plugin saw\n%v\nwant\n%v", got.Meta, wantMeta)
		}
	})

	// What goes on the wire, below the Client's reading of it.
	t.Run("wire", func(t *testing.T) {
		for _, tc := range []struct {
			config   map[string]string
			dir      sharedpb.ScalingDirection
			wantMeta string // "" for none on the wire
		}{
			{config: map[string]string{}, dir: sharedpb.ScalingDirection_SCALING_DIRECTION_NONE},
			{config: map[string]string{"meta": "null"}, dir: sharedpb.ScalingDirection_SCALING_DIRECTION_NONE},
			{config: map[string]string{"direction": "down", "meta": `{}`}, dir: sharedpb.ScalingDirection_SCALING_DIRECTION_DOWN, wantMeta: `{}`},
			{config: map[string]string{"direction": "up", "meta": `{"n":2}`}, dir: sharedpb.ScalingDirection_SCALING_DIRECTION_UP, wantMeta: `{"n":2}`},
		} {
			resp, err := strategypb.NewStrategyPluginServiceClient(conn(t, c)).Run(t.Context(),
				&strategypb.RunRequest{Action: &sharedpb.ScalingAction{}, Check: shared.ScalingPolicyCheckToProto(checkToSDK(check(tc.config))), Count: 1})
			if err != nil {
				t.Fatal(err)
			}
			a := resp.GetAction()
			if a.GetDirection() != tc.dir {
				t.Errorf("%v: direction %s, want %s", tc.config, a.GetDirection(), tc.dir)
			}
			switch {
			case tc.wantMeta == "" && a.GetMeta() != nil:
				t.Errorf("%v: meta %v on the wire, want none", tc.config, a.GetMeta())
			case tc.wantMeta != "" && (a.GetMeta().GetTypeUrl() != "" || string(a.GetMeta().GetValue()) != tc.wantMeta):
				t.Errorf("%v: meta %q (type_url %q), want %s", tc.config, a.GetMeta().GetValue(), a.GetMeta().GetTypeUrl(), tc.wantMeta)
			}
		}
	})
}

func TestTarget(t *testing.T) {
	c := start(t, TypeTarget, map[string]string{"k": "v"}, WithNomad(nil))

	t.Run("status", func(t *testing.T) {
		for _, tc := range []struct {
			config map[string]string
			want   TargetStatus
		}{
			{config: map[string]string{"count": "3", ConfigKeyGRPCTimeout: "7.5s"},
				want: TargetStatus{Ready: true, Count: 3, Meta: map[string]string{"req.count": "3", "req." + ConfigKeyGRPCTimeout: "7.5s", "cfg.k": "v"}}},
			{config: map[string]string{"count": "0", "ready": "false"},
				want: TargetStatus{Ready: false, Count: 0, Meta: map[string]string{"req.count": "0", "req.ready": "false", "cfg.k": "v"}}},
		} {
			got, err := c.Status(tc.config)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Status(%v) = %v, want %v", tc.config, got, tc.want)
			}
		}
		_, err := c.Status(map[string]string{"status_error": "job not found"})
		wantCode(t, err, codes.Unknown, "job not found")
		_, err = c.Status(map[string]string{"status_sleep": "3s", ConfigKeyGRPCTimeout: "100ms"})
		wantCode(t, err, codes.DeadlineExceeded, "")
		if _, err = c.Status(map[string]string{ConfigKeyGRPCTimeout: "soon"}); err == nil {
			t.Fatal("an unparsable timeout was taken")
		}
	})

	t.Run("scale", func(t *testing.T) {
		for _, a := range []Action{
			{Count: 5, Reason: "queue", Direction: DirectionUp, Meta: map[string]any{"nomad_autoscaler.count.capped": true, "n": 1.0}},
			{Count: 2, Direction: DirectionDown, Meta: map[string]any{}},
			// Upstream's server canonicalizes no meta to {}, as the agent does.
			{Count: -1, Reason: "dry", Direction: DirectionNone, Error: true, Meta: map[string]any{}},
		} {
			if err := c.Scale(a, map[string]string{"x": "y"}); err != nil {
				t.Fatal(err)
			}
			st, err := c.Status(nil)
			if err != nil {
				t.Fatal(err)
			}
			var got Action
			if err := json.Unmarshal([]byte(st.Meta["last"]), &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, a) || st.Count != a.Count {
				t.Errorf("the target got %#v (count %d), want %#v", got, st.Count, a)
			}
		}
	})

	t.Run("scale errors", func(t *testing.T) {
		err := c.Scale(Action{Count: 2, Direction: DirectionUp}, map[string]string{"scale_noop": "already at 2"})
		if !errors.Is(err, ErrScaleNoOp) || err.Error() != "already at 2: scale is a no-op" {
			t.Fatalf("no-op Scale: %v (%T), want ErrScaleNoOp with the plugin's message", err, err)
		}
		err = c.Scale(Action{Count: 2, Direction: DirectionUp}, map[string]string{"scale_error": "cloud quota exceeded"})
		wantCode(t, err, codes.Unknown, "cloud quota exceeded")
		if errors.Is(err, ErrScaleNoOp) {
			t.Fatal("a failure read as a no-op")
		}
		if err := c.Scale(Action{Count: 2}, nil); err == nil || !strings.Contains(err.Error(), "scale direction is unknown") {
			t.Fatalf("Scale without a direction: %v", err)
		}
	})

	t.Run("wire", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			req  *targetpb.ScaleRequest
			code codes.Code
			msg  string
		}{
			{name: "no-op is Aborted", code: codes.Aborted, msg: "already: scale is a no-op",
				req: &targetpb.ScaleRequest{Action: &sharedpb.ScalingAction{Direction: sharedpb.ScalingDirection_SCALING_DIRECTION_UP}, Config: map[string]string{"scale_noop": "already"}}},
			// Upstream's server decodes the action before our adapter sees
			// it, and returns its errors as they are: code Unknown.
			{name: "unspecified direction", code: codes.Unknown, msg: `scale direction is unknown: "SCALING_DIRECTION_UNSPECIFIED"`,
				req: &targetpb.ScaleRequest{Action: &sharedpb.ScalingAction{Count: 1}}},
			{name: "meta not JSON", code: codes.Unknown,
				req: &targetpb.ScaleRequest{Action: &sharedpb.ScalingAction{Direction: sharedpb.ScalingDirection_SCALING_DIRECTION_UP, Meta: &anypb.Any{Value: []byte("{")}}}},
			{name: "meta empty", code: codes.Unknown,
				req: &targetpb.ScaleRequest{Action: &sharedpb.ScalingAction{Direction: sharedpb.ScalingDirection_SCALING_DIRECTION_UP, Meta: &anypb.Any{}}}},
			{name: "meta an array", code: codes.Unknown,
				req: &targetpb.ScaleRequest{Action: &sharedpb.ScalingAction{Direction: sharedpb.ScalingDirection_SCALING_DIRECTION_UP, Meta: &anypb.Any{Value: []byte("[1]")}}}},
			{name: "meta JSON object", code: codes.OK,
				req: &targetpb.ScaleRequest{Action: &sharedpb.ScalingAction{Direction: sharedpb.ScalingDirection_SCALING_DIRECTION_UP, Meta: &anypb.Any{Value: []byte(`{"a":"b"}`)}}}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := targetpb.NewTargetPluginServiceClient(conn(t, c)).Scale(t.Context(), tc.req)
				if tc.code == codes.OK {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				wantCode(t, err, tc.code, tc.msg)
			})
		}
	})
}

func TestKill(t *testing.T) {
	c := start(t, TypeAPM, nil)
	c.Kill()
	if !c.Exited() {
		t.Fatal("plugin still running after Kill")
	}
	if _, err := c.Query("range", TimeRange{}); err == nil {
		t.Fatal("a killed plugin answered")
	}
	ctx, cancel := context.WithCancel(t.Context())
	c2, err := Launch(ctx, pluginBin, TypeAPM, nil, WithArgs("apm"))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for !c2.Exited() {
		if time.Now().After(deadline) {
			c2.Kill()
			t.Fatal("plugin still running after its context ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// handshakeLine is the only line the plugin may write to stdout.
var handshakeLine = regexp.MustCompile(`^1\|1\|unix\|/[^|]+\|grpc\|$`)

// TestHandshake runs the binary as go-plugin's host does, by hand: only
// the autoscaler's cookie starts it, stdout holds the handshake line and
// nothing else, stderr only hclog JSON the agent can parse.
func TestHandshake(t *testing.T) {
	hostEnv := []string{"PLUGIN_MIN_PORT=0", "PLUGIN_MAX_PORT=0", "PLUGIN_PROTOCOL_VERSIONS=1"}
	for _, tc := range []struct {
		name   string
		cookie string
		serves bool
	}{
		{name: "autoscaler cookie", cookie: Handshake.MagicCookieKey + "=" + Handshake.MagicCookieValue, serves: true},
		{name: "no cookie"},
		{name: "wrong value", cookie: Handshake.MagicCookieKey + "=e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255"},
		{name: "Nomad's cookie", cookie: "NOMAD_PLUGIN_MAGIC_COOKIE=e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kind := range []string{"apm", "strategy", "target"} {
				cmd := exec.Command(pluginBin, kind)
				cmd.Env = append(withoutCookies(os.Environ()), hostEnv...)
				if tc.cookie != "" {
					cmd.Env = append(cmd.Env, tc.cookie)
				}
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				stdout, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				out := make(chan []byte)
				go func() {
					b, _ := bufio.NewReader(stdout).ReadBytes('\n')
					out <- b
				}()
				var first []byte
				select {
				case first = <-out:
				case <-time.After(30 * time.Second):
					_ = cmd.Process.Kill()
					t.Fatal("no handshake line in 30s")
				}
				if !tc.serves {
					err := cmd.Wait()
					if len(first) != 0 || cmd.ProcessState.ExitCode() != 1 {
						t.Fatalf("%s without the cookie: stdout %q, %v; want nothing and exit 1", kind, first, err)
					}
					if !strings.Contains(stderr.String(), "This binary is a plugin") {
						t.Fatalf("stderr %q", stderr.String())
					}
					continue
				}
				if !handshakeLine.Match(bytes.TrimSuffix(first, []byte("\n"))) {
					t.Fatalf("%s: first stdout line %q is not a handshake", kind, first)
				}
				_ = cmd.Process.Signal(syscall.SIGTERM)
				rest := make(chan []byte)
				go func() {
					b := new(bytes.Buffer)
					_, _ = b.ReadFrom(stdout)
					rest <- b.Bytes()
				}()
				if b := <-rest; len(b) != 0 {
					t.Fatalf("%s wrote %q to stdout after the handshake", kind, b)
				}
				_ = cmd.Wait()
				checkLogLines(t, stderr.Bytes())
			}
		})
	}
}

// withoutCookies drops any magic cookie the test runs under.
func withoutCookies(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.Contains(kv, "_MAGIC_COOKIE=") {
			out = append(out, kv)
		}
	}
	return out
}

// checkLogLines fails unless every line is hclog JSON as the agent parses
// it: string @message, @level and @timestamp in hclog's layout.
func checkLogLines(t *testing.T, stderr []byte) {
	t.Helper()
	lines := bytes.Split(bytes.TrimSpace(stderr), []byte("\n"))
	if len(lines) == 0 || len(lines[0]) == 0 {
		t.Fatal("the plugin logged nothing")
	}
	for _, l := range lines {
		var entry map[string]any
		if err := json.Unmarshal(l, &entry); err != nil {
			t.Fatalf("stderr line %q is not JSON: %v", l, err)
		}
		for _, k := range []string{"@message", "@level", "@timestamp"} {
			if _, ok := entry[k].(string); !ok {
				t.Fatalf("stderr line %s: %s is not a string", l, k)
			}
		}
		if _, err := time.Parse("2006-01-02T15:04:05.000000Z07:00", entry["@timestamp"].(string)); err != nil {
			t.Fatalf("stderr line %s: timestamp: %v", l, err)
		}
	}
}

// TestWatchdog orphans a served plugin: its parent (a shell that starts it
// and waits for its handshake) exits, and the plugin must follow.
func TestWatchdog(t *testing.T) {
	dir := t.TempDir()
	hs := filepath.Join(dir, "handshake")
	script := `"$1" apm >"$2" 2>/dev/null & pid=$!
i=0; while [ ! -s "$2" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
echo $pid`
	cmd := exec.Command("sh", "-c", script, "sh", pluginBin, hs)
	cmd.Env = append(withoutCookies(os.Environ()), Handshake.MagicCookieKey+"="+Handshake.MagicCookieValue,
		"PLUGIN_MIN_PORT=0", "PLUGIN_MAX_PORT=0", "PLUGIN_PROTOCOL_VERSIONS=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(out), &pid); err != nil {
		t.Fatalf("shell said %q: %v", out, err)
	}
	if b, _ := os.ReadFile(hs); !handshakeLine.Match(bytes.TrimSpace(b)) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("plugin did not hand shake: %q", b)
	}
	deadline := time.Now().Add(15 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatal("orphaned plugin still running 15s after its parent exited")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive: the process exists and is not a zombie (an orphan's reaper may
// be slow, or absent in a container).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) S ...
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}
