package ctl

import (
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"
)

func putCommand() *cli.Command {
	return &cli.Command{
		Name:      "put",
		Usage:     "store one value: from FILE, or from stdin when FILE is - or absent",
		UsageText: "dfkv ctl [options] put KEY [FILE|-]",
		Action: func(c *cli.Context) error {
			cl, cfg, done, err := open(c)
			if err != nil || done {
				return err
			}
			defer cl.Close()
			key, err := keyArg(c, 0)
			if err != nil {
				return err
			}
			var r io.Reader = c.App.Reader
			if src := c.Args().Get(1); src != "" && src != "-" {
				f, err := os.Open(src)
				if err != nil {
					return cli.Exit(fmt.Sprintf("dfkv ctl put: %v", err), exitFailure)
				}
				defer f.Close()
				r = f
			}
			if r == nil {
				r = os.Stdin
			}
			// Read at most one byte past the limit, so an oversized input
			// is refused without reading all of it.
			limit := int64(cfg.Server.MaxBlockBytes)
			value, err := io.ReadAll(io.LimitReader(r, limit+1))
			if err != nil {
				return cli.Exit(fmt.Sprintf("dfkv ctl put: read value: %v", err), exitFailure)
			}
			if int64(len(value)) > limit {
				return cli.Exit(fmt.Sprintf("dfkv ctl put: value is larger than max_block_bytes %d", limit), exitFailure)
			}
			if err := cl.Put(c.Context, key, value); err != nil {
				return fail(c, cfg, key, err)
			}
			return nil
		},
	}
}
