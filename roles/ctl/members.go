package ctl

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dfkv/dfkv/wire"
)

func membersCommand() *cli.Command {
	return &cli.Command{
		Name:      "members",
		Usage:     "list the members the client routes over (from the MDS when --mds is set) and whether each answers",
		UsageText: "dfkv ctl [--mds ADDR | --members ADDR,...] members",
		Action: func(c *cli.Context) error {
			cl, cfg, done, err := open(c)
			if err != nil || done {
				return err
			}
			defer cl.Close()
			src := "static members (client.members)"
			if len(cfg.Client.MDS) > 0 {
				src = fmt.Sprintf("MDS %s, group %s, epoch %d", strings.Join(cfg.Client.MDS, ","), cfg.Group, cl.Epoch())
			}
			out := newOutput(c)
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "# %s\n", src)
			fmt.Fprintln(w, "ID\tADDRESS\tWEIGHT\tCAPACITY\tLAST HEARTBEAT\tPING")
			members := cl.MemberList()
			if len(members) == 0 {
				_ = w.Flush()
				return cli.Exit(fmt.Sprintf("dfkv ctl members: no members: no node is registered with the MDS in group %q (check the nodes' server.mds and group)", cfg.Group), exitFailure)
			}
			down := 0
			for _, m := range members {
				ping := "ok"
				if err := cl.Ping(c.Context, m.Addr); err != nil {
					ping = "FAIL: " + err.Error()
					down++
				}
				hb := lastHeartbeat(m, time.Now())
				capacity := "-"
				if m.CapacityBytes > 0 {
					capacity = fmt.Sprintf("%.1f GiB", float64(m.CapacityBytes)/(1<<30))
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", m.ID, m.Addr, m.Weight, capacity, hb, ping)
			}
			_ = w.Flush()
			for _, m := range members {
				if m.LastHeartbeatUnixMS <= 0 && m.LeaseLive {
					fmt.Fprintln(out, "# lease live: the directory (etcd) keeps no heartbeat times; the node's lease, which its heartbeats through any MDS renew, has not run out")
					break
				}
			}
			if err := out.check(c); err != nil {
				return err
			}
			if down > 0 {
				return cli.Exit(fmt.Sprintf("dfkv ctl members: %d member(s) did not answer", down), exitFailure)
			}
			return nil
		},
	}
}

// lastHeartbeat is the LAST HEARTBEAT column of m: how long ago the
// directory last heard from it, where the directory keeps that (bbolt);
// "lease live" where it holds members on leases and keeps no times
// (etcd); "-" where nothing is known (static members, or an MDS that
// restarted and has not heard from the node yet).
func lastHeartbeat(m wire.MemberInfo, now time.Time) string {
	switch {
	case m.LastHeartbeatUnixMS > 0:
		return now.Sub(time.UnixMilli(m.LastHeartbeatUnixMS)).Round(time.Millisecond).String() + " ago"
	case m.LeaseLive:
		return "lease live"
	}
	return "-"
}
