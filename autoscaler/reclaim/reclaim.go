// Package reclaim watches a spot (preemptible) instance for the notice
// that its cloud takes it back, and drains its Nomad node the moment the
// notice comes. A cloud gives about two minutes (AWS), or 30 seconds (GCE,
// Azure at least): enough for a checkpointing task to commit and run again
// on another node, if it is stopped at once rather than killed with the
// instance. Nomad knows nothing of the notice: the watcher drains the
// node (no new work, services migrate; its meta, contract.DrainMetaReclaim,
// says why) and stops its batch work at once, which Nomad places again on
// other nodes (each checkpointing task of the gpu driver commits on its
// way out).
//
// Each cloud says it its own way, read from the instance metadata service
// (Source); one poll loop (Watcher) serves all. It runs on the node, as a
// system job of the spot pool (jobs/spot/reclaim-watch.nomad.hcl), since
// only the instance can read its own metadata.
package reclaim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Notice is a cloud's word that it takes the instance back.
type Notice struct {
	// At is when the instance goes; zero where the cloud does not say
	// (GCE: 30 seconds after the notice).
	At time.Time
	// What is the cloud's notice in a line, for the drain's meta and the
	// log.
	What string
}

// Source reads a cloud's notice; ok is false while there is none.
type Source interface {
	Notice(ctx context.Context) (n Notice, ok bool, err error)
}

// Advisor is a Source whose cloud also warns of a raised risk of
// reclaim before any notice (AWS's rebalance recommendation, often
// minutes ahead): the node may stop taking new work while its running
// work goes on.
type Advisor interface {
	Advice(ctx context.Context) (n Notice, ok bool, err error)
}

// Providers are the clouds whose notices are read.
var Providers = []string{"aws", "gce", "azure"}

// DefaultMetadataURL is each provider's instance metadata service.
var DefaultMetadataURL = map[string]string{
	"aws":   "http://169.254.169.254",
	"gce":   "http://metadata.google.internal",
	"azure": "http://169.254.169.254",
}

// NewSource is the provider's Source, reading its metadata service at
// base (DefaultMetadataURL when ""; another address for tests and
// proxies).
func NewSource(provider, base string, hc *http.Client) (Source, error) {
	if base == "" {
		base = DefaultMetadataURL[provider]
	}
	base = strings.TrimSuffix(base, "/")
	switch provider {
	case "aws":
		return &awsSource{base: base, hc: hc}, nil
	case "gce":
		return &gceSource{base: base, hc: hc}, nil
	case "azure":
		return &azureSource{base: base, hc: hc}, nil
	}
	return nil, fmt.Errorf("provider %q; allowed: %s", provider, strings.Join(Providers, ", "))
}

// get reads url with headers: the body, or ok false on 404.
func get(ctx context.Context, hc *http.Client, method, url string, headers map[string]string) (body []byte, ok bool, err error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, false, err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case err != nil:
		return nil, false, err
	case resp.StatusCode == http.StatusNotFound:
		return nil, false, nil
	case resp.StatusCode != http.StatusOK:
		return nil, false, fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, true, nil
}

// awsSource reads EC2's spot instance action with IMDSv2: a session token
// (PUT), then /latest/meta-data/spot/instance-action, which is 404 until
// the notice.
type awsSource struct {
	base string
	hc   *http.Client

	mu      sync.Mutex // guards token, expires
	token   string
	expires time.Time
}

// awsTokenTTL is how long an IMDSv2 token is asked for; it is renewed a
// minute before.
const awsTokenTTL = 6 * time.Hour

func (s *awsSource) sessionToken(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && time.Now().Before(s.expires) {
		return s.token, nil
	}
	body, ok, err := get(ctx, s.hc, http.MethodPut, s.base+"/latest/api/token",
		map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": fmt.Sprint(int(awsTokenTTL.Seconds()))})
	if err == nil && !ok {
		err = errors.New("IMDSv2 token: 404")
	}
	if err != nil {
		return "", err
	}
	s.token, s.expires = strings.TrimSpace(string(body)), time.Now().Add(awsTokenTTL-time.Minute)
	return s.token, nil
}

// read gets an IMDSv2 metadata path with the session token: the body,
// or ok false on 404.
func (s *awsSource) read(ctx context.Context, path string) ([]byte, bool, error) {
	token, err := s.sessionToken(ctx)
	if err != nil {
		return nil, false, err
	}
	return get(ctx, s.hc, http.MethodGet, s.base+path, map[string]string{"X-aws-ec2-metadata-token": token})
}

func (s *awsSource) Notice(ctx context.Context) (Notice, bool, error) {
	body, ok, err := s.read(ctx, "/latest/meta-data/spot/instance-action")
	if err != nil || !ok {
		return Notice{}, false, err
	}
	var action struct {
		Action string    `json:"action"`
		Time   time.Time `json:"time"`
	}
	if err := json.Unmarshal(body, &action); err != nil {
		return Notice{}, false, fmt.Errorf("spot/instance-action: %w: %q", err, body)
	}
	return Notice{At: action.Time, What: fmt.Sprintf("aws spot instance-action %s at %s", action.Action, action.Time.UTC().Format(time.RFC3339))}, true, nil
}

// Advice reads EC2's rebalance recommendation,
// /latest/meta-data/events/recommendations/rebalance: 404 until the
// instance is at raised risk of interruption, then {"noticeTime": …}.
func (s *awsSource) Advice(ctx context.Context) (Notice, bool, error) {
	body, ok, err := s.read(ctx, "/latest/meta-data/events/recommendations/rebalance")
	if err != nil || !ok {
		return Notice{}, false, err
	}
	var rec struct {
		NoticeTime time.Time `json:"noticeTime"`
	}
	if err := json.Unmarshal(body, &rec); err != nil {
		return Notice{}, false, fmt.Errorf("events/recommendations/rebalance: %w: %q", err, body)
	}
	return Notice{What: "aws rebalance recommendation at " + rec.NoticeTime.UTC().Format(time.RFC3339)}, true, nil
}

// gceSource reads GCE's instance/preempted: "TRUE" once the instance is
// being preempted (30 seconds before it stops).
type gceSource struct {
	base string
	hc   *http.Client
}

func (s *gceSource) Notice(ctx context.Context) (Notice, bool, error) {
	body, ok, err := get(ctx, s.hc, http.MethodGet, s.base+"/computeMetadata/v1/instance/preempted",
		map[string]string{"Metadata-Flavor": "Google"})
	if err != nil || !ok {
		return Notice{}, false, err
	}
	if strings.TrimSpace(string(body)) != "TRUE" {
		return Notice{}, false, nil
	}
	return Notice{What: "gce instance preempted"}, true, nil
}

// azureSource reads Azure's scheduled events for a Preempt of this VM
// (its compute name, read once).
type azureSource struct {
	base string
	hc   *http.Client

	mu   sync.Mutex // guards name
	name string
}

func (s *azureSource) vmName(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.name != "" {
		return s.name, nil
	}
	body, ok, err := get(ctx, s.hc, http.MethodGet, s.base+"/metadata/instance/compute/name?api-version=2021-02-01&format=text",
		map[string]string{"Metadata": "true"})
	if err == nil && !ok {
		err = errors.New("compute/name: 404")
	}
	if err != nil {
		return "", err
	}
	s.name = strings.TrimSpace(string(body))
	return s.name, nil
}

func (s *azureSource) Notice(ctx context.Context) (Notice, bool, error) {
	name, err := s.vmName(ctx)
	if err != nil {
		return Notice{}, false, err
	}
	body, ok, err := get(ctx, s.hc, http.MethodGet, s.base+"/metadata/scheduledevents?api-version=2020-07-01",
		map[string]string{"Metadata": "true"})
	if err != nil || !ok {
		return Notice{}, false, err
	}
	var doc struct {
		Events []struct {
			EventID   string   `json:"EventId"`
			EventType string   `json:"EventType"`
			Resources []string `json:"Resources"`
			NotBefore string   `json:"NotBefore"`
		} `json:"Events"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return Notice{}, false, fmt.Errorf("scheduledevents: %w", err)
	}
	for _, e := range doc.Events {
		if e.EventType != "Preempt" || !slices.Contains(e.Resources, name) {
			continue
		}
		at, _ := time.Parse(http.TimeFormat, e.NotBefore) // "" until scheduled: zero
		return Notice{At: at, What: fmt.Sprintf("azure scheduled event %s Preempt of %s not before %s", e.EventID, name, e.NotBefore)}, true, nil
	}
	return Notice{}, false, nil
}
