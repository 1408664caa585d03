package handlers

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/fencegate/fencegate"
)

// Refusal log limits: per code and caller, a burst of refusalBurst lines and
// then one line every refusalEvery. A worker stuck in a retry loop against a
// STALE_OWNER answer therefore writes a few lines, then one per refusalEvery
// carrying the number of refusals not logged since the line before; the
// metric (Server.Refused) still counts every one.
const (
	refusalBurst = 5
	refusalEvery = 10 * time.Second
	// refusalKeys bounds the (code, caller) pairs tracked; beyond it, a code's
	// new callers share one bucket, so no caller flood can grow memory.
	refusalKeys = 4096
)

// refusalLog decides which problem answers are logged.
type refusalLog struct {
	mu   sync.Mutex
	keys map[refusalKey]*refusalBucket
}

type refusalKey struct {
	code   fencegate.Code
	caller string
}

type refusalBucket struct {
	lim        *rate.Limiter
	last       time.Time
	suppressed uint64
}

// admit reports whether a problem answer with code to caller is logged at
// now, and how many of the same were left out since the last line logged.
func (l *refusalLog) admit(code fencegate.Code, caller string, now time.Time) (ok bool, suppressed uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[refusalKey]*refusalBucket{}
	}
	k := refusalKey{code, caller}
	b := l.keys[k]
	if b == nil {
		if len(l.keys) >= refusalKeys {
			l.sweep(now)
		}
		if len(l.keys) >= refusalKeys {
			k.caller = "(other callers)"
			b = l.keys[k]
		}
		if b == nil {
			b = &refusalBucket{lim: rate.NewLimiter(rate.Every(refusalEvery), refusalBurst)}
			l.keys[k] = b
		}
	}
	b.last = now
	if !b.lim.AllowN(now, 1) {
		b.suppressed++
		return false, 0
	}
	suppressed, b.suppressed = b.suppressed, 0
	return true, suppressed
}

// sweep forgets the buckets idle long enough to be full again and with
// nothing suppressed: forgetting them changes no decision.
func (l *refusalLog) sweep(now time.Time) {
	for k, b := range l.keys {
		if b.suppressed == 0 && now.Sub(b.last) > refusalBurst*refusalEvery {
			delete(l.keys, k)
		}
	}
}

// logProblem writes the line of one problem answer, if the limits allow it.
func (s *Server) logProblem(ctx context.Context, log *slog.Logger, code fencegate.Code, status int, caller string, attrs ...any) {
	var (
		ok         = true
		suppressed uint64
	)
	if s.refusals != nil {
		ok, suppressed = s.refusals.admit(code, caller, s.Now())
	}
	if !ok {
		return
	}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	if status >= 500 && status != http.StatusNotImplemented { // 501: the client asked for what is not implemented
		log.ErrorContext(ctx, "request failed", attrs...)
	} else {
		log.InfoContext(ctx, "request refused", attrs...)
	}
}
