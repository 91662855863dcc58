package dlocktest

import (
	"bytes"
	"context"
	"net"
	"sync"
	"time"
)

// A Proxy forwards TCP connections from a loopback port to a server and
// injects network faults between them: added latency, a black hole (the
// connection stays open but nothing gets through, as in a partition, until
// it heals), reset connections, a command held back and delivered late
// (HoldBack, HoldNext: the client's retry runs, then the copy), and a reply
// lost (LoseReply). Give clients Proxy.Addr instead of the server's
// address. It is a small stand-in for toxiproxy that keeps
// dlocktest free of dependencies.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	latency time.Duration
	holed   bool
	healed  chan struct{} // closed when a black hole ends
	conns   map[net.Conn]struct{}
	// delay is the latency of each connection that DelayOpen delayed (both
	// of its sides), on top of latency; held counts the writes being held
	// back by it.
	delay map[net.Conn]time.Duration
	held  int
	// holds are the delays of the next writes of clients that HoldNext
	// holds back, in order.
	holds  []time.Duration
	closed bool
	wg     sync.WaitGroup
	// clients are the connections accepted from clients (the others go to
	// the server); hold and lose are HoldBack's and LoseReply's faults, and
	// losing maps a server connection whose next reply LoseReply drops to
	// its client's connection.
	clients map[net.Conn]bool
	hold    *heldCopy
	lose    []byte
	losing  map[net.Conn]net.Conn
}

// heldCopy is what HoldBack holds back.
type heldCopy struct {
	marker []byte
	data   []byte
	got    chan struct{}
}

// NewProxy starts a proxy to target ("host:port") on a free loopback port.
// The caller must call Close.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}, delay: map[net.Conn]time.Duration{}, healed: make(chan struct{}),
		clients: map[net.Conn]bool{}, losing: map[net.Conn]net.Conn{}}
	close(p.healed)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays everything that goes through the proxy, in both
// directions, by d (0: none), from the next read on.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// DelayOpen delays what goes through the connections open now, in both
// directions, by d, from their next read on; connections accepted later are
// not delayed. It stands for a fault of one network path (a TCP
// retransmission, a stalled middlebox) while new connections get through:
// bytes a client sent on such a connection reach the server late, even
// after the client gave up on it and closed it.
func (p *Proxy) DelayOpen(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		p.delay[c] = d
	}
}

// Delayed returns the number of reads that DelayOpen's delay holds back at
// the moment: 0 once everything sent on a delayed connection was forwarded.
func (p *Proxy) Delayed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// BlackHole stops (on) or resumes (off) forwarding: connections are still
// accepted and kept open, and what is sent is held until the hole closes,
// as across a network partition that heals.
func (p *Proxy) BlackHole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && !p.holed:
		p.holed = true
		p.healed = make(chan struct{})
	case !on && p.holed:
		p.holed = false
		close(p.healed)
	}
}

// HoldNext holds back the next bytes that a client sends through the
// proxy, on any of its connections, and resets that client's connection at
// once: a client that retries (go-redis, with its default MaxRetries) sends
// the command again on a new connection, and it runs. The bytes held back
// are written to the server d later, on the connection they came in on
// (whose replies go nowhere), which is then closed: a copy of the command
// that runs after the client's retry, and possibly after its later
// commands, as a retransmission after a reset does. Each call holds one
// write.
func (p *Proxy) HoldNext(d time.Duration) {
	p.mu.Lock()
	p.holds = append(p.holds, d)
	p.mu.Unlock()
}

// Reset closes every open connection with a TCP reset; new connections are
// accepted as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// HoldBack holds back the next data a client sends that contains marker
// (one command, as a client writes it; its arguments as they go on the
// wire, e.g. "$4\r\n1234\r\n" for an argument 1234): it is not
// forwarded, and the connection it came on is reset at once, as when a
// connection fails behind a write, so that a client that retries (go-redis
// with its default MaxRetries) sends the command again on a new connection,
// which goes through. The held copy reaches the server only when the
// returned deliver is called: it waits until a copy was held (or ctx ends),
// sends it on a connection of its own, and returns once the server
// answered it (the answer is dropped). It stands for bytes held up in the
// network on a connection that the client gave up on, which the server
// runs late, after commands the client sent since.
func (p *Proxy) HoldBack(marker string) (deliver func(ctx context.Context) error) {
	h := &heldCopy{marker: []byte(marker), got: make(chan struct{})}
	p.mu.Lock()
	p.hold = h
	p.mu.Unlock()
	return func(ctx context.Context) error {
		select {
		case <-h.got:
		case <-ctx.Done():
			return ctx.Err()
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", p.target)
		if err != nil {
			return err
		}
		defer c.Close()
		if dl, ok := ctx.Deadline(); ok {
			_ = c.SetDeadline(dl)
		}
		if _, err := c.Write(h.data); err != nil {
			return err
		}
		_, err = c.Read(make([]byte, 4096))
		return err
	}
}

// LoseReply forwards the next data a client sends that contains marker (see
// HoldBack), and drops the server's reply to it: the client's connection
// is reset when the reply arrives, so that the command ran and its client
// never heard of it (a client that retries sends it again).
func (p *Proxy) LoseReply(marker string) {
	p.mu.Lock()
	p.lose = []byte(marker)
	p.mu.Unlock()
}

// fault applies HoldBack's and LoseReply's faults to data read from src,
// to be written to dst; it reports whether the data must not be forwarded
// (src's connection is then reset, and dst's closed).
func (p *Proxy) fault(src, dst net.Conn, data []byte) (drop bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var reset net.Conn
	switch {
	case p.clients[src] && p.hold != nil && bytes.Contains(data, p.hold.marker):
		h := p.hold
		p.hold = nil
		h.data = bytes.Clone(data)
		close(h.got)
		reset = src
	case p.clients[src] && p.lose != nil && bytes.Contains(data, p.lose):
		p.lose = nil
		p.losing[dst] = src
		return false
	case p.losing[src] != nil:
		reset = p.losing[src]
		delete(p.losing, src)
	default:
		return false
	}
	if tc, ok := reset.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = reset.Close()
	_ = src.Close()
	_ = dst.Close()
	return true
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	if p.holed {
		p.holed = false
		close(p.healed)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.clients[c] = true
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(c, s, true)
		go p.pipe(s, c, false)
	}
}

// pipe copies from src to dst, through the faults, until either side
// closes; then it closes both. toServer tells the client's side.
func (p *Proxy) pipe(src, dst net.Conn, toServer bool) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		delete(p.delay, src)
		delete(p.delay, dst)
		delete(p.clients, src)
		delete(p.clients, dst)
		delete(p.losing, src)
		delete(p.losing, dst)
		p.mu.Unlock()
		_ = src.Close()
		_ = dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && (p.fault(src, dst, buf[:n]) || toServer && p.holdBack(src, dst, buf[:n])) {
			return
		}
		if n > 0 {
			p.mu.Lock()
			latency, healed, extra := p.latency, p.healed, p.delay[src]
			if extra > 0 {
				p.held++
			}
			p.mu.Unlock()
			<-healed // a black hole holds the data
			if latency+extra > 0 {
				time.Sleep(latency + extra)
			}
			_, werr := dst.Write(buf[:n])
			if extra > 0 {
				p.mu.Lock()
				p.held--
				p.mu.Unlock()
			}
			if werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a broken connection: both sides close
		}
	}
}

// holdBack, if HoldNext asked for it, resets the client's connection src
// and writes b to dst after the delay asked (then the caller returns and
// closes both): it reports whether it did.
func (p *Proxy) holdBack(src, dst net.Conn, b []byte) bool {
	p.mu.Lock()
	if len(p.holds) == 0 {
		p.mu.Unlock()
		return false
	}
	d := p.holds[0]
	p.holds = p.holds[1:]
	p.mu.Unlock()
	if tc, ok := src.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = src.Close()
	time.Sleep(d)
	_, _ = dst.Write(b)
	return true
}
