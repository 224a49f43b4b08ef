package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestSizerFlags(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
	}{
		{nil, "-history is required"},
		{[]string{"-history", "h.db", "extra"}, `unexpected argument "extra"`},
		{[]string{"-history", "h.db", "-interval", "500ms"}, "-interval 500ms: must be at least 1s"},
		{[]string{"-history", "h.db", "-window", "0s"}, "-window 0s: must be positive"},
		{[]string{"-history", "h.db", "-window", "48h", "-retention", "24h"}, "-retention 24h0m0s: must be at least -window (48h0m0s)"},
		{[]string{"-history", "h.db", "-min-samples", "0"}, "-min-samples 0: must be at least 1"},
		{[]string{"-history", "h.db", "-min-span", "-1m"}, "-min-span -1m0s: must not be negative"},
		{[]string{"-history", "h.db", "-log-level", "loud"}, `-log-level "loud": allowed: trace, debug, info, warn, error`},
		{[]string{"-history", "h.db", "-priority-tiers", "40,70"}, `-priority-tiers "40,70": bounds must decrease: 70 after 40`},
		{[]string{"-history", "h.db", "-max-priority", "101"}, "-max-priority 101: allowed: 1 to 100"},
		{[]string{"-history", "h.db", "-raise-every", "-1s"}, "-deadline-lead and -raise-every must not be negative"},
		{[]string{"-history", "h.db", "-forecast-window", "-1h"}, "-forecast-window -1h0m0s: must not be negative (0: no forecast)"},
		{[]string{"-history", "h.db", "-interval", "30s", "-min-samples", "3", "-min-span", "1m"}, ""},
	}
	for _, c := range cases {
		o, err := parseSizerFlags(c.args, &bytes.Buffer{})
		if c.wantErr == "" {
			if err != nil || o.interval != 30*time.Second || o.minSamples != 3 || o.minSpan != time.Minute {
				t.Errorf("%v: %+v, %v", c.args, o, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.wantErr)
		}
	}
}
