package main

import (
	"strings"
	"testing"
)

const stream = `{"Action":"start","Package":"github.com/nomad-gpu/nomad-gpu/a"}
{"Action":"run","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestOK"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestOK","Output":"    a_test.go:5: chatter\n"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestOK"}
{"Action":"run","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestRoot"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestRoot","Output":"=== RUN   TestRoot\n"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestRoot","Output":"    a_test.go:9: setting up\n"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestRoot","Output":"--- SKIP: TestRoot (0.00s)\n"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestRoot","Output":"    a_test.go:10: needs root: euid 1000\n"}
{"Action":"skip","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestRoot"}
{"Action":"run","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestBad"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestBad","Output":"=== RUN   TestBad\n"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestBad","Output":"    a_test.go:20: got 1, want 2\n"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"github.com/nomad-gpu/nomad-gpu/a","Test":"TestBad"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/a","Output":"PASS\n"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/a","Output":"FAIL\tgithub.com/nomad-gpu/nomad-gpu/a\t0.01s\n"}
{"Action":"fail","Package":"github.com/nomad-gpu/nomad-gpu/a"}
{"Action":"run","Package":"github.com/nomad-gpu/nomad-gpu/b","Test":"TestHangs"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/b","Test":"TestHangs","Output":"    b_test.go:3: waiting for the node\n"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/b","Output":"panic: test timed out after 1s\n"}
{"Action":"fail","Package":"github.com/nomad-gpu/nomad-gpu/b"}
{"Action":"run","Package":"github.com/nomad-gpu/nomad-gpu/c","Test":"TestX/sub"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/c","Test":"TestX/sub","Output":"--- SKIP: TestX/sub (0.00s)\n"}
{"Action":"skip","Package":"github.com/nomad-gpu/nomad-gpu/c","Test":"TestX/sub"}
{"Action":"output","Package":"github.com/nomad-gpu/nomad-gpu/c","Output":"ok  \tgithub.com/nomad-gpu/nomad-gpu/c\t0.01s\n"}
{"Action":"pass","Package":"github.com/nomad-gpu/nomad-gpu/c"}
{"ImportPath":"github.com/nomad-gpu/nomad-gpu/d","Action":"build-output","Output":"d/d.go:3:1: syntax error\n"}
{"ImportPath":"github.com/nomad-gpu/nomad-gpu/d","Action":"build-fail"}
go: some go command line
`

func TestReport(t *testing.T) {
	var out strings.Builder
	res, err := report(strings.NewReader(stream), &out)
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"    a_test.go:20: got 1, want 2\n--- FAIL: TestBad (0.00s)\n",
		"FAIL\tgithub.com/nomad-gpu/nomad-gpu/a\t0.01s\n",
		"panic: test timed out after 1s\n    b_test.go:3: waiting for the node\n",
		"ok  \tgithub.com/nomad-gpu/nomad-gpu/c\t0.01s\n",
		"d/d.go:3:1: syntax error\n",
		"go: some go command line\n",
		"2 tests skipped",
		"  SKIP a TestRoot: needs root: euid 1000\n",
		"  SKIP c TestX/sub: (no reason given)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	for _, never := range []string{"chatter", "=== RUN", "setting up", "\nPASS\n"} {
		if strings.Contains(got, never) {
			t.Errorf("report shows %q:\n%s", never, got)
		}
	}
	if !res.failed {
		t.Error("a failed test and a failed build: not failed")
	}
	if len(res.skips) != 2 {
		t.Errorf("skips %+v", res.skips)
	}
}

func TestReportPassing(t *testing.T) {
	var out strings.Builder
	in := `{"Action":"output","Package":"p","Output":"ok  \tp\t0.01s\n"}
{"Action":"pass","Package":"p"}
`
	res, err := report(strings.NewReader(in), &out)
	if err != nil || res.failed {
		t.Fatalf("failed %v, err %v", res.failed, err)
	}
	if !strings.Contains(out.String(), "no test skipped") {
		t.Errorf("output %q", out.String())
	}
}
