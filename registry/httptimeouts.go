package registry

import (
	"io"
	"net/http"
	"time"

	"github.com/reclaim-registry/reclaim/internal/config"
)

// The registry's HTTP server has timeouts of its own (the `http:` options,
// config.HTTP); upstream serves with none, so 200 connections that each
// drip a header byte now and then stayed open for as long as they liked.
//
//	ReadHeaderTimeout  headers (and a TLS handshake) must arrive within it
//	body idle          each read of a request body must make progress within it
//	IdleTimeout        a kept-alive connection waits this long for its next request
//
// There is no whole-request ReadTimeout: a large upload over a slow link
// that keeps sending would be cut off however honest. The body's deadline
// is moved forward before every read (http.ResponseController), so only a
// body that stops sending is cut off.

// HTTP returns the server timeouts: the reclaim middleware's `http:`
// options, or their defaults without the middleware.
func (s *Server) HTTP() config.HTTP {
	if !s.on {
		return config.DefaultHTTP()
	}
	return s.opts.HTTP
}

// ConfigureHTTPServer sets hs's header and idle timeouts. Handler applies
// the body's.
func (s *Server) ConfigureHTTPServer(hs *http.Server) {
	t := s.HTTP()
	hs.ReadHeaderTimeout, hs.IdleTimeout = t.ReadHeaderTimeout, t.IdleTimeout
}

// bodyIdle gives every request body a read deadline idle after each read.
// Once the handler is done, an HTTP/1 server reads and discards what is
// left of the body (up to 256 KiB) before the next request; that read gets
// the same bound, so a client that stalls there is cut off too.
func bodyIdle(idle time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		// a shallow copy, as http.StripPrefix makes: the server looks at
		// its own request's body after the handler
		r2 := new(http.Request)
		*r2 = *r
		body := &idleBody{ReadCloser: r.Body, rc: rc, idle: idle}
		r2.Body = body
		next.ServeHTTP(w, r2)
		if r.ProtoMajor == 1 && !body.failed {
			_ = rc.SetReadDeadline(time.Now().Add(idle))
		}
	})
}

// idleBody sets the connection's read deadline for the time of each read
// of the body, and clears it after a read that went well: a deadline left
// behind would also end the request while the handler is busy between two
// reads (an HTTP/2 stream's deadline is a timer), or in the server's
// background read of the connection after the body's end (HTTP/1, to
// notice a client that goes away). After a failed read (the deadline
// passed, the client went away) it stays: nothing more is read from that
// connection.
type idleBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	idle   time.Duration
	failed bool // a read failed: the deadline stays
}

func (b *idleBody) Read(p []byte) (int, error) {
	// an error is http.ErrNotSupported (a writer that is no connection's):
	// no deadline then, as before
	_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
	n, err := b.ReadCloser.Read(p)
	if err == nil || err == io.EOF {
		_ = b.rc.SetReadDeadline(time.Time{})
	} else {
		b.failed = true
	}
	return n, err
}
