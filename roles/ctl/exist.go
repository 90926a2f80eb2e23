package ctl

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func existCommand() *cli.Command {
	return &cli.Command{
		Name:      "exist",
		Usage:     "print the stored length of one key (exit 1 if it is not stored)",
		UsageText: "dfkv ctl [options] exist KEY",
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
			stored, err := cl.Exist(c.Context, key)
			if err != nil {
				return fail(c, cfg, key, err)
			}
			out := newOutput(c)
			fmt.Fprintf(out, "%d\n", stored)
			return out.check(c)
		},
	}
}
