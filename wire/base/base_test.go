package base_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nomad-gpu/nomad-gpu/wire/base"
	basepb "github.com/nomad-gpu/nomad-gpu/wire/proto/nomad/base"
	"github.com/nomad-gpu/nomad-gpu/wire/wiretest"
)

type testConfig struct {
	Name  string   `hcl:"name" default:"x"`
	Items []string `hcl:"items"`
}

type testPlugin struct{ got *testConfig }

func (p *testPlugin) Info() base.Info {
	return base.Info{Type: base.TypeDevice, Name: "test", Version: "0.1.0"}
}
func (p *testPlugin) NewConfig() any { return &testConfig{} }
func (p *testPlugin) SetConfig(c any, _ *base.AgentConfig) error {
	p.got = c.(*testConfig)
	return nil
}

func dialBase(t *testing.T, impl base.Plugin) basepb.BasePluginClient {
	t.Helper()
	set := base.PluginSet(impl, nil, "other",
		func(*grpc.Server, hclog.Logger) {},
		func(c *grpc.ClientConn) any { return c })
	return wiretest.Dispense(t, wiretest.Serve(t, set), "base").(basepb.BasePluginClient)
}

// SetConfig hands the agent's bytes to the guarded decoder: a payload whose
// lengths promise more than it holds is refused as invalid, and the plugin
// never sees it.
func TestSetConfigRefusesHostileMsgpack(t *testing.T) {
	p := &testPlugin{}
	c := dialBase(t, p)
	ctx := context.Background()
	for _, payload := range [][]byte{
		{0xdd, 0xff, 0xff, 0xff, 0xff},
		{0xdf, 0xff, 0xff, 0xff, 0xff},
		{0x81, 0xa5, 'i', 't', 'e', 'm', 's', 0xdd, 0xff, 0xff, 0xff, 0xff},
		{0x81, 0xa4, 'n', 'a', 'm', 'e', 0xdb, 0xff, 0xff, 0xff, 0xff},
	} {
		_, err := c.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: payload})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "test config: config is not valid msgpack: ") {
			t.Errorf("payload % x: error %v", payload, err)
		}
	}
	if p.got != nil {
		t.Fatalf("plugin was handed %+v", p.got)
	}
	if _, err := c.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: []byte{0x81, 0xa5, 'i', 't', 'e', 'm', 's', 0x91, 0xa1, 'a'}}); err != nil {
		t.Fatal(err)
	}
	if p.got == nil || p.got.Name != "x" || len(p.got.Items) != 1 {
		t.Fatalf("got %+v", p.got)
	}
}

func TestPump(t *testing.T) {
	t.Run("forwards until ctx is done", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		ch := make(chan int, 2)
		ch <- 1
		ch <- 2
		var got []int
		done := make(chan error)
		go func() {
			done <- base.Pump(ctx, ch, func(v int) error {
				got = append(got, v)
				if len(got) == 2 {
					cancel()
				}
				return nil
			}, func() error { t.Error("ended called"); return nil })
		}()
		if err := <-done; err != nil || len(got) != 2 {
			t.Fatalf("err %v, got %v", err, got)
		}
	})
	t.Run("closed channel keeps the stream open", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		ch := make(chan int)
		close(ch)
		ended := make(chan struct{})
		done := make(chan error)
		go func() {
			done <- base.Pump(ctx, ch, func(int) error { return nil }, func() error { close(ended); return nil })
		}()
		<-ended
		select {
		case err := <-done:
			t.Fatalf("Pump returned %v before ctx was done", err)
		case <-time.After(50 * time.Millisecond):
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("without ended a closed channel ends it", func(t *testing.T) {
		ch := make(chan int)
		close(ch)
		if err := base.Pump(context.Background(), ch, func(int) error { return nil }, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("errors of send and ended end it", func(t *testing.T) {
		boom := errors.New("boom")
		ch := make(chan int, 1)
		ch <- 1
		if err := base.Pump(context.Background(), ch, func(int) error { return boom }, nil); err != boom {
			t.Fatalf("send error: got %v", err)
		}
		close(ch)
		if err := base.Pump(context.Background(), ch, nil, func() error { return boom }); err != boom {
			t.Fatalf("ended error: got %v", err)
		}
	})
}
