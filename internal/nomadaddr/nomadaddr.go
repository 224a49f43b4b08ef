// Package nomadaddr checks the Nomad API address a plugin config gives, the
// way the Nomad API client will use it.
package nomadaddr

import (
	"fmt"
	"net/url"
	"path"
)

// Check says what is wrong with addr, or nil: an http:// or https:// URL
// with a host, or unix:// with the socket's absolute path.
func Check(addr string) error {
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "unix") {
		return fmt.Errorf("%q is not an http://, https:// or unix:// address", addr)
	}
	if u.Scheme == "unix" {
		if p := u.Host + u.Path; u.Host != "" || !path.IsAbs(p) {
			return fmt.Errorf("%q is not a unix:// address with the socket's absolute path (e.g. \"unix:///var/run/nomad.sock\")", addr)
		}
		return nil
	}
	if u.Host == "" {
		return fmt.Errorf("%q is not an http://, https:// or unix:// address", addr)
	}
	return nil
}
