package reclaim

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// metadata is a fake metadata service: each path's answer, and the
// headers a request must carry to get it (401 otherwise).
type metadata struct {
	answers map[string]string // "METHOD path" → body; missing: 404
	need    map[string]string // header → value
}

func (m metadata) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for k, v := range m.need {
		if r.Header.Get(k) != v && !(k == "X-aws-ec2-metadata-token" && r.Method == http.MethodPut) {
			http.Error(w, "missing "+k, http.StatusUnauthorized)
			return
		}
	}
	if r.Method == http.MethodPut && r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") == "" {
		http.Error(w, "no ttl", http.StatusBadRequest)
		return
	}
	body, ok := m.answers[r.Method+" "+r.URL.RequestURI()]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Write([]byte(body))
}

func TestSources(t *testing.T) {
	awsToken := map[string]string{"PUT /latest/api/token": "tok"}
	withAWS := func(extra map[string]string) map[string]string {
		out := map[string]string{"PUT /latest/api/token": "tok"}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	azureName := "GET /metadata/instance/compute/name?api-version=2021-02-01&format=text"
	azureEvents := "GET /metadata/scheduledevents?api-version=2020-07-01"
	for _, c := range []struct {
		name, provider string
		md             metadata
		want           string // notice's What contains it; "": no notice
		wantAt         time.Time
		err            string
	}{
		{name: "aws: no notice (404)", provider: "aws",
			md: metadata{answers: awsToken, need: map[string]string{"X-aws-ec2-metadata-token": "tok"}}},
		{name: "aws: terminate", provider: "aws",
			md: metadata{answers: withAWS(map[string]string{"GET /latest/meta-data/spot/instance-action": `{"action": "terminate", "time": "2026-12-07T19:10:00Z"}`}),
				need: map[string]string{"X-aws-ec2-metadata-token": "tok"}},
			want: "aws spot instance-action terminate at 2026-12-07T19:10:00Z", wantAt: time.Date(2026, 12, 7, 19, 10, 0, 0, time.UTC)},
		{name: "aws: a token refused is an error, never a notice", provider: "aws",
			md: metadata{answers: map[string]string{}}, err: "IMDSv2 token"},
		{name: "aws: a garbled action is an error", provider: "aws",
			md:  metadata{answers: withAWS(map[string]string{"GET /latest/meta-data/spot/instance-action": `terminate`})},
			err: "spot/instance-action"},
		{name: "gce: not preempted", provider: "gce",
			md: metadata{answers: map[string]string{"GET /computeMetadata/v1/instance/preempted": "FALSE"}, need: map[string]string{"Metadata-Flavor": "Google"}}},
		{name: "gce: preempted", provider: "gce",
			md:   metadata{answers: map[string]string{"GET /computeMetadata/v1/instance/preempted": "TRUE\n"}, need: map[string]string{"Metadata-Flavor": "Google"}},
			want: "gce instance preempted"},
		{name: "azure: no events", provider: "azure",
			md: metadata{answers: map[string]string{azureName: "vm-7", azureEvents: `{"DocumentIncarnation": 1, "Events": []}`}, need: map[string]string{"Metadata": "true"}}},
		{name: "azure: a Preempt of another VM, a Reboot of this one: no notice", provider: "azure",
			md: metadata{answers: map[string]string{azureName: "vm-7", azureEvents: `{"Events": [
				{"EventId": "a", "EventType": "Preempt", "Resources": ["vm-8"], "NotBefore": "Mon, 07 Dec 2026 19:10:00 GMT"},
				{"EventId": "b", "EventType": "Reboot", "Resources": ["vm-7"], "NotBefore": "Mon, 07 Dec 2026 19:10:00 GMT"}]}`}}},
		{name: "azure: a Preempt of this VM", provider: "azure",
			md: metadata{answers: map[string]string{azureName: "vm-7", azureEvents: `{"Events": [
				{"EventId": "c", "EventType": "Preempt", "Resources": ["vm-7"], "NotBefore": "Mon, 07 Dec 2026 19:10:00 GMT"}]}`}},
			want: "azure scheduled event c Preempt of vm-7", wantAt: time.Date(2026, 12, 7, 19, 10, 0, 0, time.UTC)},
		{name: "a server error is an error", provider: "gce", md: metadata{answers: map[string]string{}, need: map[string]string{"Metadata-Flavor": "nope"}},
			err: "401"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.md)
			defer srv.Close()
			s, err := NewSource(c.provider, srv.URL, srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			n, ok, err := s.Notice(context.Background())
			switch {
			case c.err != "":
				if err == nil || !strings.Contains(err.Error(), c.err) || ok {
					t.Fatalf("Notice = %v, %v, %v; want an error with %q", n, ok, err, c.err)
				}
			case err != nil:
				t.Fatal(err)
			case ok != (c.want != ""):
				t.Fatalf("Notice = %+v, %v; want notice %q", n, ok, c.want)
			case ok && (!strings.Contains(n.What, c.want) || !n.At.Equal(c.wantAt)):
				t.Errorf("Notice = %+v; want %q at %v", n, c.want, c.wantAt)
			}
		})
	}
	if _, err := NewSource("oracle", "", nil); err == nil || !strings.Contains(err.Error(), `provider "oracle"; allowed: aws, gce, azure`) {
		t.Errorf("an unknown provider: %v", err)
	}
}

// fakeSource answers a scripted sequence of readings, the last repeated.
type fakeSource struct {
	readings []func() (Notice, bool, error)
	calls    atomic.Int32
}

func (f *fakeSource) Notice(context.Context) (Notice, bool, error) {
	i := int(f.calls.Add(1)) - 1
	return f.readings[min(i, len(f.readings)-1)]()
}

// The watcher drains once on the notice, after failed reads and a failed
// drain, and never on a failed read.
func TestWatcher(t *testing.T) {
	none := func() (Notice, bool, error) { return Notice{}, false, nil }
	broken := func() (Notice, bool, error) { return Notice{}, false, errors.New("connection refused") }
	notice := func() (Notice, bool, error) { return Notice{What: "aws spot instance-action terminate"}, true, nil }
	src := &fakeSource{readings: []func() (Notice, bool, error){none, broken, broken, none, notice}}
	var drains, failFirst atomic.Int32
	failFirst.Store(1)
	drained := make(chan Notice, 4)
	w := &Watcher{Source: src, Interval: time.Millisecond, Log: hclog.NewNullLogger(),
		Drain: func(_ context.Context, n Notice) error {
			drains.Add(1)
			if failFirst.Add(-1) >= 0 {
				return errors.New("403 permission denied")
			}
			drained <- n
			return nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	select {
	case n := <-drained:
		if n.What != "aws spot instance-action terminate" {
			t.Errorf("drained for %q", n.What)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no drain")
	}
	time.Sleep(20 * time.Millisecond)
	if got := drains.Load(); got != 2 {
		t.Errorf("%d drains, want 2 (one refused, one made)", got)
	}
	if got := src.calls.Load(); got != 5 {
		t.Errorf("%d readings, want 5: none after the notice", got)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v", err)
	}
}

// AWS's rebalance recommendation: no advice until the path answers, then
// its notice time; a garbled one is an error.
func TestAWSAdvice(t *testing.T) {
	for _, c := range []struct {
		name, body, want, err string
	}{
		{name: "no recommendation (404)"},
		{name: "a recommendation", body: `{"noticeTime": "2026-12-07T19:05:00Z"}`, want: "aws rebalance recommendation at 2026-12-07T19:05:00Z"},
		{name: "garbled", body: `soon`, err: "events/recommendations/rebalance"},
	} {
		t.Run(c.name, func(t *testing.T) {
			answers := map[string]string{"PUT /latest/api/token": "tok"}
			if c.body != "" {
				answers["GET /latest/meta-data/events/recommendations/rebalance"] = c.body
			}
			srv := httptest.NewServer(metadata{answers: answers, need: map[string]string{"X-aws-ec2-metadata-token": "tok"}})
			defer srv.Close()
			s, err := NewSource("aws", srv.URL, srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			n, ok, err := s.(Advisor).Advice(context.Background())
			switch {
			case c.err != "":
				if err == nil || !strings.Contains(err.Error(), c.err) || ok {
					t.Fatalf("Advice = %v, %v, %v; want an error with %q", n, ok, err, c.err)
				}
			case err != nil:
				t.Fatal(err)
			case ok != (c.want != "") || n.What != c.want:
				t.Errorf("Advice = %+v, %v; want %q", n, ok, c.want)
			}
		})
	}
	for _, p := range []string{"gce", "azure"} {
		if s, _ := NewSource(p, "", nil); s != nil {
			if _, ok := s.(Advisor); ok {
				t.Errorf("%s gives advice: it has no such signal", p)
			}
		}
	}
}

// advisingSource is a fakeSource with scripted advice.
type advisingSource struct {
	fakeSource
	advice []func() (Notice, bool, error)
	asked  atomic.Int32
}

func (a *advisingSource) Advice(context.Context) (Notice, bool, error) {
	i := int(a.asked.Add(1)) - 1
	return a.advice[min(i, len(a.advice)-1)]()
}

// The watcher cordons once on advice, after a failed cordon, before the
// notice drains; without Cordon it reads no advice.
func TestWatcherCordons(t *testing.T) {
	none := func() (Notice, bool, error) { return Notice{}, false, nil }
	advice := func() (Notice, bool, error) { return Notice{What: "aws rebalance recommendation"}, true, nil }
	notice := func() (Notice, bool, error) { return Notice{What: "aws spot instance-action terminate"}, true, nil }
	for _, withCordon := range []bool{true, false} {
		src := &advisingSource{fakeSource: fakeSource{readings: []func() (Notice, bool, error){none, none, none, none, none, notice}},
			advice: []func() (Notice, bool, error){none, advice}}
		var events []string
		var mu sync.Mutex
		record := func(what string) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, what)
		}
		drained := make(chan struct{})
		failFirst := true
		w := &Watcher{Source: src, Interval: time.Millisecond, Log: hclog.NewNullLogger(),
			Drain: func(context.Context, Notice) error { record("drain"); close(drained); return nil }}
		if withCordon {
			w.Cordon = func(_ context.Context, n Notice) error {
				if failFirst {
					failFirst = false
					record("cordon refused")
					return errors.New("403")
				}
				record("cordon " + n.What)
				return nil
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- w.Run(ctx) }()
		select {
		case <-drained:
		case <-time.After(10 * time.Second):
			t.Fatal("no drain")
		}
		cancel()
		<-done
		want := []string{"drain"}
		if withCordon {
			want = []string{"cordon refused", "cordon aws rebalance recommendation", "drain"}
		}
		if strings.Join(events, "; ") != strings.Join(want, "; ") {
			t.Errorf("cordon %v: events %q, want %q", withCordon, events, want)
		}
		if !withCordon && src.asked.Load() != 0 {
			t.Errorf("without Cordon the advice was read %d times", src.asked.Load())
		}
	}
}
