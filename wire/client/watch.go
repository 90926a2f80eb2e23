package client

import "time"

// startWatch starts the stall watchdog; Close stops it.
func (c *Client) startWatch() {
	c.watchStop, c.watchDone = make(chan struct{}), make(chan struct{})
	go c.watch()
}

// watch looks at every node a quarter of stallAfter apart and cuts the
// calls in flight to one that has gone silent (peer.silent) that have not
// moved either (peer.cutSilent), so they fail now instead of at their
// deadlines. New calls to a stalled node fail at
// once already; without the cut, the calls that reached it before the
// verdict waited out their whole Timeout, and an engine whose threads all
// called it in the first moments (they do: keys spread over the nodes)
// had every thread blocked for the Timeout, throughput to the healthy
// nodes included. The cut calls count as one failure of the node and open
// its back-off window, which probes it again later.
func (c *Client) watch() {
	defer close(c.watchDone)
	tick := time.NewTicker(max(c.opts.Timeout/4, minStall) / 4)
	defer tick.Stop()
	for {
		select {
		case <-c.watchStop:
			return
		case now := <-tick.C:
			c.peerMu.Lock()
			for _, p := range c.peers {
				if silent, yes := p.silent(now); yes {
					p.cutSilent(now, silent)
				}
			}
			c.peerMu.Unlock()
		}
	}
}
