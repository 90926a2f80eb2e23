package objtier

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// MarksFileName is the file, beside a node's first disk, that keeps the
// keys whose objects must not be read (see marksFile).
const MarksFileName = "s3_marks.db"

// marksBucket is the one bbolt bucket of a marks file: a key per marked
// block (tenant, big-endian, then object id), no value.
var marksBucket = []byte("marks/v1")

// marksFile keeps the tier's marks on disk, so that what they protect
// outlives the process: a REMOVE whose delete could not be made (the
// bucket was unreachable) stays removed across a restart, and a key whose
// bucket object is older than its disk value (a dropped upload) is not
// read back from the bucket after one.
//
// Changes are written by one goroutine, many to a transaction. A REMOVE
// whose delete failed waits for the transaction holding its mark
// (durable, one fsync shared by every REMOVE waiting then); other
// changes (a dropped upload's mark, the end of a mark) are written with
// the next transaction, without making their caller wait: a PUT is not
// held up by a disk sync. A crash can lose such a change, as it loses an
// upload still queued: the lost end of a mark costs a cache copy (the
// object is deleted again); a lost mark of a dropped upload lets the
// bucket's older value of that key be read once the disk no longer holds
// the newer one, the exposure an async upload has until it lands.
type marksFile struct {
	path string
	file *os.File // bbolt's, for engine.NoteLock
	db   *bolt.DB
	log  *slog.Logger

	mu      sync.Mutex
	changes map[wire.BlockKey]bool // true: mark; false: unmark. Not yet written.
	waiters []chan error
	broken  error // the last write's error, reported once
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

// openMarks opens (creating) the marks file at path and returns the keys
// it holds.
func openMarks(path string, log *slog.Logger) (m *marksFile, keys []wire.BlockKey, err error) {
	var db *bolt.DB
	defer func() {
		// bbolt panics on some corrupt pages rather than returning an error.
		if r := recover(); r != nil {
			if db != nil {
				_ = db.Close()
			}
			m, keys, err = nil, nil, fmt.Errorf("object store tier: marks file %s is corrupt (%v); %s", path, r, marksAdvice)
		}
	}()
	var file *os.File
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second,
		OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, mode)
			file = f
			return f, err
		}})
	if err != nil {
		return nil, nil, fmt.Errorf("object store tier: open marks file %s: %w; is another dfkv process using this disk? (%s)", path, err, marksAdvice)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(marksBucket)
		if err != nil {
			return err
		}
		return b.ForEach(func(k, _ []byte) error {
			key, ok := decodeMarkKey(k)
			if !ok {
				return fmt.Errorf("a key of %d bytes, not 24", len(k))
			}
			keys = append(keys, key)
			return nil
		})
	})
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("object store tier: marks file %s is unreadable: %w; %s", path, err, marksAdvice)
	}
	// bbolt holds a flock on the file: a child forked without exec must
	// not keep it after this process closes the store.
	engine.NoteLock(file.Fd(), true)
	m = &marksFile{path: path, file: file, db: db, log: log, changes: map[wire.BlockKey]bool{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go m.writer()
	return m, keys, nil
}

// marksAdvice says what an operator can do about a marks file the node
// cannot use.
const marksAdvice = "moving it away lets the node start, but blocks removed while the object store was unreachable may then be read back from it"

func encodeMarkKey(k wire.BlockKey) []byte {
	b := make([]byte, 24)
	for i := range 8 {
		b[i] = byte(k.Tenant >> (56 - 8*i))
	}
	copy(b[8:], k.ID[:])
	return b
}

func decodeMarkKey(b []byte) (wire.BlockKey, bool) {
	var k wire.BlockKey
	if len(b) != 24 {
		return k, false
	}
	for i := range 8 {
		k.Tenant = k.Tenant<<8 | uint64(b[i])
	}
	copy(k.ID[:], b[8:])
	return k, true
}

// note records a change to key's mark, written with the next
// transaction. Callers note under the lock that orders the key's marks
// in memory, so the file sees a key's changes in the same order.
func (m *marksFile) note(key wire.BlockKey, marked bool) {
	m.mu.Lock()
	m.changes[key] = marked
	m.mu.Unlock()
	m.wake()
}

// sync waits until every change noted before it is on disk.
func (m *marksFile) sync() error {
	ch := make(chan error, 1)
	m.mu.Lock()
	m.waiters = append(m.waiters, ch)
	m.mu.Unlock()
	m.wake()
	select {
	case err := <-ch:
		return err
	case <-m.done:
		return errors.New("object store tier closed before the mark was written")
	}
}

func (m *marksFile) wake() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// writer writes the changes noted since its last transaction, one
// transaction at a time, until close.
// A write that failed is tried again each second.
func (m *marksFile) writer() {
	defer close(m.done)
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	for {
		select {
		case <-m.kick:
		case <-retry.C:
		case <-m.stop:
			m.flush()
			return
		}
		m.flush()
	}
}

func (m *marksFile) flush() {
	m.mu.Lock()
	changes, waiters := m.changes, m.waiters
	if len(changes) == 0 && len(waiters) == 0 {
		m.mu.Unlock()
		return
	}
	m.changes, m.waiters = make(map[wire.BlockKey]bool, len(changes)), nil
	m.mu.Unlock()
	err := m.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(marksBucket)
		for k, marked := range changes {
			var err error
			if marked {
				err = b.Put(encodeMarkKey(k), nil)
			} else {
				err = b.Delete(encodeMarkKey(k))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("write object store marks file %s: %w", m.path, err)
	}
	m.mu.Lock()
	if err != nil {
		// Keep the changes for the next try, unless newer ones replaced them.
		for k, marked := range changes {
			if _, newer := m.changes[k]; !newer {
				m.changes[k] = marked
			}
		}
		if m.broken == nil {
			m.log.Error("object store tier: cannot write its marks file; removals made while the object store is unreachable fail until it can",
				"file", m.path, "err", err)
		}
	} else if m.broken != nil {
		m.log.Info("object store tier: marks file writable again", "file", m.path)
	}
	m.broken = err
	m.mu.Unlock()
	for _, ch := range waiters {
		ch <- err
	}
}

// close writes what is noted and closes the file.
func (m *marksFile) close() error {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	err := m.broken
	m.mu.Unlock()
	engine.NoteLock(m.file.Fd(), false) // before the number can be reused
	if cerr := m.db.Close(); err == nil {
		err = cerr
	}
	return err
}
