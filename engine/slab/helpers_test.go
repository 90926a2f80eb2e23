package slab

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// recorder is an engine.Accounting that sums committed bytes per tenant.
type recorder struct {
	mu sync.Mutex
	by map[uint64]int64
}

func newRecorder() *recorder { return &recorder{by: map[uint64]int64{}} }

func (r *recorder) Committed(tenant uint64, delta int64) {
	r.mu.Lock()
	r.by[tenant] += delta
	if r.by[tenant] == 0 {
		delete(r.by, tenant)
	}
	r.mu.Unlock()
}

func (r *recorder) snapshot() map[uint64]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[uint64]int64{}
	for k, v := range r.by {
		m[k] = v
	}
	return m
}

// logBuf is a slog handler target that keeps every record's message.
type logBuf struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logBuf) Enabled(context.Context, slog.Level) bool { return true }
func (l *logBuf) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.msgs = append(l.msgs, r.Level.String()+" "+r.Message)
	l.mu.Unlock()
	return nil
}
func (l *logBuf) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logBuf) WithGroup(string) slog.Handler      { return l }

func (l *logBuf) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

// smallOpts is a small store: 1 MiB extents, 16 MiB.
func smallOpts(dir string) Options {
	return Options{Dir: dir, CapacityBytes: 16 << 20, ExtentBytes: 1 << 20, DirectIO: true}
}

func mustCache(t testing.TB, s *Store, k wire.BlockKey, v []byte) {
	t.Helper()
	if err := s.Put(k, v); err != nil {
		t.Fatalf("Put(%s, %d bytes): %v", k, len(v), err)
	}
}

func mustClose(t testing.TB, s *Store) {
	t.Helper()
	checkAlloc(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func get(t testing.TB, s *Store, k wire.BlockKey) ([]byte, error) {
	t.Helper()
	a := enginetest.NewAlloc(nil)
	defer a.Release()
	data, _, err := s.Get(k, 0, 0, a)
	return bytes.Clone(data), err
}

func wantStatus(t testing.TB, err error, want wire.Status, what string) {
	t.Helper()
	if got := wire.StatusOf(err); got != want {
		t.Fatalf("%s: status %v (err %v), want %v", what, got, err, want)
	}
}

// fileState is a file's bytes and mtime.
type fileState struct {
	data  []byte
	mtime time.Time
	mode  fs.FileMode
}

// snapshotDir records every file and directory under dir.
func snapshotDir(t testing.TB, dir string) map[string]fileState {
	t.Helper()
	m := map[string]fileState{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fileState{mtime: fi.ModTime(), mode: fi.Mode()}
		if d.Type().IsRegular() {
			if st.data, err = os.ReadFile(p); err != nil {
				return err
			}
		}
		m[p] = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameSnapshot(t testing.TB, before, after map[string]fileState) {
	t.Helper()
	if len(before) != len(after) {
		t.Fatalf("directory had %d entries, now %d", len(before), len(after))
	}
	for p, b := range before {
		a, ok := after[p]
		if !ok {
			t.Fatalf("%s disappeared", p)
		}
		if !a.mtime.Equal(b.mtime) || a.mode != b.mode || !bytes.Equal(a.data, b.data) {
			t.Fatalf("%s changed (mtime %v -> %v, %d -> %d bytes)", p, b.mtime, a.mtime, len(b.data), len(a.data))
		}
	}
}

// checkAlloc runs the allocator's consistency check (quiescent store only).
func checkAlloc(t testing.TB, s *Store) {
	t.Helper()
	s.mu.Lock()
	err := s.alloc.Check()
	s.mu.Unlock()
	if err != nil {
		t.Fatalf("allocator inconsistent: %v", err)
	}
}
