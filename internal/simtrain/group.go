package simtrain

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// group is a member's links to its gang: rank 0 holds one to every other
// rank, every other rank one to rank 0. A world of 1 has none.
type group struct {
	rank    int
	timeout time.Duration
	peers   []*peer
}

type peer struct {
	conn net.Conn
	in   *bufio.Reader
	rank int
}

// listen is how rank 0 listens for its peers: on MasterPort on every
// address. Tests hand it a listener of their own.
var listen = defaultListen

func defaultListen(port int) (net.Listener, error) { return net.Listen("tcp", ":"+strconv.Itoa(port)) }

// rendezvous joins the gang: rank 0 waits for every other rank's join,
// checks it, and answers every one "ready"; the others dial rank 0 until
// it answers. Both within PeerTimeout.
func rendezvous(ctx context.Context, cfg Config, out io.Writer) (*group, error) {
	g := &group{rank: cfg.Rank, timeout: cfg.PeerTimeout}
	if cfg.WorldSize == 1 {
		return g, nil
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.PeerTimeout)
	defer cancel()
	if cfg.Rank == 0 {
		if err := g.gather(ctx, cfg); err != nil {
			g.close()
			return nil, err
		}
		fmt.Fprintf(out, "rendezvous: all %d members joined rank 0 on port %d\n", cfg.WorldSize, cfg.MasterPort)
		return g, nil
	}
	if err := g.join(ctx, cfg); err != nil {
		g.close()
		return nil, err
	}
	fmt.Fprintf(out, "rendezvous: rank %d of %d joined rank 0 at %s\n", cfg.Rank, cfg.WorldSize, net.JoinHostPort(cfg.MasterAddr, strconv.Itoa(cfg.MasterPort)))
	return g, nil
}

// gather is rank 0's side.
func (g *group) gather(ctx context.Context, cfg Config) error {
	l, err := listen(cfg.MasterPort)
	if err != nil {
		return fmt.Errorf("listening on port %d: %w", cfg.MasterPort, err)
	}
	defer l.Close()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	joined := map[int]bool{}
	for len(joined) < cfg.WorldSize-1 {
		c, err := l.Accept()
		if err != nil {
			return fmt.Errorf("%d of %d members joined within %s: peer missing", len(joined)+1, cfg.WorldSize, cfg.PeerTimeout)
		}
		p := &peer{conn: c, in: bufio.NewReader(c)}
		line, err := p.read(ctx, g.timeout)
		var rank, world int
		if err == nil {
			_, err = fmt.Sscanf(line, "join %d %d", &rank, &world)
		}
		switch {
		case err != nil:
			c.Close() // not one of ours
			continue
		case world != cfg.WorldSize || rank < 1 || rank >= world || joined[rank]:
			c.Close()
			return fmt.Errorf("a member joined as rank %d of %d; this gang is %d, rank 0's is this one", rank, world, cfg.WorldSize)
		}
		p.rank, joined[rank] = rank, true
		g.peers = append(g.peers, p)
	}
	for _, p := range g.peers {
		if err := p.write(g.timeout, "ready"); err != nil {
			return fmt.Errorf("rank %d: %w", p.rank, err)
		}
	}
	return nil
}

// join is every other rank's side.
func (g *group) join(ctx context.Context, cfg Config) error {
	addr := net.JoinHostPort(cfg.MasterAddr, strconv.Itoa(cfg.MasterPort))
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			p := &peer{conn: c, in: bufio.NewReader(c)}
			g.peers = []*peer{p}
			if err := p.write(g.timeout, fmt.Sprintf("join %d %d", cfg.Rank, cfg.WorldSize)); err != nil {
				return err
			}
			line, err := p.read(ctx, g.timeout)
			if err != nil || line != "ready" {
				return fmt.Errorf("rank 0 at %s did not answer ready (%q, %v): peer missing", addr, line, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rank 0 at %s not reached within %s: peer missing (%v)", addr, cfg.PeerTimeout, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// barrier ends step: every rank tells rank 0 it finished it, and rank 0
// lets them all go on once every one has.
func (g *group) barrier(ctx context.Context, step int64) error {
	msg := "step " + strconv.FormatInt(step, 10)
	if g.rank != 0 {
		if len(g.peers) == 0 {
			return nil
		}
		p := g.peers[0]
		if err := p.write(g.timeout, msg); err != nil {
			return fmt.Errorf("rank 0 lost: %w", err)
		}
		line, err := p.read(ctx, g.timeout)
		if err != nil || line != "go "+strconv.FormatInt(step, 10) {
			return fmt.Errorf("rank 0 lost (%q, %v)", line, err)
		}
		return nil
	}
	for _, p := range g.peers {
		line, err := p.read(ctx, g.timeout)
		if err != nil || line != msg {
			return fmt.Errorf("rank %d lost (%q, %v)", p.rank, line, err)
		}
	}
	for _, p := range g.peers {
		if err := p.write(g.timeout, "go "+strconv.FormatInt(step, 10)); err != nil {
			return fmt.Errorf("rank %d lost: %w", p.rank, err)
		}
	}
	return nil
}

func (g *group) close() {
	for _, p := range g.peers {
		p.conn.Close()
	}
}

// read reads one line within timeout, or until ctx ends.
func (p *peer) read(ctx context.Context, timeout time.Duration) (string, error) {
	p.conn.SetReadDeadline(time.Now().Add(timeout))
	stop := context.AfterFunc(ctx, func() { p.conn.SetReadDeadline(time.Now()) })
	defer stop()
	line, err := p.in.ReadString('\n')
	return strings.TrimSpace(line), err
}

func (p *peer) write(timeout time.Duration, line string) error {
	p.conn.SetWriteDeadline(time.Now().Add(timeout))
	_, err := io.WriteString(p.conn, line+"\n")
	return err
}
