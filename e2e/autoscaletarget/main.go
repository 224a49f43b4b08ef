// Command nomad-gpu-e2e-target is a nomad-autoscaler target plugin for the
// e2e suite only: it scales a pool of simulated GPU nodes that the test
// process runs (e2e/harness.SimPool), which it reaches at the policy target's
// control_url. The nodes it adds and removes are real Nomad clients with
// the real plugins; only the "cloud" that starts and stops them is the
// test. It is not a product binary and is built by the tests that use it.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

// Name is the plugin's name, which the agent's target block's driver and
// the binary's file name must equal.
const Name = "nomad-gpu-e2e-target"

type target struct {
	hc *http.Client
}

func (t *target) SetConfig(map[string]string) error { return nil }

func controlURL(config map[string]string) (string, error) {
	u := config["control_url"]
	if _, err := url.ParseRequestURI(u); err != nil || u == "" {
		return "", fmt.Errorf("control_url: %q is not an http:// URL of the test's node pool", u)
	}
	return strings.TrimSuffix(u, "/"), nil
}

func (t *target) Status(config map[string]string) (autoscaler.TargetStatus, error) {
	u, err := controlURL(config)
	if err != nil {
		return autoscaler.TargetStatus{}, err
	}
	resp, err := t.hc.Get(u + "/status")
	if err != nil {
		return autoscaler.TargetStatus{}, err
	}
	defer resp.Body.Close()
	var st struct {
		Count int64 `json:"count"`
		Ready bool  `json:"ready"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return autoscaler.TargetStatus{}, fmt.Errorf("status: %w", err)
	}
	return autoscaler.TargetStatus{Ready: st.Ready, Count: st.Count}, nil
}

func (t *target) Scale(a autoscaler.Action, config map[string]string) error {
	u, err := controlURL(config)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{"count": a.Count, "reason": a.Reason})
	resp, err := t.hc.Post(u+"/scale", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusConflict:
		return autoscaler.ErrScaleNoOp
	}
	msg, _ := io.ReadAll(resp.Body)
	return errors.New(strings.TrimSpace(string(msg)))
}

func main() {
	logger := hclog.New(&hclog.LoggerOptions{Name: Name, Output: os.Stderr, JSONFormat: true})
	autoscaler.ServeTarget(Name, &target{hc: &http.Client{Timeout: 10 * time.Second}}, logger)
}
