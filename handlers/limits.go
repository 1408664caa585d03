package handlers

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"
)

// guardBodies makes a request body cheap to refuse and impossible to trickle:
//
//   - Every wait for more of the body is bounded by BodyReadTimeout (a gap,
//     not a total): a client that stops sending is cut off, its read fails
//     and the request is refused.
//   - Until the body has been read to its end, the answer carries
//     "Connection: close". net/http otherwise drains an unread body (up to
//     256 KiB) before it sends the answer, so a refusal of a request whose
//     body never comes would never be answered; closing instead answers at
//     once and the client's unsent body is never needed. A body read to its
//     end leaves the connection reusable. After the handler, a body not read
//     to its end is not drained either: the read deadline is moved to now,
//     so the connection closes instead of waiting for bytes that may never
//     come.
//
// HTTP/2 streams are answered without draining, so only HTTP/1 is marked.
func (s *Server) guardBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		g := &guardedBody{rc: r.Body, ctl: http.NewResponseController(w), gap: s.BodyReadTimeout}
		if r.ProtoMajor == 1 {
			g.header = w.Header()
			g.header.Set("Connection", "close")
		}
		g.extend(time.Now())
		r.Body = g
		next.ServeHTTP(w, r)
		if g.header != nil && !g.done {
			_ = g.ctl.SetReadDeadline(time.Now())
		}
	})
}

// guardedBody is a request body whose reads must make progress within gap.
type guardedBody struct {
	rc     io.ReadCloser
	ctl    *http.ResponseController
	gap    time.Duration
	header http.Header // the answer's header, while "Connection: close" is pending
	armed  time.Time   // when the read deadline was last moved
	done   bool
}

// extend moves the read deadline to now+gap, at most every gap/4.
func (g *guardedBody) extend(now time.Time) {
	if g.gap <= 0 || now.Sub(g.armed) < g.gap/4 {
		return
	}
	g.armed = now
	_ = g.ctl.SetReadDeadline(now.Add(g.gap))
}

// Read reads the body; at its end the deadline is lifted (the connection's
// own timeouts take over) and the connection is reusable again.
func (g *guardedBody) Read(p []byte) (int, error) {
	n, err := g.rc.Read(p)
	switch {
	case err == io.EOF && !g.done:
		g.done = true
		_ = g.ctl.SetReadDeadline(time.Time{})
		if g.header != nil {
			g.header.Del("Connection")
		}
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		err = errBodyTimeout
	case n > 0:
		g.extend(time.Now())
	}
	return n, err
}

// Close closes the body.
func (g *guardedBody) Close() error { return g.rc.Close() }

// errBodyTimeout is a body that stopped arriving for longer than the limit.
var errBodyTimeout = errors.New("the request body stopped arriving (body read timeout)")

// guardAnswers makes an answer impossible to stall by not reading it: every
// wait to send more of it is bounded by AnswerWriteTimeout (a gap, not a
// total: a large download read at 8 KiB or more per gap passes). A client that
// stops reading is cut off when its socket's buffers are full, so it cannot
// hold a connection slot (http.maxConns) and the store reader behind its
// answer for good. The wait before an answer's first byte (a long poll) is
// not bounded: the deadline is lifted when a request starts and set only
// when the handler writes, and again when it returns, for the answer's
// final flush.
func (s *Server) guardAnswers(next http.Handler) http.Handler {
	if s.AnswerWriteTimeout <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctl := http.NewResponseController(w)
		_ = ctl.SetWriteDeadline(time.Time{}) // the last answer's deadline on this connection
		g := &guardedAnswer{ResponseWriter: w, ctl: ctl, gap: s.AnswerWriteTimeout}
		next.ServeHTTP(g, r)
		_ = ctl.SetWriteDeadline(time.Now().Add(g.gap))
	})
}

// guardedAnswer is a ResponseWriter whose writes must make progress within
// gap. It hides io.ReaderFrom on purpose: a sendfile copy would run past one
// deadline however steadily it progressed.
type guardedAnswer struct {
	http.ResponseWriter
	ctl   *http.ResponseController
	gap   time.Duration
	armed time.Time // when the write deadline was last moved
}

// extend moves the write deadline to now+gap, at most every gap/4.
func (g *guardedAnswer) extend() {
	now := time.Now()
	if now.Sub(g.armed) < g.gap/4 {
		return
	}
	g.armed = now
	_ = g.ctl.SetWriteDeadline(now.Add(g.gap))
}

// WriteHeader implements http.ResponseWriter.
func (g *guardedAnswer) WriteHeader(code int) { g.extend(); g.ResponseWriter.WriteHeader(code) }

// answerChunk is the most one deadline covers: a client must take at least
// this much per three quarters of a gap (extend moves the deadline at most
// every quarter): about 360 bytes a second at the 30 s default.
const answerChunk = 8 << 10

// Write implements http.ResponseWriter, moving the deadline for every
// answerChunk bytes.
func (g *guardedAnswer) Write(p []byte) (int, error) {
	n := 0
	for {
		c := min(len(p)-n, answerChunk)
		g.extend()
		m, err := g.ResponseWriter.Write(p[n : n+c])
		n += m
		if err != nil || n == len(p) {
			return n, err
		}
	}
}

// Flush implements http.Flusher.
func (g *guardedAnswer) Flush() { g.extend(); _ = g.ctl.Flush() }

// Unwrap gives http.ResponseController the writer underneath.
func (g *guardedAnswer) Unwrap() http.ResponseWriter { return g.ResponseWriter }
