// Package metrics is the Prometheus exporter plumbing both plugins share:
// the `metrics { … }` config block, an HTTP server for /metrics over a
// registry of the plugin's own (never the global default), started only in
// the plugin's runtime instance, and helpers to build collectors from the
// metric list in package contract.
//
// Nomad launches a plugin binary several times: to read its info, to
// validate its config (SetConfig twice) and to run it. Only the last may
// bind the address, so an Exporter serves only once Activate is called,
// which a plugin does when it gets SetConfig with the agent's runtime
// config or when Nomad opens its Fingerprint stream. A bind failure never
// stops the plugin: it is logged, kept for the plugin to show (Err), and
// retried at the next Activate.
package metrics

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nomad-gpu/nomad-gpu/contract"
)

// Path is where the metrics are served.
const Path = "/metrics"

// Config is a plugin's `metrics { … }` block. Without an address nothing
// listens.
type Config struct {
	// Address is the host:port /metrics is served on, e.g.
	// "127.0.0.1:9400"; "" (the default) is off. Port 0 takes any free port.
	Address string `hcl:"address"`
	// NodeName is the host label on every series: Nomad's node name where
	// the agent's telemetry uses it (use_node_name) or the node's name is
	// not its hostname; the hostname by default, as Nomad's own host label.
	NodeName string `hcl:"node_name"`
}

// Validate checks the block; errors name the key under prefix ("metrics").
func (c Config) Validate(prefix string) error {
	if c.Address != "" {
		if err := checkAddress(c.Address); err != nil {
			return fmt.Errorf("%s.address: %q %v", prefix, c.Address, err)
		}
	}
	if c.NodeName != "" {
		if !utf8.ValidString(c.NodeName) || strings.TrimSpace(c.NodeName) != c.NodeName ||
			strings.IndexFunc(c.NodeName, unicode.IsControl) >= 0 {
			return fmt.Errorf("%s.node_name: %q must be a node name without control characters or surrounding blanks", prefix, c.NodeName)
		}
	}
	return nil
}

func checkAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("is not a host:port address (e.g. \"127.0.0.1:9400\", \":9400\" for every interface)")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("has port %q; allowed: 0 to 65535", port)
	}
	if strings.ContainsAny(host, " \t/") {
		return fmt.Errorf("has host %q, which is neither an IP address nor a host name", host)
	}
	return nil
}

// Host is the host label: NodeName, else the hostname.
func (c Config) Host() string {
	if c.NodeName != "" {
		return c.NodeName
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "unknown"
}

// Exporter serves one registry on the configured address. Its methods are
// safe for concurrent use.
type Exporter struct {
	log     hclog.Logger
	reg     *prometheus.Registry
	handler http.Handler

	mu      sync.Mutex
	cfg     Config
	active  bool
	srv     *http.Server
	serving string // the configured address being served
	bound   string // the listener's address
	err     error
}

// NewExporter makes an exporter whose registry holds cs.
func NewExporter(logger hclog.Logger, cs ...prometheus.Collector) *Exporter {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(cs...)
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            logger.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 8,
		Timeout:             30 * time.Second,
	})
	mux := http.NewServeMux()
	mux.Handle(Path, h)
	return &Exporter{log: logger, reg: reg, handler: mux}
}

// Registry is the exporter's own registry.
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

// Handler serves Path, as the HTTP server does.
func (e *Exporter) Handler() http.Handler { return e.handler }

// SetConfig takes the plugin's metrics block. An active exporter applies it
// at once: it starts, moves to the new address or stops; the same address
// again changes nothing.
func (e *Exporter) SetConfig(c Config) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cfg = c
	if !e.active {
		return nil
	}
	return e.applyLocked()
}

// Activate marks this process as the plugin's runtime instance and serves
// the configured address, retrying one that failed to bind.
func (e *Exporter) Activate() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.active = true
	return e.applyLocked()
}

// Enabled says whether this is the runtime instance and an address is set.
func (e *Exporter) Enabled() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.active && e.cfg.Address != ""
}

func (e *Exporter) applyLocked() error {
	want := e.cfg.Address
	if e.srv != nil && e.serving == want {
		return nil
	}
	if e.srv != nil {
		e.stopLocked()
	}
	if want == "" {
		e.err = nil
		return nil
	}
	ln, err := net.Listen("tcp", want)
	if err != nil {
		err = fmt.Errorf("metrics.address: %w", err)
		if e.err == nil || e.err.Error() != err.Error() {
			e.log.Error("metrics not served; retrying at the next fingerprint", "address", want, "error", err)
		}
		e.err = err
		return err
	}
	srv := &http.Server{
		Handler:           e.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          e.log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
	e.srv, e.serving, e.bound, e.err = srv, want, ln.Addr().String(), nil
	e.log.Info("serving metrics", "address", e.bound, "path", Path)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("metrics server stopped", "address", want, "error", err)
		}
	}()
	return nil
}

func (e *Exporter) stopLocked() {
	if e.srv != nil {
		e.srv.Close()
		e.log.Info("stopped serving metrics", "address", e.bound)
	}
	e.srv, e.serving, e.bound = nil, "", ""
}

// Addr is the address being listened on ("" when not serving); with port
// 0 configured, it has the port taken.
func (e *Exporter) Addr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bound
}

// Err is why the configured address is not served, nil when it is or when
// none is set.
func (e *Exporter) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Close stops serving; a later Activate serves again.
func (e *Exporter) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopLocked()
	e.active = false
	return nil
}

// Descs builds one descriptor per metric of ms, by name.
func Descs(ms []contract.Metric) map[string]*prometheus.Desc {
	out := make(map[string]*prometheus.Desc, len(ms))
	for _, m := range ms {
		out[m.Name] = prometheus.NewDesc(m.Name, m.Help, m.Labels, nil)
	}
	return out
}

// Find returns the metric of ms called name; it panics when there is none,
// which is a programming error caught by any test that builds collectors.
func Find(ms []contract.Metric, name string) contract.Metric {
	for _, m := range ms {
		if m.Name == name {
			return m
		}
	}
	panic("metrics: " + name + " is not in the contract's list")
}
