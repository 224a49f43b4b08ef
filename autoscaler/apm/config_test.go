package apm

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

func TestParseConfigNomadKeys(t *testing.T) {
	c, err := ParseConfig(map[string]string{
		"nomad_address":               "https://nomad.example:4646",
		"nomad_region":                "eu",
		"nomad_namespace":             "ml",
		"nomad_token":                 "secret",
		"nomad_http-auth":             "user:pa:ss",
		"nomad_ca-cert":               "/ca.pem",
		"nomad_ca-path":               "/cas",
		"nomad_client-cert":           "/c.pem",
		"nomad_client-key":            "/k.pem",
		"nomad_tls-server-name":       "server.global.nomad",
		"nomad_skip-verify":           "true",
		"nomad_block-query-wait-time": "2m",
		"nomad_config_inherit":        "true",
		"default_gpus_per_node":       "8",
		"stats_ttl":                   "10s",
		"min_refresh_interval":        "0",
		"sync_timeout":                "5s",
		"max_staleness":               "30s",
		"util_stat":                   "SM activity",
	})
	if err != nil {
		t.Fatal(err)
	}
	n := c.Nomad
	if n.Address != "https://nomad.example:4646" || n.Region != "eu" || n.Namespace != "ml" || n.SecretID != "secret" {
		t.Errorf("nomad: %+v", n)
	}
	if n.HttpAuth == nil || n.HttpAuth.Username != "user" || n.HttpAuth.Password != "pa:ss" {
		t.Errorf("http auth: %+v", n.HttpAuth)
	}
	tl := n.TLSConfig
	if tl.CACert != "/ca.pem" || tl.CAPath != "/cas" || tl.ClientCert != "/c.pem" || tl.ClientKey != "/k.pem" ||
		tl.TLSServerName != "server.global.nomad" || !tl.Insecure {
		t.Errorf("tls: %+v", tl)
	}
	if c.BlockWait != 2*time.Minute || n.WaitTime != 2*time.Minute || c.Namespace != "ml" || c.DefaultGPUsPerNode != 8 ||
		c.StatsTTL != 10*time.Second || c.MinRefresh != 0 || c.SyncTimeout != 5*time.Second ||
		c.MaxStaleness != 30*time.Second || c.UtilStat != "SM activity" {
		t.Errorf("config: %+v", c)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "*" || c.StatsTTL != DefaultStatsTTL || c.MinRefresh != DefaultMinRefresh || c.BlockWait != DefaultBlockWait ||
		c.UtilStat != DefaultUtilStat || c.DefaultGPUsPerNode != 0 || c.Nomad.HttpAuth != nil {
		t.Errorf("defaults: %+v", c)
	}
	if c.MetricsAddress != "" || c.Tiers.String() != "70,40" || c.FinishedWindow != time.Hour || c.FinishedMax != 5000 || c.FinishedRefresh != 30*time.Second {
		t.Errorf("figure defaults: %+v", c)
	}
	c, err = ParseConfig(map[string]string{"metrics_address": ":9464", "priority_tiers": "90,50,10", "finished_window": "30m",
		"finished_max_allocs": "100", "finished_refresh_interval": "0", "nomad_address": "x"})
	if err != nil || c.MetricsAddress != ":9464" || c.Tiers.String() != "90,50,10" || c.FinishedWindow != 30*time.Minute ||
		c.FinishedMax != 100 || c.FinishedRefresh != 0 {
		t.Errorf("figure keys: %+v %v", c, err)
	}
	if c, err := ParseConfig(map[string]string{"metrics_address": ""}); err != nil || c.MetricsAddress != "" {
		t.Errorf("empty metrics_address: %v", err)
	}
	if c, _ := ParseConfig(map[string]string{"nomad_namespace": ""}); c.Namespace != "*" {
		t.Errorf("empty namespace reads %q, want *", c.Namespace)
	}
}

func TestParseConfigErrors(t *testing.T) {
	cases := []struct {
		k, v string
		want []string
	}{
		{"nomad_skip-verify", "yes", []string{"nomad_skip-verify", "true or false"}},
		{"nomad_block-query-wait-time", "5", []string{"nomad_block-query-wait-time", "positive duration"}},
		{"nomad_block-query-wait-time", "-1s", []string{"not positive"}},
		{"nomad_adress", "x", []string{`unknown Nomad key "nomad_adress"`, "nomad_address"}},
		{"gpus_per_node", "8", []string{`unknown key "gpus_per_node"`, "default_gpus_per_node"}},
		{"default_gpus_per_node", "0", []string{"default_gpus_per_node", "positive integer"}},
		{"default_gpus_per_node", "x", []string{"positive integer"}},
		{"stats_ttl", "0s", []string{"stats_ttl", "positive duration"}},
		{"min_refresh_interval", "-1s", []string{"negative"}},
		{"max_staleness", "soon", []string{"max_staleness"}},
		{"sync_timeout", "", []string{"sync_timeout"}},
		{"util_stat", "", []string{"util_stat", "empty"}},
		{"metrics_address", "9464", []string{`metrics_address = "9464"`, "missing port", "host:port"}},
		{"metrics_address", "localhost:http", []string{"metrics_address", `port "http"`}},
		{"metrics_address", "127.0.0.1:70000", []string{"metrics_address", "0 to 65535"}},
		{"metrics_address", "a b:9464", []string{"metrics_address", "not a host"}},
		{"priority_tiers", "40,70", []string{"priority_tiers", "must decrease", "70,40"}},
		{"priority_tiers", "high", []string{"priority_tiers", "not a positive integer"}},
		{"finished_window", "0s", []string{"finished_window", "positive duration"}},
		{"finished_max_allocs", "0", []string{"finished_max_allocs", "positive integer"}},
		{"finished_refresh_interval", "-1s", []string{"finished_refresh_interval", "negative"}},
	}
	for _, c := range cases {
		_, err := ParseConfig(map[string]string{c.k: c.v})
		if err == nil {
			t.Errorf("%s=%q: no error", c.k, c.v)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s=%q: error %q lacks %q", c.k, c.v, err, w)
			}
		}
	}
}

func TestPluginUnconfiguredAndBadQuery(t *testing.T) {
	p := New(nil)
	defer p.Close()
	if _, err := p.Query("gpus_queued", autoscaler.TimeRange{}); err == nil || !strings.Contains(err.Error(), "not configured") {
		t.Fatalf("unconfigured: %v", err)
	}
	if err := p.SetConfig(map[string]string{"bogus": "1"}); err == nil || !strings.Contains(err.Error(), PluginName) {
		t.Fatalf("bad config: %v", err)
	}
	if err := p.SetConfig(map[string]string{"nomad_address": "http://127.0.0.1:1", "sync_timeout": "1s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Query("gpus_queud", autoscaler.TimeRange{}); err == nil || !strings.Contains(err.Error(), "unknown metric") {
		t.Fatalf("bad query: %v", err)
	}
	// Nomad unreachable: the first list never comes, the query says why.
	_, err := p.Query("gpus_queued", autoscaler.TimeRange{})
	if err == nil || !strings.Contains(err.Error(), "sync_timeout") {
		t.Fatalf("unreachable: %v", err)
	}
	if s := p.Stats(); s.Queries != 3 || s.Calls == 0 {
		t.Fatalf("stats: %+v", s)
	}
}

func TestSetConfigReload(t *testing.T) {
	p := New(nil)
	m := map[string]string{"nomad_address": "http://127.0.0.1:1"}
	if err := p.SetConfig(m); err != nil {
		t.Fatal(err)
	}
	first := p.cache
	if err := p.SetConfig(map[string]string{"nomad_address": "http://127.0.0.1:1"}); err != nil || p.cache != first {
		t.Fatalf("same config: err %v, cache replaced %v", err, p.cache != first)
	}
	if err := p.SetConfig(map[string]string{"nomad_address": "http://127.0.0.1:2"}); err != nil || p.cache == first {
		t.Fatalf("new config: err %v, cache kept %v", err, p.cache == first)
	}
	// A bad reload keeps the running config.
	second := p.cache
	if err := p.SetConfig(map[string]string{"stats_ttl": "x"}); err == nil || p.cache != second {
		t.Fatalf("bad reload: err %v, cache replaced %v", err, p.cache != second)
	}
	p.Close()
	if err := p.SetConfig(m); err == nil {
		t.Fatal("SetConfig after Close succeeded")
	}
	if _, err := p.Query("gpus_queued", autoscaler.TimeRange{}); err == nil {
		t.Fatal("Query after Close succeeded")
	}
}
