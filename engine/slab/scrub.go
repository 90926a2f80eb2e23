package slab

import (
	"context"
	"log/slog"
	"time"
)

// ScrubOptions configures the background scrub, which reads every value
// on the disk, verifies it against its payload checksum and drops (as a
// failed read would) the ones that fail. Reads verify on their own, so the
// scrub adds nothing to what is served; it finds what nobody reads: after
// an unclean stop, records whose payload never reached the disk (Exist
// and exists would report them until then), and values the device rotted,
// whose slots it gives back.
type ScrubOptions struct {
	// BytesPerSecond caps the scrub's reads (slot bytes, so small values
	// count as 4 KiB). 0 turns the scrub off.
	BytesPerSecond uint64
	// Interval is the time from the start of one full pass to the start
	// of the next. 0 runs a pass only after an unclean stop.
	Interval time.Duration
}

// scrubScan bounds the slots one step of the scrub looks at under the
// metadata lock while it searches for the next live value.
const scrubScan = 4096

// scrubAhead is how far ahead of its rate the scrub may run before it
// sleeps, so it does not sleep for every small value.
const scrubAhead = 20 * time.Millisecond

// startScrub starts the scrub goroutine: a first pass at once when the
// last run stopped uncleanly (afterUnclean), then one every Interval.
func (s *Store) startScrub(o ScrubOptions, afterUnclean bool) {
	if o.BytesPerSecond == 0 || o.Interval <= 0 && !afterUnclean {
		return
	}
	s.scrubStop = make(chan struct{})
	s.scrubDone.Go(func() { s.scrubLoop(o, afterUnclean) })
}

// stopScrub stops the scrub and waits for it; Close calls it before it
// waits for the operations in flight.
func (s *Store) stopScrub() {
	if s.scrubStop != nil {
		close(s.scrubStop)
		s.scrubDone.Wait()
	}
}

func (s *Store) scrubLoop(o ScrubOptions, now bool) {
	reason := "unclean stop"
	wait := time.Duration(0)
	if !now {
		reason, wait = "interval", o.Interval
	}
	for {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-s.scrubStop:
				t.Stop()
				return
			case <-t.C:
			}
		}
		start := time.Now()
		if !s.scrubPass(o.BytesPerSecond, reason) || o.Interval <= 0 {
			return
		}
		reason, wait = "interval", max(o.Interval-time.Since(start), 0)
	}
}

// scrubPass verifies every live value once, in slot order, at no more than
// rate bytes a second. It returns false when the store closed, failed or
// the scrub was stopped.
func (s *Store) scrubPass(rate uint64, reason string) bool {
	start := time.Now()
	s.mu.Lock()
	objects := s.alloc.Objects()
	s.mu.Unlock()
	s.log.Info("slab engine: scrub started", "dir", s.dir, "reason", reason, "objects", objects, "bytes_per_second", rate)
	var values, bytes, verified, failed, ioErrs uint64
	end := SlotRef(s.geo.extents * s.geo.maxSlots)
	for cur := SlotRef(0); cur < end; {
		select {
		case <-s.scrubStop:
			return false
		default:
		}
		if s.enter() != nil {
			return false
		}
		s.mu.Lock()
		r, key, length, next, ok := s.alloc.AcquireNext(cur, scrubScan)
		if !ok {
			s.mu.Unlock()
			s.exit()
			cur = next
			continue
		}
		e, sl := s.alloc.Split(r)
		slotOff := s.alloc.Offset(r)
		want := s.sums.get(e, sl)
		s.mu.Unlock()
		sum, err := s.sumValue(e, slotOff, uint64(length), sumSeed(&key, e, sl, length), 0, nil)
		switch {
		case err != nil:
			ioErrs++
			s.ioErrors.Add(1)
		case sum != want:
			failed++
			s.dropCorrupt(key, r, uint64(length), "the scrub")
		}
		s.mu.Lock()
		s.alloc.Release(r)
		s.mu.Unlock()
		s.exit()
		n := alignUp(uint64(length), pageAlign)
		bytes += n      // paced by what it tried to read
		if err == nil { // read and verified (or found corrupt and dropped)
			values++
			verified += n
			s.scrubbed.Add(n)
		}
		cur = r + 1
		if ahead := time.Duration(float64(bytes)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > scrubAhead {
			t := time.NewTimer(ahead)
			select {
			case <-s.scrubStop:
				t.Stop()
				return false
			case <-t.C:
			}
		}
	}
	level := slog.LevelInfo
	if failed > 0 || ioErrs > 0 {
		level = slog.LevelWarn
	}
	s.log.Log(context.Background(), level, "slab engine: scrub finished", "dir", s.dir, "values", values, "bytes", verified,
		"checksum_failures", failed, "read_errors", ioErrs, "took", time.Since(start).Round(time.Millisecond).String())
	s.scrubPasses.Add(1)
	return true
}
