package server

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/file"
	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/engine/ramtier"
	"github.com/dfkv/dfkv/engine/slab"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/roles/server/quota"
	"github.com/dfkv/dfkv/wire"
)

// OpenEngines opens one engine per configured disk and the group routing
// over them. On failure it closes whatever it opened.
func OpenEngines(cfg *config.Config, fs vfs.FS, clock engine.Clock, log *slog.Logger) (*engine.Group, error) {
	sc := cfg.Server
	if sc.StoreEngine != "slab" && sc.StoreEngine != "file" {
		return nil, fmt.Errorf("unknown store engine %q (server.store_engine / DFKV_SERVER_STORE_ENGINE); valid: slab, file", sc.StoreEngine)
	}
	quotas, err := quota.Load(sc.TenantQuotasFile, sc.TenantDefaultQuotaBytes)
	if err != nil {
		return nil, err
	}
	if sc.TenantQuotasFile != "" && (quotas == nil || quotas.Listed() == 0) {
		// Legal (a fleet's template before any tenant is capped), but
		// as likely the wrong file or one emptied by mistake: say so
		// rather than run uncapped in silence.
		log.Warn("tenant quotas file lists no tenants: only server.tenant_default_quota_bytes applies (0 = none); a file of quotas holds a [tenants] table of \"name\" = \"size\"",
			"file", sc.TenantQuotasFile, "default_quota_bytes", sc.TenantDefaultQuotaBytes)
	}
	var acct engine.Accounting = engine.NoAccounting{}
	if quotas != nil {
		acct = quotas
	}
	var engines []engine.StoreEngine
	closeAll := func() {
		for _, e := range engines {
			_ = e.Close()
		}
	}
	if err := checkSharedSpace(sc, fs); err != nil {
		return nil, err
	}
	for _, dir := range sc.Disks {
		e, err := openDisk(sc, dir, fs, clock, log, acct)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("open disk %s (server.disks / DFKV_SERVER_DISKS): %w%s", dir, err, diskHint(err))
		}
		engines = append(engines, e)
	}
	names := make([]string, len(sc.Disks))
	for i, d := range sc.Disks {
		names[i] = filepath.Clean(d)
	}
	if len(sc.Disks) == 0 {
		// Only an embedded store runs without a disk (the configuration
		// refuses an empty server.disks); its RAM tier keeps the values,
		// and what RAM evicts is gone unless the object store has it.
		if sc.RAMTier != 1 {
			return nil, errors.New("no disk (server.disks) and no RAM tier (server.ram_tier): nothing would be kept")
		}
		engines, names = []engine.StoreEngine{&engine.Discard{}}, []string{"(no disk)"}
		log.Info("no disk: values live in RAM (and the object store, if configured) only")
	}
	g, err := engine.NewGroup(engines, names)
	if err != nil {
		closeAll()
		return nil, err
	}
	if quotas != nil {
		g.SetQuotas(quotas)
		log.Info("tenant quotas on", "file", sc.TenantQuotasFile, "default_quota_bytes", sc.TenantDefaultQuotaBytes)
		quota.WarnOver(log, quotas)
	}
	return g, nil
}

// writable refuses a disk whose directory (or, before it is made, its
// nearest existing parent) cannot be written: a read-only filesystem (a
// systemd unit's ProtectSystem, a mount gone read-only) or no permission.
// Checked first, since otherwise the first symptom is a free-space or
// preallocation error that names the wrong cause. A path that does not
// exist on this host (a test's stand-in filesystem) is left to the engine.
func writable(path string) error {
	err := unix.Access(path, unix.W_OK)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	abs, _ := filepath.Abs(path)
	return fmt.Errorf("%s is not writable (%v): a disk needs a directory this user can write on a read-write filesystem", abs, err)
}

// openRAMTier puts the RAM tier in front of backing: group, or the
// object-store tier over it (group still routes flushes to their disks).
func openRAMTier(sc config.Server, group *engine.Group, backing engine.StoreEngine, log *slog.Logger) (*ramtier.Tier, error) {
	threads := sc.RAMFlushThreads
	if threads == 0 {
		threads = min(4*len(sc.Disks), 16)
	}
	// A write-back PUT is acknowledged before its flush meets the
	// quota check, so a flush refused for quota would drop an acknowledged
	// value. Limited tells the tier which tenants have a quota; their PUTs
	// skip write-back and get the quota's answer synchronously.
	var limited func(uint64) bool
	if q := group.Quotas(); q != nil {
		limited = func(tenant uint64) bool { return q.Limit(tenant) != 0 }
	}
	t, err := ramtier.Open(ramtier.Options{
		Backing: backing, Bytes: sc.RAMTierBytes, Mode: sc.RAMWriteMode, AckMode: sc.PutAckMode,
		FlushThreads: threads, FlushDelay: sc.RAMFlushDelay, MaxValueBytes: sc.MaxBlockBytes, Logger: log,
		LargeReserveBytes: largeReserve(sc.RAMTierLargeReserve), Shards: sc.RAMTierShards, NUMA: sc.RAMTierNUMA,
		ReadCoalesce: sc.ReadCoalesce == 1, DiskOf: group.DiskOf, Disks: len(group.Names()), Limited: limited,
		SharedArena: sc.ShmSocket != "", NoDisk: len(sc.Disks) == 0,
	})
	if err != nil {
		// The tier's errors name the problem (budget, reserve, NUMA
		// policy); the settings behind them all start with ram_tier.
		return nil, fmt.Errorf("RAM tier (server.ram_tier_* / DFKV_RAM_TIER_*): %w", err)
	}
	return t, nil
}

// largeReserve maps server.ram_tier_large_reserve_bytes to
// ramtier.Options.LargeReserveBytes, whose zero value means the default:
// auto is 0 there, and the operator's 0 ("no reserve") is NoLargeReserve.
func largeReserve(v int64) int64 {
	switch v {
	case config.SizeAuto:
		return 0
	case 0:
		return ramtier.NoLargeReserve
	}
	return v
}

// Automatic slab sizing: a new disk gets a quarter of its free space, at
// most autoSlabMax, rounded down to whole extents. Production nodes set
// server.disk_capacity_bytes; the automatic size is for trying dfkv out
// without filling a shared disk.
const autoSlabMax = 8 << 30

// openDisk opens one disk's engine. Without a configured capacity, a slab
// disk keeps the geometry it was formatted with (so a restart never trips
// the geometry check) and a new one is sized from its free space; the file
// engine, which preallocates nothing, takes half the filesystem.
func openDisk(sc config.Server, dir string, fs vfs.FS, clock engine.Clock, log *slog.Logger, acct engine.Accounting) (engine.StoreEngine, error) {
	if err := writable(vfs.ExistingAncestor(fs, dir)); err != nil {
		return nil, err
	}
	capacity := sc.DiskCapacityBytes
	if sc.StoreEngine == "slab" {
		capacity, extent, auto, err := slabGeometry(sc, dir, fs)
		if err != nil {
			return nil, err
		}
		if auto {
			log.Info("disk capacity not configured; formatting a quarter of the free space (at most 8GiB)",
				"disk", dir, "capacity_bytes", capacity, "extent_bytes", extent)
		}
		return slab.Open(slab.Options{Dir: dir, CapacityBytes: capacity, ExtentBytes: extent, MaxValueBytes: sc.MaxBlockBytes,
			FS: fs, Clock: clock, Logger: log, DirectIO: true, Accounting: acct,
			Scrub: slab.ScrubOptions{BytesPerSecond: sc.ScrubBytesPerSecond, Interval: time.Duration(sc.ScrubIntervalHours) * time.Hour},
			URing: sc.URing == 1})
	}
	if capacity == 0 {
		u, err := fs.Usage(vfs.ExistingAncestor(fs, dir))
		if err != nil {
			return nil, fmt.Errorf("size it with server.disk_capacity_bytes: %w", err)
		}
		// Half the filesystem: stable across restarts (unlike free space,
		// which shrinks as the cache fills), and the ENOSPC
		// evict-and-retry covers a disk shared with other data.
		capacity = u.Total / 2
		log.Info("disk capacity not configured; using half of the filesystem", "disk", dir, "capacity_bytes", capacity)
	}
	return file.Open(file.Options{Dir: dir, CapacityBytes: capacity, FS: fs, Clock: clock, Logger: log, DirectIO: true, Accounting: acct})
}

// slabGeometry is the capacity and extent size a slab disk at dir opens
// with: a formatted disk's own geometry unless configured otherwise (which
// the engine then refuses, naming the difference); for a new disk without
// a configured capacity, a quarter of the free space of the filesystem it
// will be made on (auto), at most autoSlabMax, in whole extents.
func slabGeometry(sc config.Server, dir string, fs vfs.FS) (capacity, extent uint64, auto bool, err error) {
	capacity = sc.DiskCapacityBytes
	c, e, formatted, err := slab.Existing(fs, dir)
	if err != nil {
		return 0, 0, false, fmt.Errorf("%w; set server.disk_capacity_bytes or point at an empty directory", err)
	}
	extent = slabExtent(sc, capacity)
	switch {
	case formatted:
		if capacity == 0 {
			capacity = c
		}
		if sc.SlabExtentBytes == 0 {
			extent = e
		}
	case capacity == 0:
		u, err := fs.Usage(vfs.ExistingAncestor(fs, dir))
		if err != nil {
			return 0, 0, false, fmt.Errorf("size it with server.disk_capacity_bytes: %w", err)
		}
		capacity = min(u.Free/4, autoSlabMax)
		extent = slabExtent(sc, capacity)
		capacity = capacity / extent * extent
		if capacity < extent {
			return 0, 0, false, fmt.Errorf("only %d bytes free, less than one %d-byte extent; free space or set server.disk_capacity_bytes", u.Free, extent)
		}
		auto = true
	}
	return capacity, extent, auto, nil
}

// ExplainAuto tells r what the node's automatic settings would resolve to
// if it started now, for --print-config: each slab disk's capacity and
// extent size, and the payload buffer budget.
func ExplainAuto(cfg *config.Config, r *config.Resolved) {
	sc := cfg.Server
	if sc.StoreEngine == "slab" {
		var caps, extents []string
		for _, dir := range sc.Disks {
			c, e, auto, err := slabGeometry(sc, dir, vfs.OS{})
			switch {
			case err != nil:
				caps = append(caps, dir+": "+err.Error())
			case auto:
				caps = append(caps, fmt.Sprintf("%s for %s, a quarter of its free space", config.FormatSize(c), dir))
			default:
				caps = append(caps, fmt.Sprintf("%s, as %s is formatted", config.FormatSize(c), dir))
			}
			if err == nil {
				extents = append(extents, config.FormatSize(e))
			}
		}
		r.SetAuto("server.disk_capacity_bytes", strings.Join(caps, "; "))
		r.SetAuto("server.slab_extent_bytes", strings.Join(extents, ", "))
	}
	largest := uint64(iobuf.SizeFor(int(sc.MaxBlockBytes)))
	r.SetAuto("server.buffer_budget_bytes", config.FormatSize(max(1<<30, 2*largest)))
}

// slabExtent is the extent size a new slab disk of capacity bytes is
// formatted with: server.slab_extent_bytes, or the engine's choice for its
// capacity (values larger than an extent are stored in pieces).
func slabExtent(sc config.Server, capacity uint64) uint64 {
	if sc.SlabExtentBytes != 0 {
		return sc.SlabExtentBytes
	}
	return slab.ExtentFor(capacity)
}

// checkSharedSpace refuses, before any disk is opened, new slab disks of a
// configured capacity that share a filesystem too small for all of them.
// Each engine checks its own disk against the free space, but one at a
// time: the first would be formatted in full before the second found no
// room, and a retry with a smaller capacity would then trip the first's
// geometry check. Disks already formatted are left to their engines.
func checkSharedSpace(sc config.Server, fsys vfs.FS) error {
	if sc.StoreEngine != "slab" || sc.DiskCapacityBytes == 0 || len(sc.Disks) < 2 {
		return nil
	}
	extent := slabExtent(sc, sc.DiskCapacityBytes)
	need := sc.DiskCapacityBytes / extent * extent
	type shared struct {
		free  uint64
		disks []string
	}
	byFS := map[[3]uint64]*shared{}
	var order [][3]uint64
	for _, dir := range sc.Disks {
		if _, _, formatted, err := slab.Existing(fsys, dir); err != nil || formatted {
			continue // formatted (its engine checks what it still needs), or its engine reports the problem
		}
		u, err := fsys.Usage(vfs.ExistingAncestor(fsys, dir))
		if err != nil {
			continue // its engine reports it
		}
		key := [3]uint64{u.FS, 0, 0}
		if u.FS == 0 {
			key = [3]uint64{0, u.Total, u.Free} // no filesystem id: same size and free space, same filesystem
		}
		if byFS[key] == nil {
			byFS[key] = &shared{free: u.Free}
			order = append(order, key)
		}
		byFS[key].disks = append(byFS[key].disks, dir)
	}
	for _, key := range order {
		g := byFS[key]
		if n := uint64(len(g.disks)); n > 1 && need*n > g.free {
			fit := g.free / n / extent * extent
			return fmt.Errorf("disks %s share one filesystem with %d bytes free, but %d disks of server.disk_capacity_bytes (--disk-capacity-bytes, DFKV_SERVER_DISK_CAPACITY_BYTES) %s need %d bytes; nothing was written: lower it to %d (fills the filesystem; leave room if it is shared) or give each disk a filesystem of its own: %w",
				strings.Join(g.disks, ", "), g.free, n, config.FormatSize(sc.DiskCapacityBytes), need*n, fit, wire.StatusInvalid)
		}
	}
	return nil
}

// diskHint says what to check when a disk directory cannot be used for a
// reason of the filesystem's, not dfkv's.
func diskHint(err error) string {
	switch {
	case errors.Is(err, syscall.EROFS):
		return "; the filesystem is mounted read-only: remount it read-write or point server.disks elsewhere"
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf("; the node runs as uid %d: give it the directory (chown) or point server.disks elsewhere", os.Getuid())
	case errors.Is(err, syscall.ENOTDIR):
		return "; a path in server.disks names a file, not a directory"
	}
	return ""
}
