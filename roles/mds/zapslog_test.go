package mds

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// recorder is a slog.Handler that keeps what it is given.
type recorder struct {
	level slog.Level
	mu    *sync.Mutex
	recs  *[]slog.Record
	attrs []slog.Attr // from WithAttrs
}

func newRecorder(level slog.Level) *recorder {
	return &recorder{level: level, mu: &sync.Mutex{}, recs: &[]slog.Record{}}
}

func (r *recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= r.level }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	rec = rec.Clone()
	rec.AddAttrs(r.attrs...)
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.recs = append(*r.recs, rec)
	return nil
}

func (r *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *r
	c.attrs = append(append([]slog.Attr(nil), r.attrs...), as...)
	return &c
}

func (r *recorder) WithGroup(string) slog.Handler { return r }

func (r *recorder) records() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), *r.recs...)
}

func attrMap(rec slog.Record) map[string]string {
	m := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

// TestZapWarnReachesSlog: what the etcd client logs through zap at WARN
// and above reaches the MDS's slog handler at the matching level, with
// its message prefixed and its fields (and those given to With) as
// attributes; INFO and DEBUG do not.
func TestZapWarnReachesSlog(t *testing.T) {
	h := newRecorder(slog.LevelDebug)
	zl := zapToSlog(slog.New(h), "etcd client: ").Named("etcd-client")
	zl.Debug("picked endpoint", zap.String("endpoint", "a:1"))
	zl.Info("auto sync endpoints failed", zap.Error(errors.New("quiet")))
	zl.Warn("retrying of unary invoker failed",
		zap.String("target", "etcd-endpoints://x"), zap.Uint("attempt", 3),
		zap.Duration("backoff", 250*time.Millisecond), zap.Error(errors.New("context deadline exceeded")))
	zl.With(zap.String("watch", "groups")).Error("watch cancelled", zap.Int64("revision", 42))

	recs := h.records()
	if len(recs) != 2 {
		t.Fatalf("%d records reached slog, want the WARN and the ERROR only: %v", len(recs), recs)
	}
	warn, errRec := recs[0], recs[1]
	if warn.Level != slog.LevelWarn || warn.Message != "etcd client: retrying of unary invoker failed" {
		t.Errorf("warn record: level %v, message %q", warn.Level, warn.Message)
	}
	want := map[string]string{"target": "etcd-endpoints://x", "attempt": "3", "backoff": "250ms",
		"error": "context deadline exceeded", "logger": "etcd-client"}
	if got := attrMap(warn); !maps.Equal(got, want) {
		t.Errorf("warn attributes %v, want %v", got, want)
	}
	if errRec.Level != slog.LevelError || errRec.Message != "etcd client: watch cancelled" {
		t.Errorf("error record: level %v, message %q", errRec.Level, errRec.Message)
	}
	if got := attrMap(errRec); got["revision"] != "42" || got["watch"] != "groups" {
		t.Errorf("error attributes %v, want revision=42 and the With field watch=groups", got)
	}

	// A handler that wants only errors gets no warning either.
	h = newRecorder(slog.LevelError)
	zl = zapToSlog(slog.New(h), "")
	if zl.Core().Enabled(zap.WarnLevel) {
		t.Error("WARN enabled for a handler at ERROR")
	}
	zl.Warn("dropped")
	zl.Error("kept")
	if recs := h.records(); len(recs) != 1 || recs[0].Message != "kept" {
		t.Errorf("handler at ERROR got %v", recs)
	}
}
