package bench

import (
	"net"
	"sync"
	"time"
)

// A LatencyProxy forwards TCP connections from a loopback port to a server
// and delays every byte by a fixed delay in each direction, as a link
// would (on top of what the proxy's own hop costs: CalibrateProxy picks the
// delay that makes the whole add a given latency). It is a delay line: a
// reader per direction of each connection stamps what it read with when it
// is due, and one writer, on a thread of its own, forwards everything when
// due, in that order; bytes sent meanwhile keep flowing instead of queuing
// behind one another's delay, and the proxy costs one thread however many
// connections go through it.
//
// dlocktest.Proxy's SetLatency also delays each direction, but it sleeps
// with time.Sleep before forwarding each read: a sleep shorter than a
// millisecond lasts about a millisecond when the process is otherwise idle
// (the Go runtime's netpoller waits in whole milliseconds), so 100µs each
// way came out as a 2.4ms round trip; and the reads of a connection wait
// one after the other. The writer sleeps with nanosleep instead (timer
// slack 1ns, on Linux), which keeps sub-millisecond delays close to what
// was asked.
type LatencyProxy struct {
	target string
	delay  time.Duration
	ln     net.Listener
	line   chan chunk

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  bool
	readers sync.WaitGroup // the accept loop and the readers
	writer  chan struct{}  // closed when the writer is done
}

// chunk is what a reader read from src, due for dst at due; no data: src
// was closed (dst is closed when that is due).
type chunk struct {
	due      time.Time
	data     []byte
	src, dst net.Conn
}

// NewLatencyProxy starts a proxy to target ("host:port") on a free loopback
// port, delaying what it forwards by delay each way. The caller must call
// Close.
func NewLatencyProxy(target string, delay time.Duration) (*LatencyProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &LatencyProxy{target: target, delay: delay, ln: ln, line: make(chan chunk, 1<<14),
		conns: map[net.Conn]struct{}{}, writer: make(chan struct{})}
	p.readers.Add(1)
	go p.accept()
	go p.write()
	return p, nil
}

// Addr returns the proxy's address.
func (p *LatencyProxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and closes every connection.
func (p *LatencyProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.readers.Wait()
	close(p.line)
	<-p.writer
	return err
}

func (p *LatencyProxy) accept() {
	defer p.readers.Done()
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
		for _, x := range []net.Conn{c, s} {
			if tc, ok := x.(*net.TCPConn); ok {
				_ = tc.SetNoDelay(true)
			}
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.readers.Add(2)
		p.mu.Unlock()
		go p.read(c, s)
		go p.read(s, c)
	}
}

// read feeds what src sends, for dst, into the delay line until src
// closes.
func (p *LatencyProxy) read(src, dst net.Conn) {
	defer p.readers.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.line <- chunk{due: time.Now().Add(p.delay), data: append([]byte(nil), buf[:n]...), src: src, dst: dst}
		}
		if err != nil {
			break
		}
	}
	p.line <- chunk{due: time.Now().Add(p.delay), src: src, dst: dst}
	p.mu.Lock()
	delete(p.conns, src)
	p.mu.Unlock()
}

// write forwards the delay line's chunks when due, in order.
func (p *LatencyProxy) write() {
	defer close(p.writer)
	defer lockSleeper()()
	for c := range p.line {
		preciseSleep(time.Until(c.due))
		if c.data == nil {
			_ = c.dst.Close()
			_ = c.src.Close()
			continue
		}
		_ = c.dst.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.dst.Write(c.data); err != nil {
			_ = c.dst.Close()
			_ = c.src.Close()
		}
	}
}
