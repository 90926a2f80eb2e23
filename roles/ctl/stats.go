package ctl

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"
)

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:      "stats",
		Usage:     "print every member's statistics as JSON",
		UsageText: "dfkv ctl stats",
		Action: func(c *cli.Context) error {
			cl, _, done, err := open(c)
			if err != nil || done {
				return err
			}
			defer cl.Close()
			failed := 0
			for _, addr := range cl.Members() {
				body, err := cl.Stats(c.Context, addr)
				if err != nil {
					failed++
					fmt.Fprintf(c.App.ErrWriter, "dfkv ctl stats: %s: %v\n", addr, err)
					continue
				}
				var out bytes.Buffer
				if err := json.Indent(&out, body, "", "  "); err != nil {
					out.Write(body)
				}
				fmt.Fprintf(c.App.Writer, "# %s\n%s\n", addr, out.String())
			}
			if failed > 0 {
				return cli.Exit("", exitFailure)
			}
			return nil
		},
	}
}
