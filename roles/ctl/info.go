package ctl

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/server"
)

// nodeStats is the STATS reply of a node.
type nodeStats = server.StatsReply

// fetchStats asks every member for STATS and hands each decoded reply to
// fn; it returns how many members failed.
func fetchStats(c *cli.Context, fn func(addr string, raw []byte, st *nodeStats)) (int, error) {
	cl, cfg, done, err := open(c)
	if err != nil || done {
		return 0, err
	}
	defer cl.Close()
	members := cl.Members()
	if len(members) == 0 {
		// As for members: an empty group (a mistyped --group, or every
		// node gone) is not a healthy cluster with nothing to report.
		return 0, cli.Exit(fmt.Sprintf("dfkv ctl %s: no members: no node is registered with the MDS in group %q (check the nodes' server.mds and group)", c.Command.Name, cfg.Group), exitFailure)
	}
	failed := 0
	for _, addr := range members {
		raw, err := cl.Stats(c.Context, addr)
		if err != nil {
			failed++
			fmt.Fprintf(c.App.ErrWriter, "dfkv ctl: %s: %v\n", addr, err)
			continue
		}
		var st nodeStats
		if err := json.Unmarshal(raw, &st); err != nil {
			failed++
			fmt.Fprintf(c.App.ErrWriter, "dfkv ctl: %s: unreadable STATS reply: %v\n", addr, err)
			continue
		}
		fn(addr, raw, &st)
	}
	return failed, nil
}

func infoCommand() *cli.Command {
	return &cli.Command{
		Name:      "info",
		Usage:     "print each member's build, CPU, engine, disks, capacity and configuration sources",
		UsageText: "dfkv ctl [options] info",
		Action: func(c *cli.Context) error {
			w := newOutput(c)
			failed, err := fetchStats(c, func(addr string, _ []byte, st *nodeStats) { writeInfo(w, addr, st) })
			if err != nil {
				return err
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

func writeInfo(w io.Writer, addr string, st *nodeStats) {
	in := st.Info
	fmt.Fprintf(w, "node %s (%s)\n", in.ID, addr)
	fmt.Fprintf(w, "  build      dfkv %s, commit %s, %s, %s\n", in.Version, orDash(in.Commit), in.GoVersion, in.OS)
	if in.StartedUnixMS > 0 {
		fmt.Fprintf(w, "  up         %s\n", time.Since(time.UnixMilli(in.StartedUnixMS)).Round(time.Second))
	}
	fmt.Fprintf(w, "  cpu        %s, %d CPUs\n", orDash(in.CPU), in.CPUs)
	fmt.Fprintf(w, "  features   %s\n", strings.Join(in.CPUFeatures, " "))
	fmt.Fprintf(w, "  group      %s; membership %s\n", in.Group, membership(in.MDS))
	if st.Scope == "tenants" {
		fmt.Fprintf(w, "  engine     %s; usage withheld (this credential's stats right names tenants, not \"*\")\n", in.Engine)
	} else {
		fmt.Fprintf(w, "  engine     %s; %d objects, %s of %s used\n", in.Engine, st.Engine.Objects, config.HumanSize(st.Engine.UsedBytes), config.HumanSize(st.Engine.CapacityBytes))
	}
	for _, d := range st.Disks {
		health := "healthy"
		if !d.Healthy {
			health = "FAILED CLOSED"
		}
		io := "O_DIRECT"
		if !d.DirectIO {
			io = "buffered I/O"
		}
		fmt.Fprintf(w, "  disk       %s: %s, %s of %s, %d objects, %s, %s\n", d.Path, d.Engine, config.HumanSize(d.UsedBytes), config.HumanSize(d.CapacityBytes), d.Objects, io, health)
	}
	if o := st.ObjectStore; o != nil {
		state := "reachable"
		if !o.Reachable {
			state = "UNREACHABLE"
		}
		fmt.Fprintf(w, "  objects    %s, %s; write %s, exist %s\n", o.Bucket, state, o.Write, o.Exist)
	}
	if in.ConfigFile != "" {
		fmt.Fprintf(w, "  config     %s\n", in.ConfigFile)
	}
	for _, l := range in.ConfigSources {
		fmt.Fprintf(w, "  setting    %s\n", l)
	}
}

func membership(mds []string) string {
	if len(mds) == 0 {
		return "static"
	}
	return "MDS " + strings.Join(mds, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
