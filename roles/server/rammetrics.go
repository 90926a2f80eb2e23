package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dfkv/dfkv/engine/ramtier"
)

// ramCollector exports the RAM tier's counters; it is registered only when
// the tier is on, so a node without it exports no dfkv_ram_* series at all.
type ramCollector struct{ tier *ramtier.Tier }

func ramDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("dfkv_ram_"+name, help, nil, nil)
}

var (
	descRAMHit          = ramDesc("hit_total", "GETs answered from RAM.")
	descRAMMiss         = ramDesc("miss_total", "GETs RAM could not answer.")
	descRAMPut          = ramDesc("put_total", "PUTs admitted into RAM.")
	descRAMPutSame      = ramDesc("put_unchanged_total", "PUTs of bytes RAM already held durably: nothing admitted or written.")
	descRAMPutJoined    = ramDesc("put_joined_total", "PUTs of bytes a pending flush already held: they share its disk write.")
	descRAMPutBypass    = ramDesc("put_bypass_total", "Write-back PUTs that took the synchronous disk path: no RAM for them, or a tenant with a quota.")
	descRAMFlushed      = ramDesc("flushed_total", "Values flushed from RAM to disk.")
	descRAMFlushDropped = ramDesc("flush_dropped_total", "Flushes given up after every retry.")
	descRAMFlushSkipped = ramDesc("flush_skipped_total", "Values rewritten or removed before their flush started: disk writes saved.")
	descRAMFlushDelay   = ramDesc("flush_delay_seconds", "How long a write-back value waits before its flush (server.ram_flush_delay_ms as in force).")
	descRAMEvictions    = ramDesc("evictions_total", "Durable values dropped from RAM (still on disk).")
	descRAMHealthy      = ramDesc("healthy", "1 while the tier flushes; 0 after a flush failed for good.")
	descRAMThreads      = ramDesc("flush_threads", "Flush workers.")
	descRAMObjects      = ramDesc("objects", "Values resident in RAM.")
	descRAMDirty        = ramDesc("dirty_bytes", "Bytes admitted and not yet flushed.")
	descRAMBacklog      = ramDesc("flush_backlog", "Queued flushes.")
	descRAMBudget       = ramDesc("budget_bytes", "Total RAM tier budget (arena and large-value reserve).")
	descRAMArena        = ramDesc("arena_bytes", "Arena size.")
	descRAMLarge        = ramDesc("large_reserve_bytes", "Budget for values larger than an extent.")
	descRAMArenaUsed    = ramDesc("arena_used_bytes", "Value bytes resident in the arena.")
	descRAMLargeUsed    = ramDesc("large_used_bytes", "Bytes of dedicated large-value allocations.")
	descRAMArenaWarm    = ramDesc("arena_warm_bytes", "Arena bytes faulted in so far; the node serves while the rest warms in the background.")
)

func (c *ramCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRAMHit, descRAMMiss, descRAMPut, descRAMPutSame, descRAMPutJoined, descRAMPutBypass, descRAMFlushed,
		descRAMFlushDropped, descRAMFlushSkipped, descRAMFlushDelay, descRAMEvictions, descRAMHealthy, descRAMThreads, descRAMObjects, descRAMDirty,
		descRAMBacklog, descRAMBudget, descRAMArena, descRAMLarge, descRAMArenaUsed, descRAMLargeUsed, descRAMArenaWarm} {
		ch <- d
	}
}

func (c *ramCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.tier.RAM()
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter(descRAMHit, r.Hits)
	counter(descRAMMiss, r.Misses)
	counter(descRAMPut, r.Puts)
	counter(descRAMPutSame, r.PutsUnchanged)
	counter(descRAMPutJoined, r.PutsJoined)
	counter(descRAMPutBypass, r.PutBypass)
	counter(descRAMFlushed, r.Flushed)
	counter(descRAMFlushDropped, r.FlushDropped)
	counter(descRAMFlushSkipped, r.FlushSkipped)
	gauge(descRAMFlushDelay, float64(r.FlushDelayMS)/1000)
	counter(descRAMEvictions, r.Evictions)
	healthy := 0.0
	if r.Healthy {
		healthy = 1
	}
	gauge(descRAMHealthy, healthy)
	gauge(descRAMThreads, float64(r.FlushThreads))
	gauge(descRAMObjects, float64(r.Objects))
	gauge(descRAMDirty, float64(r.DirtyBytes))
	gauge(descRAMBacklog, float64(r.FlushBacklog))
	gauge(descRAMBudget, float64(r.BudgetBytes))
	gauge(descRAMArena, float64(r.ArenaBytes))
	gauge(descRAMLarge, float64(r.LargeReserveBytes))
	gauge(descRAMArenaUsed, float64(r.ArenaUsedBytes))
	gauge(descRAMLargeUsed, float64(r.LargeUsedBytes))
	gauge(descRAMArenaWarm, float64(r.ArenaWarmBytes))
}
