package server

import (
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/roles/internal/httpauth"
)

// newHTTPServer serves /metrics, /healthz (the process is alive) and
// /readyz (it accepts connections and every engine is healthy), and with
// withPProf the Go profiler under /debug/pprof/ (server.pprof: off by
// default, since a profile costs CPU and shows the node's internals to
// whoever can reach the port). Header reads are bounded in time and size
// so a drip-feeding scraper cannot pin it.
//
// With a guard (server.http_token_file), /metrics and the profiler, which
// name tenants and show the node's internals, need its bearer token; the
// probes never do.
func newHTTPServer(srv *Server, eng engine.StoreEngine, reg *prometheus.Registry, firstReq time.Duration, withPProf bool, guard *httpauth.Guard) *http.Server {
	mux := http.NewServeMux()
	if withPProf {
		mux.Handle("/debug/pprof/", guard.Wrap(http.HandlerFunc(pprof.Index)))
		mux.Handle("/debug/pprof/cmdline", guard.Wrap(http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("/debug/pprof/profile", guard.Wrap(http.HandlerFunc(pprof.Profile)))
		mux.Handle("/debug/pprof/symbol", guard.Wrap(http.HandlerFunc(pprof.Symbol)))
		mux.Handle("/debug/pprof/trace", guard.Wrap(http.HandlerFunc(pprof.Trace)))
	}
	mux.Handle("/metrics", guard.Wrap(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: nil})))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if srv.isClosing() {
			http.Error(w, "not ready: shutting down", http.StatusServiceUnavailable)
			return
		}
		if srv.draining.Load() {
			http.Error(w, "not ready: draining (left the MDS; serving until clients have moved off, then stopping)", http.StatusServiceUnavailable)
			return
		}
		st := eng.Stats()
		if !st.Healthy {
			http.Error(w, "not ready: a storage engine failed closed; see the node's log", http.StatusServiceUnavailable)
			return
		}
		if st.DiskFull {
			http.Error(w, "not ready: a disk's filesystem is full even after eviction; free space on it or lower server.disk_capacity_bytes", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	// firstReq (server.metrics_first_request_ms) is the header deadline; 0 turns
	// it off, and headers stay bounded in size either way.
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: firstReq,
		WriteTimeout:      30 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
}
