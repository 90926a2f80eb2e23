package sim

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/dfkv/dfkv/engine/vfs"
)

// Disk is the filesystem of one simulated host: real files under a
// directory (the engines need descriptors for fallocate and SEEK_DATA),
// seen through the engines' vfs seam so the world can fail and undo what
// they do.
//
//   - Crash ends the process that used the disk: every file it opened
//     fails with EIO from then on, so nothing it does afterwards lands.
//   - PowerCut, after a crash, also undoes every write made since its
//     file was last synced, newest first; with torn set, one of those
//     writes survives in part (a torn write). Like fdatasync, a sync
//     covers the file, whichever descriptor wrote it.
//   - Faults fail reads or writes with EIO, or writes with ENOSPC, for a
//     share of operations chosen by a hash of the run's seed and the operation
//     (its file, length and virtual moment), not by the order goroutines
//     reach it, so the same run fails the same operations.
//   - Slow adds a virtual delay to every read, write and sync (see Slow).
//
// Metadata (creates, renames, removes, truncation) and preallocation
// (fallocate through the descriptor) are durable at once: a power cut
// loses only unsynced data writes, zeroed ranges included (ZeroRange).
type Disk struct {
	fs   vfs.OS
	seed uint64

	mu       sync.Mutex
	gen      int // bumped by Crash: files of older generations are dead
	inodes   map[inodeID]*inode
	faults   Faults
	slow     time.Duration
	injected int
}

// Faults says what share (0..1) of operations a disk fails.
type Faults struct {
	ReadEIO, WriteEIO, WriteENOSPC float64
}

// NewDisk returns a disk whose fault choices derive from seed.
func NewDisk(seed uint64) *Disk {
	return &Disk{seed: seed, inodes: map[inodeID]*inode{}}
}

// SetFaults replaces the disk's fault shares (Faults{}: none).
func (d *Disk) SetFaults(f Faults) {
	d.mu.Lock()
	d.faults = f
	d.mu.Unlock()
}

// Slow sets the delay added to every read, write and sync (0: none).
//
// A goroutine waiting for a sync.Mutex is not durably blocked in
// synctest's sense, so a lock held across a slow operation while another
// goroutine waits for it stops virtual time for good: a run that hangs
// under a slow disk has found a lock held across disk I/O.
func (d *Disk) Slow(delay time.Duration) {
	d.mu.Lock()
	d.slow = delay
	d.mu.Unlock()
}

// Injected returns how many faults the disk injected so far.
func (d *Disk) Injected() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.injected
}

// Crash kills the process using the disk: its open files fail from now
// on. A new process opens files afresh.
func (d *Disk) Crash() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
}

// PowerCut crashes the disk's process and undoes every unsynced write;
// torn keeps half of one of them.
func (d *Disk) PowerCut(torn bool) error {
	d.mu.Lock()
	d.gen++
	inodes := make([]*inode, 0, len(d.inodes))
	for _, in := range d.inodes {
		inodes = append(inodes, in)
	}
	d.inodes = map[inodeID]*inode{}
	d.mu.Unlock()
	var first error
	for _, in := range inodes {
		if err := in.undo(torn); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close releases the descriptors the disk keeps to undo writes.
func (d *Disk) Close() {
	d.mu.Lock()
	inodes := d.inodes
	d.inodes = map[inodeID]*inode{}
	d.mu.Unlock()
	for _, in := range inodes {
		_ = in.fd.Close()
	}
}

// chosen reports whether the operation named by what falls in the share p.
func (d *Disk) chosen(p float64, what ...uint64) bool {
	if p <= 0 {
		return false
	}
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], d.seed)
	_, _ = h.Write(b[:])
	for _, w := range what {
		binary.LittleEndian.PutUint64(b[:], w)
		_, _ = h.Write(b[:])
	}
	return float64(h.Sum64()>>11)/float64(1<<53) < p
}

func nameHash(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

type inodeID struct{ dev, ino uint64 }

// inode is what the disk knows of one file, whatever its name now and
// however many descriptors the process has on it: a descriptor of its
// own (to read pre-images and undo through) and the writes since the
// last sync, oldest first.
type inode struct {
	mu     sync.Mutex
	fd     *os.File
	undoes []undo
}

type undo struct {
	off  int64
	old  []byte // what was there (shorter than the write if it extended the file)
	new  []byte // what was written
	size int64  // the file's size before the write
	at   time.Time
}

// OpenFile opens name on the real filesystem, watched by the disk.
func (d *Disk) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	// O_DIRECT would bypass the page cache the undo log reads back
	// through; a simulated disk has no alignment to honour.
	f, err := d.fs.OpenFile(name, flag&^syscall.O_DIRECT, perm)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if st.IsDir() {
		// Opened to be synced or locked: nothing to undo.
		return &diskFile{File: f, disk: d, gen: d.gen}, nil
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		_ = f.Close()
		return nil, fmt.Errorf("sim: %s: no inode number", name)
	}
	id := inodeID{dev: uint64(sys.Dev), ino: sys.Ino}
	d.mu.Lock()
	defer d.mu.Unlock()
	in := d.inodes[id]
	if in == nil {
		fd, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		in = &inode{fd: fd}
		d.inodes[id] = in
	}
	return &diskFile{File: f, disk: d, gen: d.gen, inode: in}, nil
}

func (d *Disk) Rename(oldpath, newpath string) error         { return d.fs.Rename(oldpath, newpath) }
func (d *Disk) Remove(name string) error                     { return d.fs.Remove(name) }
func (d *Disk) MkdirAll(path string, perm os.FileMode) error { return d.fs.MkdirAll(path, perm) }
func (d *Disk) Mkdir(path string, perm os.FileMode) error    { return d.fs.Mkdir(path, perm) }
func (d *Disk) ReadDir(name string) ([]os.DirEntry, error)   { return d.fs.ReadDir(name) }
func (d *Disk) Stat(name string) (os.FileInfo, error)        { return d.fs.Stat(name) }
func (d *Disk) Usage(path string) (vfs.Usage, error)         { return d.fs.Usage(path) }
func (d *Disk) SyncDir(path string) error                    { return nil }

// diskFile is one descriptor of one process generation.
type diskFile struct {
	vfs.File
	disk  *Disk
	gen   int
	inode *inode // nil for a directory
}

// check fails the operation if the file's process is dead, or if the
// disk's faults choose it; it also sleeps a slow disk's delay.
func (f *diskFile) check(op string, share func(Faults) (float64, syscall.Errno), n int) error {
	d := f.disk
	d.mu.Lock()
	dead := f.gen != d.gen
	p, errno := share(d.faults)
	slow := d.slow
	d.mu.Unlock()
	if dead {
		return &os.PathError{Op: op, Path: f.Name(), Err: syscall.EIO}
	}
	if slow > 0 {
		time.Sleep(slow)
	}
	// Not the offset: where an engine puts a value may depend on the order
	// goroutines reached its allocator at one instant.
	if errno != 0 && d.chosen(p, nameHash(f.Name()), uint64(time.Now().UnixNano()), uint64(n), uint64(len(op))) {
		d.mu.Lock()
		d.injected++
		d.mu.Unlock()
		return &os.PathError{Op: op, Path: f.Name(), Err: errno}
	}
	return nil
}

func readShare(f Faults) (float64, syscall.Errno) { return f.ReadEIO, syscall.EIO }
func writeShare(f Faults) (float64, syscall.Errno) {
	if f.WriteENOSPC > 0 {
		return f.WriteENOSPC, syscall.ENOSPC
	}
	return f.WriteEIO, syscall.EIO
}
func noShare(Faults) (float64, syscall.Errno) { return 0, 0 }

func (f *diskFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.check("pread", readShare, len(p)); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

// WriteAt writes p and notes what it overwrote. The inode's lock is held
// across the pre-image read and the write, so writes of several
// goroutines to one range are undone in the order they happened.
func (f *diskFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.check("pwrite", writeShare, len(p)); err != nil {
		return 0, err
	}
	in := f.inode
	if in == nil {
		return f.File.WriteAt(p, off)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	st, err := in.fd.Stat()
	if err != nil {
		return 0, err
	}
	u := undo{off: off, size: st.Size(), new: append([]byte(nil), p...), at: time.Now()}
	if off < u.size {
		u.old = make([]byte, min(int64(len(p)), u.size-off))
		if _, err := in.fd.ReadAt(u.old, off); err != nil {
			return 0, err
		}
	}
	n, err := f.File.WriteAt(p, off)
	in.undoes = append(in.undoes, u)
	return n, err
}

// ZeroRange zeroes [off, off+n) through WriteAt, so a power cut can undo
// it as it undoes any write (the engines would otherwise punch a hole
// through the descriptor, out of the disk's sight).
func (f *diskFile) ZeroRange(off, n int64) error {
	zero := make([]byte, min(n, 1<<20))
	for n > 0 {
		c := min(n, int64(len(zero)))
		if _, err := f.WriteAt(zero[:c], off); err != nil {
			return err
		}
		off, n = off+c, n-c
	}
	return nil
}

func (f *diskFile) Truncate(size int64) error {
	if err := f.check("ftruncate", noShare, 0); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *diskFile) Sync() error { return f.Datasync() }

// Datasync makes the file's writes so far, through any descriptor,
// survive a power cut.
func (f *diskFile) Datasync() error {
	if err := f.check("fdatasync", noShare, 0); err != nil {
		return err
	}
	if in := f.inode; in != nil {
		in.mu.Lock()
		in.undoes = nil
		in.mu.Unlock()
	}
	return nil
}

// undo rolls the file back to its last sync. With torn, the write chosen
// by its moment and bytes (not by where it went, which may depend on
// goroutine order) keeps its first half.
func (in *inode) undo(torn bool) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	defer in.fd.Close()
	undoes := in.undoes
	in.undoes = nil
	for i := len(undoes) - 1; i >= 0; i-- {
		u := undoes[i]
		if _, err := in.fd.WriteAt(u.old, u.off); err != nil {
			return err
		}
		if st, err := in.fd.Stat(); err == nil && st.Size() > u.size {
			if err := in.fd.Truncate(u.size); err != nil {
				return err
			}
		}
	}
	if !torn || len(undoes) == 0 {
		return nil
	}
	pick := 0
	for i := range undoes {
		a, b := undoes[i], undoes[pick]
		if a.at.Before(b.at) || a.at.Equal(b.at) && nameHash(string(a.new)) < nameHash(string(b.new)) {
			pick = i
		}
	}
	u := undoes[pick]
	_, err := in.fd.WriteAt(u.new[:len(u.new)/2], u.off)
	return err
}
