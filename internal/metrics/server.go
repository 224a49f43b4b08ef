package metrics

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The autoscaler plugins (nomad-gpu-apm, gpu-queue) serve their metrics
// on a `metrics_address` key of their plugin config, which an agent reload
// may change: a Server is one address served, and Move starts, moves or
// stops it.

// Server is an HTTP server of metrics on one address.
type Server struct {
	addr string // as configured
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// Listen serves h on addr until Close.
func Listen(addr string, h http.Handler, log hclog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{addr: addr, ln: ln, done: make(chan struct{}),
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "address", addr, "error", err)
		}
	}()
	log.Info("serving Prometheus metrics", "address", ln.Addr().String(), "path", Path)
	return s, nil
}

// Close stops the server and waits for it.
func (s *Server) Close() {
	_ = s.srv.Close()
	<-s.done
}

// Addr is the address listened on (the port chosen for port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Move makes the server cur (nil: none) serve addr ("" stops it) and
// returns the server now serving, nil when none. The same address keeps
// cur; a new one is listened on first, so that a failure leaves cur
// serving, unless cur holds the port the new address asks for
// (127.0.0.1:9464 to :9464): then cur is stopped, the new address tried
// again, and on failure cur's address listened on again. The error is the
// new address's.
func Move(cur *Server, addr string, h http.Handler, log hclog.Logger) (*Server, error) {
	if cur != nil && cur.addr == addr {
		return cur, nil
	}
	if addr == "" {
		if cur != nil {
			cur.Close()
		}
		return nil, nil
	}
	s, err := Listen(addr, h, log)
	if err == nil {
		if cur != nil {
			cur.Close()
		}
		return s, nil
	}
	if cur == nil || !samePort(addr, cur.ln.Addr()) {
		return cur, err
	}
	cur.Close()
	if s, err2 := Listen(addr, h, log); err2 == nil {
		return s, nil
	}
	back, err3 := Listen(cur.Addr(), h, log)
	if err3 != nil {
		log.Error("metrics server lost: cannot listen on the old address again", "address", cur.Addr(), "error", err3)
		return nil, err
	}
	back.addr = cur.addr
	return back, err
}

func samePort(addr string, a net.Addr) bool {
	_, port, err := net.SplitHostPort(addr)
	ta, ok := a.(*net.TCPAddr)
	return err == nil && ok && port == strconv.Itoa(ta.Port)
}

// CheckListenAddress accepts host:port with a numeric port (0: any) and a
// host that is empty, an IP address or a name.
func CheckListenAddress(v string) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	if strings.ContainsAny(host, " /\t") {
		return fmt.Errorf("host %q is not a host name or address", host)
	}
	return nil
}
