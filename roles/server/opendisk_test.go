package server

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/vfs"
)

// TestOpenDiskMissingDirWarns: a disk directory that does not exist (an
// NVMe not mounted yet, a typo) is created, sized from the filesystem it
// lands on, and the node says so, on both engines and without a configured
// capacity too (the automatic sizing used to create it silently first).
func TestOpenDiskMissingDirWarns(t *testing.T) {
	for _, eng := range []string{"slab", "file"} {
		t.Run(eng, func(t *testing.T) {
			cfg, _, err := config.LoadFrom("server", "", nil, map[string][]string{"store-engine": {eng}})
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "mnt", "nvme0", "dfkv")
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			st, err := openDisk(cfg.Server, dir, vfs.OS{}, engine.SystemClock{}, log, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "did not exist") {
				t.Fatalf("opening a missing disk directory logged %d WARN lines, want one saying it was created:\n%s", n, logs.String())
			}
		})
	}
}
