package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
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
// refuse connections, and the disk directory it created is gone.
func TestFailedStartClosesWhatItOpened(t *testing.T) {
	disk := filepath.Join(t.TempDir(), "d0")
	cfg, _, err := config.LoadFrom("server", "", nil, map[string][]string{
		"disks": {disk}, "disk-capacity-bytes": {"256MiB"}, "mds": {"127.0.0.1:1"}})
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
	// The start created the disk directory: it is gone again.
	if _, err := os.Stat(disk); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the disk directory a failed start created is still there (stat: %v)", err)
	}
}

// TestFailedStartLeavesNoFiles: a start that fails on a busy port has
// formatted nothing; one that fails after formatting removes what it
// created (a new directory, the contents of an empty one) and never
// touches a directory that held anything before, which stays usable.
func TestFailedStartLeavesNoFiles(t *testing.T) {
	root := t.TempDir()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	fresh := filepath.Join(root, "new", "d0")
	cfg := mustServerConfig(t, map[string][]string{"disks": {fresh}, "disk-capacity-bytes": {"64MiB"},
		"listen": {busy.Addr().String()}, "http-listen": {""}})
	if err := Run(context.Background(), cfg, Deps{}); err == nil || !strings.Contains(err.Error(), "listen on") {
		t.Fatalf("Run on a busy port: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "new")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a start refused for a busy port created %s (stat: %v)", filepath.Join(root, "new"), err)
	}

	// Fails after the disks are formatted: registration refuses the ID.
	empty, kept := filepath.Join(root, "empty"), filepath.Join(root, "kept")
	for _, d := range []string{empty, kept} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	keptCfg := mustServerConfig(t, map[string][]string{"disks": {kept}, "disk-capacity-bytes": {"64MiB"}, "http-listen": {""}, "listen": {"127.0.0.1:0"}})
	g, err := OpenEngines(keptCfg, vfs.OS{}, engine.SystemClock{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	cfg = mustServerConfig(t, map[string][]string{"disks": {fresh, empty, kept}, "disk-capacity-bytes": {"64MiB"},
		"http-listen": {""}, "listen": {"127.0.0.1:0"}, "mds": {"127.0.0.1:1"}})
	cfg.Server.ID = "two words"
	if err := Run(context.Background(), cfg, Deps{}); err == nil {
		t.Fatal("Run with a bad ID started")
	}
	if _, err := os.Stat(filepath.Join(root, "new")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the directory a failed start created is still there (stat: %v)", err)
	}
	if entries, err := os.ReadDir(empty); err != nil || len(entries) != 0 {
		t.Fatalf("the empty disk directory holds %d entries after a failed start (%v)", len(entries), err)
	}
	g, err = OpenEngines(keptCfg, vfs.OS{}, engine.SystemClock{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("a disk that existed before the failed start: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}

func mustServerConfig(t *testing.T, flags map[string][]string) *config.Config {
	t.Helper()
	cfg, _, err := config.LoadFrom("server", "", nil, flags)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
