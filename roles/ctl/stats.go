package ctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/server"
	"github.com/urfave/cli/v2"
)

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:      "stats",
		Usage:     "summarise every member's counters (--json for the raw documents)",
		UsageText: "dfkv ctl [options] stats [--json]",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json",
			Usage: `print one JSON array of {"node": address, "stats": its STATS document}, one element per member that answered`}},
		Action: func(c *cli.Context) error {
			asJSON := c.Bool("json")
			type nodeDoc struct {
				Node  string          `json:"node"`
				Stats json.RawMessage `json:"stats"`
			}
			docs := []nodeDoc{}
			w := newOutput(c)
			failed, err := fetchStats(c, func(addr string, raw []byte, st *nodeStats) {
				if asJSON {
					docs = append(docs, nodeDoc{Node: addr, Stats: bytes.Clone(raw)})
					return
				}
				writeStats(w, addr, st)
			})
			if err != nil {
				return err
			}
			if asJSON {
				out, err := json.MarshalIndent(docs, "", "  ")
				if err != nil {
					return cli.Exit(fmt.Sprintf("dfkv ctl stats: a node's STATS document is not JSON: %v", err), exitFailure)
				}
				fmt.Fprintf(w, "%s\n", out)
			}
			if err := w.check(c); err != nil {
				return err
			}
			if failed > 0 {
				return cli.Exit("", exitFailure)
			}
			return nil
		},
	}
}

func writeStats(w io.Writer, addr string, st *nodeStats) {
	e := st.Engine
	fmt.Fprintf(w, "node %s (%s)\n", orDash(st.Info.ID), addr)
	if st.Scope == "tenants" {
		fmt.Fprintln(w, "  scope        the tenants this credential may stats; node-wide figures need stats on \"*\"")
		writeTenants(w, st.Tenants)
		return
	}
	pct := 0.0
	if e.CapacityBytes > 0 {
		pct = 100 * float64(e.UsedBytes) / float64(e.CapacityBytes)
	}
	fmt.Fprintf(w, "  stored       %d objects, %s of %s (%.1f%%)\n", e.Objects, config.HumanSize(e.UsedBytes), config.HumanSize(e.CapacityBytes), pct)
	reads := e.Hits + e.Misses
	hit := 0.0
	if reads > 0 {
		hit = 100 * float64(e.Hits) / float64(reads)
	}
	fmt.Fprintf(w, "  reads        %d (%.1f%% hits), %d puts, %d removes, %d evictions, %d I/O errors\n", reads, hit, e.Puts, e.Removes, e.Evictions, e.IOErrors)
	if e.ChecksumFailures > 0 {
		fmt.Fprintf(w, "  corruption   %d values failed their checksum on read or scrub (dropped, never served): check the disks\n", e.ChecksumFailures)
	}
	if e.ScrubbedBytes > 0 {
		fmt.Fprintf(w, "  scrub        %s verified, %d full passes\n", config.HumanSize(e.ScrubbedBytes), e.ScrubPasses)
	}
	if e.SectionTables > 0 {
		fmt.Fprintf(w, "  ranges       %d read by their sections, %d read whole first, %d sent back to the whole-value check\n", e.SectionReads, e.SectionTables, e.SectionMisses)
	}
	if e.ExtentMoves > 0 {
		fmt.Fprintf(w, "  extents      %d moved to another value size (each evicts what it held)\n", e.ExtentMoves)
	}
	s := st.Server
	fmt.Fprintf(w, "  traffic      %s in, %s out; %d open connections (%d accepted, %d refused)\n", config.HumanSize(s.BytesIn), config.HumanSize(s.BytesOut), s.OpenConns, s.Accepted, s.Refused)
	fmt.Fprintf(w, "  refusals     %d malformed frames, %d first-request timeouts\n", s.FrameErrors, s.FirstReqTimeouts)
	if a := st.Auth; a.Required {
		fmt.Fprintf(w, "  auth         tokens required (%d credentials); %d accepted, failed %v, forbidden %v\n", a.Credentials, a.Accepted, sortedCounts(a.Failures), sortedCounts(a.Forbidden))
	} else {
		fmt.Fprintf(w, "  auth         open: any client may address every tenant\n")
	}
	ops := make([]string, 0, len(s.Ops))
	for op, n := range s.Ops {
		if n > 0 {
			ops = append(ops, fmt.Sprintf("%s %d", op, n))
		}
	}
	sort.Strings(ops)
	fmt.Fprintf(w, "  requests     %v\n", ops)
	if r := st.RAM; r != nil {
		used := r.ArenaUsedBytes + r.LargeUsedBytes
		ramReads := r.Hits + r.Misses
		ramHit := 0.0
		if ramReads > 0 {
			ramHit = 100 * float64(r.Hits) / float64(ramReads)
		}
		fmt.Fprintf(w, "  ram tier     %d objects, %s of %s in use; %d reads (%.1f%% hits), %d evictions\n",
			r.Objects, config.HumanSize(used), config.HumanSize(r.BudgetBytes), ramReads, ramHit, r.Evictions)
		fmt.Fprintf(w, "  ram flush    %s dirty in %d values, %d queued, %d flushed, %d dropped; %d workers on %d queues, %d shards\n",
			config.HumanSize(r.DirtyBytes), r.DirtyObjects, r.FlushBacklog, r.Flushed, r.FlushDropped, r.FlushThreads, r.FlushQueues, r.Shards)
		fmt.Fprintf(w, "  ram puts     %d admitted, %d unchanged, %d straight to disk; %d flushes skipped (rewritten or removed first), flush delay %v\n",
			r.Puts, r.PutsUnchanged, r.PutBypass, r.FlushSkipped, time.Duration(r.FlushDelayMS)*time.Millisecond)
		if !r.Healthy {
			fmt.Fprintln(w, "  WARNING      the RAM tier dropped a value after every flush retry; see the node's log")
		}
	}
	writeTenants(w, st.Tenants)
	if o := st.ObjectStore; o != nil {
		state := "reachable"
		if !o.Reachable {
			state = "UNREACHABLE (serving from RAM and disk; see the node's log)"
		}
		fmt.Fprintf(w, "  object store %s, %s; write %s, exist %s; %d outages\n", o.Bucket, state, o.Write, o.Exist, o.Outages)
		fmt.Fprintf(w, "  s3 reads     %d read through (%d from the upload queue), %d not there, %d promoted to disk, %d objects ignored (checksum, key or layout)\n",
			o.ReadThroughHits, o.QueueHits, o.ReadThroughMisses, o.Promoted, o.Ignored)
		fmt.Fprintf(w, "  s3 uploads   %d done, %d queued (%s), %d dropped (queue full), %d failed; %d deletes pending; %s read, %s written\n",
			o.Uploaded, o.QueueItems, config.HumanSize(uint64(o.QueueBytes)), o.UploadDrops, o.UploadFailed, o.PendingDeletes,
			config.HumanSize(o.BytesRead), config.HumanSize(o.BytesWritten))
	}
	if !e.Healthy {
		fmt.Fprintln(w, "  WARNING      a storage engine failed closed; see the node's log")
	}
}

// sortedCounts shows a map of counts as "name n" pairs in name order.
func sortedCounts(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for k, n := range m {
		out = append(out, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(out)
	return out
}

func writeTenants(w io.Writer, tenants []server.TenantUsage) {
	for _, t := range tenants {
		quota := "no quota"
		if t.QuotaBytes > 0 {
			quota = fmt.Sprintf("%.0f%% of its %s quota", 100*float64(t.UsedBytes)/float64(t.QuotaBytes), config.HumanSize(t.QuotaBytes))
		}
		fmt.Fprintf(w, "  tenant       %s holds %s (%s)\n", t.Tenant, config.HumanSize(uint64(max(t.UsedBytes, 0))), quota)
	}
}
