package server

import (
	"errors"
	"io"
	"time"
)

// A connection that holds payload budget while its client does not read
// the response (or does not send the body it announced) keeps that budget
// until the write or body deadline, a minute by default; a few such
// clients can spend the whole budget and make every other client's large
// requests wait that minute and fail UNAVAILABLE. So while a request
// waits for budget, connections blocked on their clients with budget in
// hand for stalledCut or longer are closed, and their budget serves the
// waiting request. Without pressure on the budget nobody is cut: a slow
// client alone only slows itself.

// defaultStalledCut is Options.StalledCut's default: far longer than a
// client that reads at all takes to drain a 4 MiB value, short against
// the write timeout.
const defaultStalledCut = 5 * time.Second

// stalledCutMark in conn.blockedAt says cutStalled closed the connection.
const stalledCutMark = -1

// errStalledCut ends a connection cut while blocked on its client.
var errStalledCut = errors.New("closed: blocked on its client while holding payload budget others waited for")

// blockOnClient marks c as about to block on its client (a response write,
// a body read) if it holds payload budget, so budget pressure may cut it.
// It returns whether it marked; pass that to unblock.
func (c *conn) blockOnClient() bool {
	if c.budget+c.reserved == 0 {
		return false
	}
	c.blockedAt.Store(int64(c.s.opts.Clock.Now().Sub(c.s.epoch)) + 1)
	return true
}

// unblock ends blockOnClient's mark and returns errStalledCut if the
// connection was cut meanwhile, whatever the I/O returned: its deadlines
// are in the past, so it cannot go on.
func (c *conn) unblock(marked bool) error {
	if marked && c.blockedAt.Swap(0) == stalledCutMark {
		return errStalledCut
	}
	return nil
}

// readBody reads a payload the connection holds budget for into dst,
// marked as blocked on the client meanwhile (blockOnClient).
func (c *conn) readBody(dst []byte) error {
	// Replies pending go out first (awaitClient): that write marks and
	// unmarks the connection itself, so the mark below must come after it.
	if err := c.awaitClient(len(dst)); err != nil {
		return err
	}
	marked := c.blockOnClient()
	_, err := io.ReadFull(c.br, dst)
	c.takeScratch()
	if cut := c.unblock(marked); cut != nil {
		return cut
	}
	return err
}

// cutStalled closes the connections that have been blocked on their
// clients with payload budget in hand for at least s.opts.StalledCut, by
// moving their deadlines into the past: their I/O fails, their goroutines
// give the budget back and end. The payload budget calls it while a
// request waits, each waiting request on its own; a scan within
// StalledCut/8 of the last is skipped, since nothing can have crossed
// the line since then that a little later will not still have, and many
// waiters would otherwise walk every connection under s.mu in turn.
func (s *Server) cutStalled() {
	now := int64(s.opts.Clock.Now().Sub(s.epoch)) + 1
	last := s.lastStallScan.Load()
	if last != 0 && time.Duration(now-last) < s.opts.StalledCut/8 || !s.lastStallScan.CompareAndSwap(last, now) {
		return
	}
	past := time.Unix(1, 0)
	type cut struct {
		remote  string
		blocked time.Duration
	}
	var cuts []cut
	s.mu.Lock()
	for c := range s.conns {
		at := c.blockedAt.Load()
		if at <= 0 || time.Duration(now-at) < s.opts.StalledCut || !c.blockedAt.CompareAndSwap(at, stalledCutMark) {
			continue
		}
		_ = c.nc.SetWriteDeadline(past)
		_ = c.nc.SetReadDeadline(past)
		cuts = append(cuts, cut{c.nc.RemoteAddr().String(), time.Duration(now - at)})
	}
	s.mu.Unlock()
	for _, c := range cuts {
		s.stats.stalledCut.Add(1)
		s.stalledCutWarn.Warn(s.log, time.Now(), "closed a connection blocked on its client while others waited for payload buffers",
			"remote", c.remote, "blocked", c.blocked.Round(time.Millisecond).String())
	}
}
