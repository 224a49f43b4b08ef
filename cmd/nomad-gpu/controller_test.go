package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// Bad flags exit 2 with the flag named and what is allowed.
func TestControllerFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-preemption-cooldown", "-1m"}, "-preemption-cooldown: -1m0s; allowed: 0 (off) or more"},
		{[]string{"-lock-ttl", "15s"}, "-lock-ttl: 15s; allowed: 23s (22s + -lock-delay"},
		{[]string{"-lock-ttl", "25s", "-lock-delay", "5s"}, "-lock-ttl: 25s; allowed: 27s (22s + -lock-delay"},
		{[]string{"-lock-ttl", "49h"}, "-lock-ttl: 49h0m0s; allowed: 23s"},
		{[]string{"-lock-delay", "0s"}, "-lock-delay: 0s; allowed: more than 0"},
		{[]string{"-tick", "10ms"}, "-tick: 10ms; allowed: 100ms to 1m"},
		{[]string{"-namespace", ""}, "-namespace: empty"},
		{[]string{"-metrics-address", "nope"}, `-metrics-address: "nope"`},
		{[]string{"-log-level", "loud"}, `-log-level: "loud"; allowed: trace, debug, info, warn, error`},
		{[]string{"-min-runtime", "training"}, `-min-runtime: "training"; allowed: pool=duration`},
		{[]string{"-min-runtime", "training=soon"}, `-min-runtime: "training=soon": "soon" is not a duration above 0`},
		{[]string{"-min-runtime", "a=1m,a=2m"}, `-min-runtime: pool "a" given twice`},
		{[]string{"-min-runtime-priority", "0"}, "-min-runtime-priority: 0; allowed: 1 to 32767"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr strings.Builder
			if rc := runController(tt.args, io.Discard, &stderr); rc != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", rc, stderr.String(), tt.want)
			}
		})
	}
}

func TestControllerFlags(t *testing.T) {
	o, err := parseControllerFlags([]string{"-preemption-cooldown", "10m", "-min-runtime", "training=20m, hpc=1h"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Cooldown != 10*time.Minute || o.cfg.MinRuntime["training"] != 20*time.Minute || o.cfg.MinRuntime["hpc"] != time.Hour || o.cfg.MinRuntimePriority != 100 {
		t.Errorf("parsed %+v", o.cfg)
	}
}
