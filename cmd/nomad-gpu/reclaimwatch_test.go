package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// Bad flags exit 2 with the flag named and what is allowed.
func TestReclaimWatchFlagErrors(t *testing.T) {
	ok := []string{"-provider", "aws", "-node-id", "n1"}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-node-id", "n1"}, `-provider: ""; allowed: aws, gce, azure`},
		{[]string{"-provider", "oci", "-node-id", "n1"}, `-provider: "oci"; allowed: aws, gce, azure`},
		{[]string{"-provider", "aws"}, "-node-id: empty"},
		{append(ok, "-interval", "10ms"), "-interval: 10ms; allowed: 100ms to 1m"},
		{append(ok, "-drain-deadline", "5m"), "-drain-deadline: 5m0s; allowed: 1s to 2m"},
		{append(ok, "-metadata-url", "169.254.169.254"), `-metadata-url: "169.254.169.254"; allowed: an http:// or https:// URL`},
		{append(ok, "-log-level", "loud"), `-log-level: "loud"`},
		{append(ok, "-rebalance", "drain"), `-rebalance: "drain"; allowed: ignore, cordon`},
		{[]string{"-provider", "gce", "-node-id", "n1", "-rebalance", "cordon"}, "-rebalance: cordon with -provider gce; allowed: ignore (only aws"},
		{append(ok, "extra"), `unexpected argument "extra"`},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr strings.Builder
			if rc := runReclaimWatch(tt.args, io.Discard, &stderr); rc != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", rc, stderr.String(), tt.want)
			}
		})
	}
	o, err := parseReclaimWatchFlags([]string{"-provider", "gce", "-node-id", "n1", "-metadata-url", "http://127.0.0.1:9"}, io.Discard)
	if err != nil || o.interval != 5*time.Second || o.deadline != 10*time.Second || o.metadataURL != "http://127.0.0.1:9" || o.rebalance != "ignore" {
		t.Errorf("parsed %+v, %v", o, err)
	}
}
