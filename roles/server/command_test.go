package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/vfs"
)

// TestClosersRunLastFirst: a start's closers run in the reverse of the
// order they were added, every one of them even after an error, and the
// first error is the one reported.
func TestClosersRunLastFirst(t *testing.T) {
	var ran []int
	var c closers
	errA, errB := errors.New("a"), errors.New("b")
	for i, err := range []error{nil, errA, nil, errB} {
		c.add(func() error { ran = append(ran, i); return err })
	}
	if err := c.run(); err != errB || !slices.Equal(ran, []int{3, 2, 1, 0}) {
		t.Fatalf("run: %v, order %v; want b and 3 2 1 0", err, ran)
	}
	if err := (closers{}).run(); err != nil {
		t.Fatalf("no closers: %v", err)
	}
}

// TestFailedStartClosesWhatItOpened: a start that fails at its last step
// (registration refuses a node ID with a space, after the engines, the
// listeners and the HTTP side are up) leaves nothing open: both listeners
// refuse connections and the slab disk, which a running engine holds
// locked, opens again.
func TestFailedStartClosesWhatItOpened(t *testing.T) {
	disk := filepath.Join(t.TempDir(), "d0")
	cfg, _, err := config.LoadFrom("server", "", nil, map[string][]string{
		"disk": {disk}, "disk-capacity": {"256MiB"}, "mds": {"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.ID = "two words"
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	hln, _ := net.Listen("tcp", "127.0.0.1:0")
	err = Run(context.Background(), cfg, Deps{Listener: ln, HTTPListener: hln})
	if err == nil || !strings.Contains(err.Error(), "DFKV_SERVER_ID") {
		t.Fatalf("Run: %v, want the ID refused", err)
	}
	for _, l := range []net.Listener{ln, hln} {
		// The HTTP server closes its listener from its own goroutine when
		// Shutdown came first: poll until refused.
		waitUntil(t, 10*time.Second, func() error {
			c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second)
			if err != nil {
				return nil
			}
			c.Close()
			return fmt.Errorf("%s still accepts connections after a failed start", l.Addr())
		})
	}
	g, err := OpenEngines(cfg, vfs.OS{}, engine.SystemClock{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("the disk after a failed start: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}
