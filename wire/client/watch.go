package client

import "time"

// startWatch starts the stall watchdog; Close stops it.
func (c *Client) startWatch() {
	c.watchStop, c.watchDone = make(chan struct{}), make(chan struct{})
	go c.watch()
}

// watch looks at every node a quarter of stallAfter apart. One that has
// gone silent (peer.silent) with calls that have not moved either
// (peer.standing) is asked whether it is alive (peer.probe, in the
// background). If it does not answer, new calls to it fail at once
// (peer.stalled) and those standing calls are cut (peer.cutSilent), so
// they fail now instead of at their deadlines: an engine whose threads
// all called the node in its first moments (they do: keys spread over the
// nodes) would otherwise have every thread blocked for the Timeout,
// throughput to the healthy nodes included. The cut calls count as one
// failure of the node and open its back-off window, which probes it again
// later.
func (c *Client) watch() {
	defer close(c.watchDone)
	tick := time.NewTicker(stallAfterFor(c.opts.Timeout) / 4)
	defer tick.Stop()
	for {
		select {
		case <-c.watchStop:
			return
		case now := <-tick.C:
			c.peerMu.Lock()
			for _, p := range c.peers {
				// Probe a silent node with calls standing, and keep probing
				// one that left a probe unanswered while calls are in
				// flight: its verdict makes new calls fail fast, and only a
				// later answer lifts it (the calls still in flight may be
				// ones moving a body, which hear nothing).
				_, silent := p.silent(now)
				due := silent && p.standing(now) || p.unanswered.Load() && p.inflight.Load() > 0
				if due && p.probing.CompareAndSwap(false, true) {
					c.probes.Add(1)
					go func(p *peer) {
						defer c.probes.Done()
						defer p.probing.Store(false)
						heard := p.heard.Load()
						if p.probe() {
							return
						}
						// Still silent after the probe (an answer may have come
						// on a call meanwhile): new calls fail fast, standing
						// ones are cut.
						now := time.Now()
						if silent, yes := p.silent(now); yes {
							p.unanswered.Store(true)
							if p.heard.Load() != heard {
								p.unanswered.Store(false) // an answer came as the verdict was given
							}
							p.cutSilent(now, silent)
						}
					}(p)
				}
			}
			c.peerMu.Unlock()
		}
	}
}
