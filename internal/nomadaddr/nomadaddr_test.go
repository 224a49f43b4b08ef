package nomadaddr

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		addr, want string // want "" means accepted
	}{
		{"http://127.0.0.1:4646", ""},
		{"https://nomad.service.consul:4646", ""},
		{"unix:///var/run/nomad.sock", ""},
		{"127.0.0.1:4646", "is not an http://, https:// or unix:// address"},
		{"ftp://nomad:4646", "is not an http://, https:// or unix:// address"},
		{"http://", "is not an http://, https:// or unix:// address"},
		{"unix://", "is not a unix:// address with the socket's absolute path"},
		{"unix://var/run/nomad.sock", "is not a unix:// address with the socket's absolute path"},
		{"unix:relative.sock", "is not a unix:// address with the socket's absolute path"},
	} {
		err := Check(c.addr)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("Check(%q) = %v, want nil", c.addr, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("Check(%q) = %v, want %q", c.addr, err, c.want)
		}
	}
}
