// Command testplugin is the wire tests' autoscaler plugin: argv[1] picks
// the kind (apm, strategy, target), -name overrides the name PluginInfo
// gives (the binary's file name). What each call does is steered by its
// inputs, so the tests can reach every path; see the kinds below.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nomad-gpu/nomad-gpu/wire/autoscaler"
)

// config is what every kind does with SetConfig: "fail" set fails it with
// that message; otherwise the map is kept for the kinds to echo.
type config struct {
	mu  sync.Mutex
	cfg map[string]string
}

func (c *config) SetConfig(cfg map[string]string) error {
	if msg := cfg["fail"]; msg != "" {
		return errors.New(msg)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg = cfg
	return nil
}

func (c *config) get() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg
}

// apm answers by query: "range" one metric at From (value 1) and one at
// To (value 2); "fixed:N" N metrics 0..N-1 a second apart from From;
// "empty" none; "error:MSG" the error MSG; "panic" panics; "config:KEY"
// one metric whose value is the SetConfig value of KEY.
type apm struct{ config }

func (a *apm) Query(q string, r autoscaler.TimeRange) ([]autoscaler.Metric, error) {
	switch {
	case q == "range":
		return []autoscaler.Metric{{Time: r.From, Value: 1}, {Time: r.To, Value: 2}}, nil
	case q == "empty":
		return nil, nil
	case q == "panic":
		panic("query panic")
	case strings.HasPrefix(q, "error:"):
		return nil, errors.New(strings.TrimPrefix(q, "error:"))
	case strings.HasPrefix(q, "fixed:"):
		n, err := strconv.Atoi(strings.TrimPrefix(q, "fixed:"))
		if err != nil {
			return nil, err
		}
		out := make([]autoscaler.Metric, n)
		for i := range out {
			out[i] = autoscaler.Metric{Time: r.From.Add(time.Duration(i) * time.Second), Value: float64(i)}
		}
		return out, nil
	case strings.HasPrefix(q, "config:"):
		v, err := strconv.ParseFloat(a.get()[strings.TrimPrefix(q, "config:")], 64)
		if err != nil {
			return nil, err
		}
		return []autoscaler.Metric{{Time: r.To, Value: v}}, nil
	}
	return nil, fmt.Errorf("unknown query %q", q)
}

func (a *apm) QueryMultiple(q string, r autoscaler.TimeRange) ([][]autoscaler.Metric, error) {
	ms, err := a.Query(q, r)
	if err != nil {
		return nil, err
	}
	return [][]autoscaler.Metric{ms, ms}, nil
}

// strategy answers by the check's strategy config: "error" fails Run with
// that message; "direction" is none, down, up or a number (default none);
// "meta" is the action's meta as JSON ("null" or absent: no meta), and
// "echo" = "true" puts the whole request and plugin config in the meta
// instead. The count is count+1, the reason names the check.
type strategy struct{ config }

func (s *strategy) Run(check autoscaler.Check, metrics []autoscaler.Metric, count int64) (autoscaler.Action, error) {
	cfg := check.Config
	if msg := cfg["error"]; msg != "" {
		return autoscaler.Action{}, errors.New(msg)
	}
	a := autoscaler.Action{Count: count + 1, Reason: "check " + check.Name, Error: cfg["error_flag"] == "true"}
	switch d := cfg["direction"]; d {
	case "", "none":
		a.Direction = autoscaler.DirectionNone
	case "down":
		a.Direction = autoscaler.DirectionDown
	case "up":
		a.Direction = autoscaler.DirectionUp
	default:
		n, err := strconv.Atoi(d)
		if err != nil {
			return autoscaler.Action{}, err
		}
		a.Direction = autoscaler.Direction(n)
	}
	if m := cfg["meta"]; m != "" {
		if err := json.Unmarshal([]byte(m), &a.Meta); err != nil {
			return autoscaler.Action{}, err
		}
	}
	if cfg["echo"] == "true" {
		a.Meta = map[string]any{
			"check":   check,
			"metrics": metrics,
			"count":   count,
			"config":  s.get(),
		}
	}
	return a, nil
}

// target: Status answers ready unless the config says ready = "false",
// count from config "count" (or the last scaled count), and meta holding
// the request config ("req.K"), the plugin config ("cfg.K") and the last
// action scaled ("last" as JSON); "status_error" fails it, "status_sleep"
// delays it. Scale fails with "scale_error", answers a no-op when
// "scale_noop" is set, and records the action otherwise.
type target struct {
	config
	mu   sync.Mutex
	last *autoscaler.Action
}

func (t *target) Status(cfg map[string]string) (autoscaler.TargetStatus, error) {
	if msg := cfg["status_error"]; msg != "" {
		return autoscaler.TargetStatus{}, errors.New(msg)
	}
	if d, err := time.ParseDuration(cfg["status_sleep"]); err == nil {
		time.Sleep(d)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := autoscaler.TargetStatus{Ready: cfg["ready"] != "false", Meta: map[string]string{}}
	if t.last != nil {
		st.Count = t.last.Count
		b, err := json.Marshal(t.last)
		if err != nil {
			return st, err
		}
		st.Meta["last"] = string(b)
	}
	if c, ok := cfg["count"]; ok {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil {
			return autoscaler.TargetStatus{}, err
		}
		st.Count = n
	}
	for k, v := range cfg {
		st.Meta["req."+k] = v
	}
	for k, v := range t.get() {
		st.Meta["cfg."+k] = v
	}
	return st, nil
}

func (t *target) Scale(a autoscaler.Action, cfg map[string]string) error {
	if msg := cfg["scale_error"]; msg != "" {
		return errors.New(msg)
	}
	if msg := cfg["scale_noop"]; msg != "" {
		return fmt.Errorf("%s: %w", msg, autoscaler.ErrScaleNoOp)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = &a
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testplugin apm|strategy|target [-name NAME]")
		os.Exit(2)
	}
	kind := os.Args[1]
	flags := flag.NewFlagSet(kind, flag.ExitOnError)
	flags.SetOutput(os.Stderr)
	name := flags.String("name", filepath.Base(os.Args[0]), "the name PluginInfo answers")
	_ = flags.Parse(os.Args[2:])
	switch kind {
	case "apm":
		autoscaler.ServeAPM(*name, &apm{}, nil)
	case "strategy":
		autoscaler.ServeStrategy(*name, &strategy{}, nil)
	case "target":
		autoscaler.ServeTarget(*name, &target{}, nil)
	default:
		fmt.Fprintf(os.Stderr, "unknown kind %q\n", kind)
		os.Exit(2)
	}
}
