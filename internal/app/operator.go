package app

import (
	"net/http"
	"net/http/pprof"
	"time"
)

// metricsServer is the operator listener's server (see operatorHandler).
func (a *App) metricsServer() *http.Server {
	// No WriteTimeout beyond the longest profile: /debug/pprof/profile and
	// /trace stream for their ?seconds= (30 s by default).
	wt := 30 * time.Second
	if a.cfg.Pprof {
		wt = 5 * time.Minute
	}
	return &http.Server{Handler: a.operatorHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: wt, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10}
}

// operatorHandler serves GET /metrics and, with config pprof (--pprof), Go's
// profiling endpoints under /debug/pprof/ (index, profile, symbol, trace and
// the named profiles heap, goroutine, allocs, block, mutex, threadcreate);
// every other path is 404, cmdline too: it answers os.Args, which hold the
// tokens given as flags (--admin-token, --identity, --gateway). It is mounted on the operator
// listener only, never on the API listener: the handlers are registered on
// a mux of its own, not http.DefaultServeMux.
func (a *App) operatorHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.metrics.Handler())
	if a.cfg.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index) // also serves /debug/pprof/heap, goroutine ...
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}
