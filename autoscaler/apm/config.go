package apm

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/internal/metrics"
)

// Nomad connection keys the autoscaler agent passes to every plugin (see
// nomad-autoscaler sdk/helper/nomad/config.go).
const (
	cfgNomadAddress            = "nomad_address"
	cfgNomadRegion             = "nomad_region"
	cfgNomadNamespace          = "nomad_namespace"
	cfgNomadToken              = "nomad_token"
	cfgNomadHTTPAuth           = "nomad_http-auth"
	cfgNomadCACert             = "nomad_ca-cert"
	cfgNomadCAPath             = "nomad_ca-path"
	cfgNomadClientCert         = "nomad_client-cert"
	cfgNomadClientKey          = "nomad_client-key"
	cfgNomadTLSServerName      = "nomad_tls-server-name"
	cfgNomadSkipVerify         = "nomad_skip-verify"
	cfgNomadBlockQueryWaitTime = "nomad_block-query-wait-time"
	cfgNomadConfigInherit      = "nomad_config_inherit"
)

// The plugin's own keys.
const (
	cfgDefaultGPUsPerNode = "default_gpus_per_node"
	cfgStatsTTL           = "stats_ttl"
	cfgMinRefresh         = "min_refresh_interval"
	cfgSyncTimeout        = "sync_timeout"
	cfgMaxStaleness       = "max_staleness"
	cfgUtilStat           = "util_stat"
	// The cluster figures' keys.
	cfgMetricsAddress  = "metrics_address"
	cfgPriorityTiers   = "priority_tiers"
	cfgFinishedWindow  = "finished_window"
	cfgFinishedMax     = "finished_max_allocs"
	cfgFinishedRefresh = "finished_refresh_interval"
	cfgPrices          = "prices"
)

var ownKeys = []string{
	cfgDefaultGPUsPerNode, cfgStatsTTL, cfgMinRefresh, cfgSyncTimeout, cfgMaxStaleness, cfgUtilStat,
	cfgMetricsAddress, cfgPriorityTiers, cfgFinishedWindow, cfgFinishedMax, cfgFinishedRefresh, cfgPrices,
}

// Config is the plugin's parsed configuration.
type Config struct {
	// Nomad is the API client configuration (from the nomad_* keys).
	Nomad *api.Config
	// Namespace is what the lists read: nomad_namespace, else "*".
	Namespace string
	// DefaultGPUsPerNode is the node shape for nodes_needed when the query
	// gives none and no matching node has the device (0: none).
	DefaultGPUsPerNode int
	// StatsTTL is how long a node's device stats are reused (gpu_util_pct).
	StatsTTL time.Duration
	// MinRefresh is the least time between two lists of one kind: it
	// coalesces bursts of changes on a busy cluster.
	MinRefresh time.Duration
	// SyncTimeout bounds how long a query waits for the first list.
	SyncTimeout time.Duration
	// MaxStaleness is how long a watch may keep failing before queries
	// that need it fail instead of answering from the last good state.
	MaxStaleness time.Duration
	// BlockWait is the blocking query wait (nomad_block-query-wait-time).
	BlockWait time.Duration
	// UtilStat is the device stat attribute gpu_util_pct averages.
	UtilStat string
	// MetricsAddress is where the Prometheus exporter listens (host:port);
	// empty: no exporter, and nothing the cluster figures alone need is
	// read from Nomad.
	MetricsAddress string
	// Tiers bucket job priorities for the figures' priority label.
	Tiers Tiers
	// FinishedWindow is how far back the task figures look;
	// FinishedMax the most terminal allocations one list reads (the most
	// recently created); FinishedRefresh the least time between two lists
	// of them.
	FinishedWindow  time.Duration
	FinishedMax     int
	FinishedRefresh time.Duration
	// Prices are the price of a node-hour by pool and node class, for the
	// cost figures (none: no price series).
	Prices Prices
}

// Defaults.
const (
	DefaultStatsTTL     = 30 * time.Second
	DefaultMinRefresh   = time.Second
	DefaultSyncTimeout  = 30 * time.Second
	DefaultMaxStaleness = time.Minute
	DefaultBlockWait    = 5 * time.Minute
	// DefaultUtilStat is the stat our device plugin (devicefp/stats.go)
	// and HashiCorp's nomad-device-nvidia report.
	DefaultUtilStat = "GPU utilization"
	// Cluster figures.
	DefaultFinishedWindow  = time.Hour
	DefaultFinishedMax     = 5000
	DefaultFinishedRefresh = 30 * time.Second
)

// ParseConfig turns SetConfig's map into a Config. The nomad_* keys are
// read as nomad-autoscaler's ConfigFromNamespacedMap reads them (with
// errors, rather than silently ignoring bad booleans and durations);
// any other key than the plugin's own is an error.
func ParseConfig(m map[string]string) (*Config, error) {
	c := &Config{
		Nomad:        &api.Config{TLSConfig: &api.TLSConfig{}},
		Namespace:    "*",
		StatsTTL:     DefaultStatsTTL,
		MinRefresh:   DefaultMinRefresh,
		SyncTimeout:  DefaultSyncTimeout,
		MaxStaleness: DefaultMaxStaleness,
		BlockWait:    DefaultBlockWait,
		UtilStat:     DefaultUtilStat,

		Tiers:           DefaultTiers,
		FinishedWindow:  DefaultFinishedWindow,
		FinishedMax:     DefaultFinishedMax,
		FinishedRefresh: DefaultFinishedRefresh,
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		var err error
		switch k {
		case cfgNomadAddress:
			c.Nomad.Address = v
		case cfgNomadRegion:
			c.Nomad.Region = v
		case cfgNomadNamespace:
			c.Nomad.Namespace = v
			if v != "" {
				c.Namespace = v
			}
		case cfgNomadToken:
			c.Nomad.SecretID = v
		case cfgNomadHTTPAuth:
			c.Nomad.HttpAuth = httpAuthFromString(v)
		case cfgNomadCACert:
			c.Nomad.TLSConfig.CACert = v
		case cfgNomadCAPath:
			c.Nomad.TLSConfig.CAPath = v
		case cfgNomadClientCert:
			c.Nomad.TLSConfig.ClientCert = v
		case cfgNomadClientKey:
			c.Nomad.TLSConfig.ClientKey = v
		case cfgNomadTLSServerName:
			c.Nomad.TLSConfig.TLSServerName = v
		case cfgNomadSkipVerify:
			if v != "" {
				c.Nomad.TLSConfig.Insecure, err = strconv.ParseBool(v)
			}
		case cfgNomadBlockQueryWaitTime:
			if v != "" {
				c.BlockWait, err = positiveDuration(v)
			}
		case cfgNomadConfigInherit:
			// The agent's own switch; it stays in the map.
		case cfgDefaultGPUsPerNode:
			c.DefaultGPUsPerNode, err = strconv.Atoi(v)
			if err == nil && c.DefaultGPUsPerNode < 1 {
				err = fmt.Errorf("not a positive integer")
			}
		case cfgStatsTTL:
			c.StatsTTL, err = positiveDuration(v)
		case cfgMinRefresh:
			c.MinRefresh, err = time.ParseDuration(v)
			if err == nil && c.MinRefresh < 0 {
				err = fmt.Errorf("negative")
			}
		case cfgSyncTimeout:
			c.SyncTimeout, err = positiveDuration(v)
		case cfgMaxStaleness:
			c.MaxStaleness, err = time.ParseDuration(v)
			if err == nil && c.MaxStaleness < 0 {
				err = fmt.Errorf("negative")
			}
		case cfgUtilStat:
			if v == "" {
				err = fmt.Errorf("empty")
			}
			c.UtilStat = v
		case cfgMetricsAddress:
			if v != "" {
				err = metrics.CheckListenAddress(v)
			}
			c.MetricsAddress = v
		case cfgPriorityTiers:
			c.Tiers, err = ParseTiers(v)
		case cfgFinishedWindow:
			c.FinishedWindow, err = positiveDuration(v)
		case cfgFinishedMax:
			c.FinishedMax, err = strconv.Atoi(v)
			if err == nil && c.FinishedMax < 1 {
				err = fmt.Errorf("not a positive integer")
			}
		case cfgFinishedRefresh:
			c.FinishedRefresh, err = time.ParseDuration(v)
			if err == nil && c.FinishedRefresh < 0 {
				err = fmt.Errorf("negative")
			}
		case cfgPrices:
			c.Prices, err = ParsePrices(v)
		default:
			if strings.HasPrefix(k, "nomad_") {
				return nil, fmt.Errorf("config: unknown Nomad key %q; allowed: nomad_address, nomad_region, nomad_namespace, nomad_token, nomad_http-auth, nomad_ca-cert, nomad_ca-path, nomad_client-cert, nomad_client-key, nomad_tls-server-name, nomad_skip-verify, nomad_block-query-wait-time", k)
			}
			return nil, fmt.Errorf("config: unknown key %q; allowed: %s and the nomad_* connection keys", k, strings.Join(ownKeys, ", "))
		}
		if err != nil {
			return nil, fmt.Errorf("config: %s = %q: %v (%s)", k, v, err, keyHelp(k))
		}
	}
	// Blocking queries are held up to BlockWait (plus Nomad's jitter of
	// wait/16): the HTTP client must not time out before.
	c.Nomad.WaitTime = c.BlockWait
	return c, nil
}

func keyHelp(k string) string {
	switch k {
	case cfgNomadSkipVerify:
		return "want true or false"
	case cfgNomadBlockQueryWaitTime, cfgStatsTTL, cfgSyncTimeout:
		return "want a positive duration such as 30s or 5m"
	case cfgMinRefresh, cfgMaxStaleness:
		return "want a duration such as 1s, 0 for none"
	case cfgDefaultGPUsPerNode:
		return "want a positive integer: the GPUs one new node brings"
	case cfgUtilStat:
		return "want a device stat name such as \"GPU utilization\""
	case cfgMetricsAddress:
		return "want host:port to serve Prometheus metrics on, such as 127.0.0.1:9403 or :9403; unset for none"
	case cfgPriorityTiers:
		return "want decreasing job priority bounds such as 70,40: tiers P0 >= 70, P1 >= 40, P2 below"
	case cfgFinishedWindow:
		return "want a positive duration such as 1h"
	case cfgFinishedMax:
		return "want a positive integer: the most finished allocations one list reads"
	case cfgFinishedRefresh:
		return "want a duration such as 30s, 0 for none"
	case cfgPrices:
		return "want comma-separated pool=price or pool/class=price, the price of one node-hour such as \"training/gpu-burst=3.2,training=2.5\"; a pool alone prices its nodes of every other class"
	}
	return ""
}

func positiveDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err == nil && d <= 0 {
		err = fmt.Errorf("not positive")
	}
	return d, err
}

// httpAuthFromString is nomad-autoscaler's HTTPAuthFromString: "user" or
// "user:password".
func httpAuthFromString(auth string) *api.HttpBasicAuth {
	if auth == "" {
		return nil
	}
	user, pass, _ := strings.Cut(auth, ":")
	return &api.HttpBasicAuth{Username: user, Password: pass}
}

// newNomadClient builds the API client. Defaults and NOMAD_* environment
// come from api.DefaultConfig, overridden by the keys given, as the agent
// does (MergeDefaultWithAgentConfig). The HTTP client has no overall
// timeout: blocking queries are bounded by their wait time (a response
// header timeout just above it) and cancelled by context; other calls
// carry their own deadline.
func newNomadClient(c *Config) (*api.Client, error) {
	cfg := api.DefaultConfig()
	n := c.Nomad
	if n.Address != "" {
		cfg.Address = n.Address
	}
	if n.Region != "" {
		cfg.Region = n.Region
	}
	if n.Namespace != "" {
		cfg.Namespace = n.Namespace
	}
	if n.SecretID != "" {
		cfg.SecretID = n.SecretID
	}
	if n.HttpAuth != nil {
		cfg.HttpAuth = n.HttpAuth
	}
	t := n.TLSConfig
	if t.CACert != "" {
		cfg.TLSConfig.CACert = t.CACert
	}
	if t.CAPath != "" {
		cfg.TLSConfig.CAPath = t.CAPath
	}
	if t.ClientCert != "" {
		cfg.TLSConfig.ClientCert = t.ClientCert
	}
	if t.ClientKey != "" {
		cfg.TLSConfig.ClientKey = t.ClientKey
	}
	if t.TLSServerName != "" {
		cfg.TLSConfig.TLSServerName = t.TLSServerName
	}
	if t.Insecure {
		cfg.TLSConfig.Insecure = true
	}
	cfg.WaitTime = n.WaitTime
	if !strings.HasPrefix(cfg.Address, "unix:") {
		hc := &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          100,
			MaxIdleConnsPerHost:   32,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
			TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
			// A blocking query answers within its wait plus Nomad's jitter
			// (wait/16); past that (plus slack) the connection is dead.
			ResponseHeaderTimeout: c.BlockWait + c.BlockWait/16 + 30*time.Second,
		}}
		if err := api.ConfigureTLS(hc, cfg.TLSConfig); err != nil {
			return nil, fmt.Errorf("nomad TLS: %w", err)
		}
		cfg.HttpClient = hc
	}
	cl, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("nomad client: %w", err)
	}
	return cl, nil
}
