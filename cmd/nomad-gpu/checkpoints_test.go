package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/driver/checkpoint"
	"github.com/nomad-gpu/nomad-gpu/internal/testenv"
)

// jobsFake is a Nomad that knows some jobs, fails for others, and records
// the tokens it was sent.
type jobsFake struct {
	exists map[string]bool // "namespace/job"
	broken map[string]bool
	// reappear: not found when first asked, there from then on (a job
	// registered again under the same name).
	reappear map[string]bool
	mu       sync.Mutex
	tokens   []string
	asked    map[string]int
}

func (f *jobsFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.EscapedPath(), "/v1/job/")
	id, err := url.PathUnescape(id)
	if !ok || err != nil {
		http.NotFound(w, r)
		return
	}
	key := r.URL.Query().Get("namespace") + "/" + id
	f.mu.Lock()
	f.tokens = append(f.tokens, r.Header.Get("X-Nomad-Token"))
	if f.asked == nil {
		f.asked = map[string]int{}
	}
	f.asked[key]++
	again := f.reappear[key] && f.asked[key] > 1
	f.mu.Unlock()
	switch {
	case f.broken[key]:
		http.Error(w, "rpc error: no cluster leader", http.StatusInternalServerError)
	case f.exists[key] || again:
		json.NewEncoder(w).Encode(&api.Job{ID: &id})
	default:
		http.Error(w, "job not found", http.StatusNotFound)
	}
}

var (
	kTrain  = checkpoint.Key{Namespace: "default", Job: "train", Group: "g", Task: "t"}
	kGone   = checkpoint.Key{Namespace: "default", Job: "gone", Group: "g", Task: "t"}
	kRecent = checkpoint.Key{Namespace: "ml", Job: "a/b c", Group: "g", Task: "t", AllocIndex: 2}
)

// checkpointRoot makes a store holding kTrain and kGone, last used two
// days ago, and kRecent, used now.
func checkpointRoot(t *testing.T) (string, *checkpoint.Store) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Root, "the checkpoint store needs root")
	}
	s, err := checkpoint.Open(filepath.Join(t.TempDir(), "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour)
	for _, k := range []checkpoint.Key{kTrain, kGone, kRecent} {
		if _, _, err := s.Prepare(k, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if k != kRecent {
			os.Chtimes(filepath.Join(s.KeyDir(k), "state.json"), old, old)
		}
	}
	return s.Root(), s
}

func TestCheckpointsCommand(t *testing.T) {
	fake := &jobsFake{exists: map[string]bool{"default/train": true}, broken: map[string]bool{}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	broken := &jobsFake{exists: map[string]bool{"default/train": true}, broken: map[string]bool{"ml/a/b c": true}}
	brokenSrv := httptest.NewServer(broken)
	defer brokenSrv.Close()
	reappear := &jobsFake{exists: map[string]bool{"default/train": true}, reappear: map[string]bool{"default/gone": true}}
	reappearSrv := httptest.NewServer(reappear)
	defer reappearSrv.Close()
	all := []checkpoint.Key{kTrain, kGone, kRecent}
	cases := []struct {
		name   string
		args   []string // -root ROOT is added unless the case sets -root
		env    map[string]string
		code   int
		stdout []string
		stderr string
		left   []checkpoint.Key
	}{
		{name: "list", args: []string{"list", "-address", srv.URL}, stdout: []string{
			"default    gone   g      t     0      0            0 B   2d00h ago  not in Nomad",
			"default    train  g      t     0      0            0 B   2d00h ago  exists",
			"ml         a/b c  g      t     2      0            0 B   0s ago     not in Nomad"}, left: all},
		{name: "dry run", args: []string{"prune", "-address", srv.URL}, stdout: []string{
			"would remove default/gone/g/t[0]: 0 generations", "would remove ml/a/b c/g/t[2]",
			"dry run: 2 of 3 checkpoints (0 B) would be removed; run with -apply to remove them"}, left: all},
		{name: "apply, older than a day", args: []string{"prune", "-older-than", "24h", "-apply", "-address", srv.URL},
			stdout: []string{"removed default/gone/g/t[0]", "removed 1 of 3 checkpoints"}, left: []checkpoint.Key{kTrain, kRecent}},
		{name: "connection from the environment", args: []string{"prune", "-apply"}, env: map[string]string{"NOMAD_ADDR": srv.URL, "NOMAD_TOKEN": "env-token"},
			stdout: []string{"removed 2 of 3 checkpoints"}, left: []checkpoint.Key{kTrain}},
		{name: "a job Nomad cannot answer for", args: []string{"prune", "-apply", "-address", brokenSrv.URL}, code: 1,
			stderr: `nomad-gpu checkpoints prune: nothing removed: cannot tell whether every job exists: job "a/b c" (namespace "ml")`, left: all},
		{name: "job registered again before its removal", args: []string{"prune", "-apply", "-address", reappearSrv.URL}, code: 1,
			stdout: []string{"removed ml/a/b c/g/t[2]"}, stderr: "not removed: default/gone/g/t[0]: its job exists again; kept", left: []checkpoint.Key{kTrain, kGone}},
		{name: "Nomad unreachable", args: []string{"prune", "-apply", "-address", "http://127.0.0.1:1"}, code: 1,
			stderr: "nothing removed: cannot tell whether every job exists", left: all},
		{name: "list, Nomad unreachable", args: []string{"list", "-address", "http://127.0.0.1:1"}, code: 1,
			stdout: []string{"unknown"}, stderr: "nomad-gpu checkpoints list: cannot tell whether every job exists", left: all},
		{name: "no root", args: []string{"prune", "-root", ""}, code: 2, stderr: "-root is required", left: all},
		{name: "relative root", args: []string{"list", "-root", "checkpoints"}, code: 2, stderr: `nomad-gpu checkpoints list: -root: "checkpoints" is not an absolute path`, left: all},
		{name: "missing root", args: []string{"list", "-root", "/no/such/root"}, code: 2, stderr: "-root: stat /no/such/root: no such file or directory", left: all},
		{name: "negative age", args: []string{"prune", "-older-than", "-1h"}, code: 2, stderr: "-older-than -1h0m0s: must not be negative", left: all},
		{name: "apply on list", args: []string{"list", "-apply"}, code: 2, stderr: "flag provided but not defined: -apply", left: all},
		{name: "unknown subcommand", args: []string{"gc"}, code: 2, stderr: `unknown subcommand "gc"; allowed: list, prune`, left: all},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root, store := checkpointRoot(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			args := c.args
			if !strings.Contains(strings.Join(args, " "), "-root") && args[0] != "gc" {
				args = append([]string{args[0], "-root", root}, args[1:]...)
			}
			fake.tokens, reappear.asked = nil, nil
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"checkpoints"}, args...), &stdout, &stderr)
			if code != c.code || !strings.Contains(stderr.String(), c.stderr) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q\nstdout:\n%s", code, stderr.String(), c.code, c.stderr, stdout.String())
			}
			for _, s := range c.stdout {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout.String())
				}
			}
			checkLeft(t, store, c.left)
			if c.env["NOMAD_TOKEN"] != "" && (len(fake.tokens) == 0 || fake.tokens[0] != c.env["NOMAD_TOKEN"]) {
				t.Errorf("tokens sent %q, want %q", fake.tokens, c.env["NOMAD_TOKEN"])
			}
		})
	}
}

// checkLeft: exactly the keys left are stored.
func checkLeft(t *testing.T, store *checkpoint.Store, left []checkpoint.Key) {
	t.Helper()
	stored, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	var got []checkpoint.Key
	for _, st := range stored {
		got = append(got, st.Key)
	}
	if len(got) != len(left) {
		t.Fatalf("stored %v, want %v", got, left)
	}
	for _, k := range left {
		if _, err := os.Stat(store.KeyDir(k)); err != nil {
			t.Errorf("%+v was removed: %v", k, err)
		}
	}
}
