package preemption

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/nomad/api"
)

func TestStopReason(t *testing.T) {
	cases := []struct {
		name  string
		alloc api.Allocation
		want  string
	}{
		{"preempted", api.Allocation{PreemptedByAllocation: "9f8e7d6c-1111", DesiredStatus: "evict"}, "preempted by alloc 9f8e7d6c"},
		{"drain", api.Allocation{DesiredStatus: "stop", DesiredTransition: api.DesiredTransition{Migrate: ptr(true)}}, "node drain"},
		{"job stop", api.Allocation{DesiredStatus: "stop", DesiredDescription: "alloc not needed due to job update"}, "stop: alloc not needed due to job update"},
		{"restart", api.Allocation{DesiredStatus: "run"}, "stop"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/allocation/a1" || r.URL.Query().Get("namespace") != "ml" || r.Header.Get("X-Nomad-Token") != "secret" {
					http.Error(w, "unexpected "+r.URL.String(), http.StatusBadRequest)
					return
				}
				json.NewEncoder(w).Encode(c.alloc)
			}))
			defer srv.Close()
			cl, err := New(srv.URL, "secret")
			if err != nil {
				t.Fatal(err)
			}
			r, err := cl.StopReason(context.Background(), "ml", "a1")
			if err != nil || r.Trigger != c.want {
				t.Fatalf("trigger %q, %v; want %q", r.Trigger, err, c.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
