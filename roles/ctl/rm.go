package ctl

import "github.com/urfave/cli/v2"

func rmCommand() *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Usage:     "remove one key (exit 1 if it was not stored)",
		UsageText: "dfkv ctl [options] rm KEY",
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
			if err := cl.Remove(c.Context, key); err != nil {
				return fail(c, cfg, key, err)
			}
			return nil
		},
	}
}
