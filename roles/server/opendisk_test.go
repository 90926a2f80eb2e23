package server

import (
	"bytes"
	"errors"
	iofs "io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/slab"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// TestOpenDiskMissingDirSaysSo: a disk directory that does not exist (a
// first start, an NVMe not mounted yet, a typo) is created, sized from the
// filesystem it lands on, and the node says so in one INFO line naming it,
// on both engines and without a configured capacity too.
func TestOpenDiskMissingDirSaysSo(t *testing.T) {
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
			if n := strings.Count(logs.String(), `level=INFO msg="`+eng+` engine: created the disk directory"`); n != 1 {
				t.Fatalf("opening a missing disk directory logged %d lines saying it was created, want one:\n%s", n, logs.String())
			}
		})
	}
}

// TestDiskHint: a disk the filesystem refuses gets what to check.
func TestDiskHint(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&os.PathError{Op: "open", Path: "/mnt/ro/slab_meta.tmp", Err: syscall.EROFS}, "mounted read-only"},
		{&os.PathError{Op: "open", Path: "/srv/dfkv/slab_meta.tmp", Err: syscall.EACCES}, "give it the directory (chown)"},
		{&os.PathError{Op: "readdirent", Path: "/etc/hosts", Err: syscall.ENOTDIR}, "names a file, not a directory"},
		{errors.New("something else"), ""},
	} {
		if got := diskHint(c.err); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Fatalf("diskHint(%v) = %q, want it to say %q", c.err, got, c.want)
		}
	}
	// End to end: a file given as a disk.
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.LoadFrom("server", "", nil, map[string][]string{"disk": {file}, "disk-capacity": {"256MiB"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenEngines(cfg, vfs.OS{}, engine.SystemClock{}, slog.New(slog.DiscardHandler)); err == nil ||
		!strings.Contains(err.Error(), "names a file, not a directory") || !strings.Contains(err.Error(), "server.disks") {
		t.Fatalf("a file as a disk: %v", err)
	}
}

// sharedFS plays one filesystem of size bytes holding every disk under
// root: free space is size less the bytes of the files there.
type sharedFS struct {
	vfs.FS
	root string
	size uint64
}

func (f sharedFS) Usage(string) (vfs.Usage, error) {
	var used uint64
	_ = filepath.WalkDir(f.root, func(p string, d iofs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := os.Stat(p); err == nil {
				used += uint64(fi.Size())
			}
		}
		return nil
	})
	return vfs.Usage{Total: f.size, Free: f.size - min(used, f.size)}, nil
}

// TestSharedFilesystemSizedTogether: two new disks on one filesystem too
// small for both at the configured capacity are refused before either is
// formatted (one at a time, the first was formatted in full, and the retry
// with a capacity that fits then tripped its geometry check).
func TestSharedFilesystemSizedTogether(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	fsys := sharedFS{FS: vfs.OS{}, root: root, size: 1 << 30}
	open := func(capacity string) error {
		t.Helper()
		cfg, _, err := config.LoadFrom("server", "", nil, map[string][]string{"disk": {a, b}, "disk-capacity": {capacity}})
		if err != nil {
			t.Fatal(err)
		}
		g, err := OpenEngines(cfg, fsys, engine.SystemClock{}, slog.New(slog.DiscardHandler))
		if err == nil {
			err = g.Close()
		}
		return err
	}
	err := open("768MiB")
	if err == nil || !strings.Contains(err.Error(), "share one filesystem") || !strings.Contains(err.Error(), "lower it to 536870912") {
		t.Fatalf("two 768 MiB disks on a 1 GiB filesystem: %v, want a refusal naming what would fit", err)
	}
	for _, d := range []string{a, b} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the refused start left %s behind: %v", d, err)
		}
	}
	if err := open("448MiB"); err != nil {
		t.Fatalf("the retry with a capacity that fits both: %v", err)
	}
}

// TestSlabExtentsFollowTheDisk: a new slab disk's extent size follows its
// capacity (many extents even on a small disk), a max_block_bytes larger
// than the extents is stored in pieces and reads back, and a disk
// formatted with other extents (an explicit size, or an earlier default)
// keeps them when server.slab_extent_bytes is not set, with or without a
// configured capacity.
func TestSlabExtentsFollowTheDisk(t *testing.T) {
	load := func(flags map[string][]string) config.Server {
		t.Helper()
		cfg, _, err := config.LoadFrom("server", "", nil, flags)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Server
	}
	open := func(sc config.Server, dir string) engine.StoreEngine {
		t.Helper()
		st, err := openDisk(sc, dir, vfs.OS{}, engine.SystemClock{}, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	small := filepath.Join(t.TempDir(), "small")
	st := open(load(map[string][]string{"disk-capacity": {"256MiB"}}), small)
	if _, e, _, _ := slab.Existing(nil, small); e != 1<<20 {
		t.Fatalf("a 256 MiB disk formatted with %d-byte extents, want 1 MiB", e)
	}
	big := make([]byte, 40<<20+3)
	for i := range big {
		big[i] = byte(i * 7)
	}
	key := wire.BlockKey{Tenant: 1, ID: [16]byte{1}}
	if err := st.Put(key, big); err != nil {
		t.Fatalf("a 40 MiB value on 1 MiB extents: %v", err)
	}
	got, _, err := st.Get(key, 0, 0, enginetest.NewAlloc(nil))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("the 40 MiB value read back: %d bytes, %v", len(got), err)
	}
	st.Close()

	old := filepath.Join(t.TempDir(), "old")
	open(load(map[string][]string{"disk-capacity": {"256MiB"}, "slab-extent-bytes": {"64MiB"}}), old).Close()
	open(load(map[string][]string{"disk-capacity": {"256MiB"}}), old).Close()
	open(load(nil), old).Close()
	if c, e, _, _ := slab.Existing(nil, old); c != 256<<20 || e != 64<<20 {
		t.Fatalf("the formatted disk's geometry changed: %d bytes of %d-byte extents", c, e)
	}
}

// TestOpenDiskReadOnlyNamed: a disk directory on a read-only filesystem
// (here a read-only tmpfs; in production ProtectSystem=strict or a mount
// gone read-only) is refused as not writable, naming the path and the
// setting, on both engines and with or without a configured capacity;
// before, the first complaint was about free space. Needs root to mount.
func TestOpenDiskReadOnlyNamed(t *testing.T) {
	ro := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", ro, "tmpfs", syscall.MS_RDONLY, "size=16m"); err != nil {
		t.Skipf("cannot mount a read-only tmpfs here (%v); this test needs root", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(ro, 0) })
	for _, c := range []map[string][]string{
		{"disk": {ro}},
		{"disk": {ro}, "disk-capacity": {"256MiB"}},
		{"disk": {filepath.Join(ro, "not-yet")}},
		{"disk": {ro}, "store-engine": {"file"}},
	} {
		cfg, _, err := config.LoadFrom("server", "", nil, c)
		if err != nil {
			t.Fatal(err)
		}
		_, err = OpenEngines(cfg, vfs.OS{}, engine.SystemClock{}, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), ro+" is not writable") || !strings.Contains(err.Error(), "read-only file system") ||
			!strings.Contains(err.Error(), "server.disks") {
			t.Errorf("%v: %v; want a refusal naming the read-only directory", c, err)
		}
	}
}

// TestEmptyQuotasFileWarns: a quotas file that lists no tenant (empty, or
// an empty [tenants] table) starts the node, with one warning naming the
// file, since it is more often a mistake than meant; a file that lists one
// gets no such warning.
func TestEmptyQuotasFileWarns(t *testing.T) {
	dir := t.TempDir()
	start := func(name, content string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := config.LoadFrom("server", "", nil, map[string][]string{
			"disk": {filepath.Join(dir, "disk-"+name)}, "disk-capacity": {"256MiB"}, "tenant-quotas-file": {path}})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		g, err := OpenEngines(cfg, vfs.OS{}, engine.SystemClock{}, slog.New(slog.NewTextHandler(&buf, nil)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	for name, content := range map[string]string{"empty.toml": "", "bare.toml": "# quotas\n[tenants]\n"} {
		if got := start(name, content); strings.Count(got, "lists no tenants") != 1 || !strings.Contains(got, name) {
			t.Errorf("%s: start-up log %q, want one warning naming the file", name, got)
		}
	}
	if got := start("one.toml", "[tenants]\nacme = \"1GiB\"\n"); strings.Contains(got, "lists no tenants") {
		t.Errorf("a file listing a tenant warned: %q", got)
	}
}
