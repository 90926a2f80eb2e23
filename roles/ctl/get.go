package ctl

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
)

func getCommand() *cli.Command {
	return &cli.Command{
		Name:      "get",
		Usage:     "read one value: to FILE, or to stdout when FILE is - or absent",
		UsageText: "dfkv ctl [options] get KEY [FILE|-]",
		Action: func(c *cli.Context) error {
			cl, _, done, err := open(c)
			if err != nil || done {
				return err
			}
			defer cl.Close()
			key, err := keyArg(c, 0)
			if err != nil {
				return err
			}
			value, err := cl.GetAuto(c.Context, key)
			if err != nil {
				return fail("get", err)
			}
			var w io.Writer = c.App.Writer
			if dst := c.Args().Get(1); dst != "" && dst != "-" {
				// Write next to the target and rename, so a failed get
				// never leaves a truncated file under the asked name.
				tmp, err := os.CreateTemp(filepath.Dir(dst), ".dfkv-get-*")
				if err != nil {
					return cli.Exit(fmt.Sprintf("dfkv ctl get: write %s: cannot create a file in %s: %v",
						dst, filepath.Dir(dst), errors.Unwrap(err)), exitFailure)
				}
				// CreateTemp makes the file 0600; the value is an ordinary
				// output file, so give it the usual 0644.
				werr := tmp.Chmod(0o644)
				if werr == nil {
					_, werr = tmp.Write(value)
				}
				cerr := tmp.Close()
				if werr == nil {
					werr = cerr
				}
				if werr == nil {
					werr = os.Rename(tmp.Name(), dst)
				}
				if werr != nil {
					_ = os.Remove(tmp.Name())
					return cli.Exit(fmt.Sprintf("dfkv ctl get: write %s: %v", dst, werr), exitFailure)
				}
				return nil
			}
			if _, err := w.Write(value); err != nil {
				return cli.Exit(fmt.Sprintf("dfkv ctl get: write stdout: %v", err), exitFailure)
			}
			return nil
		},
	}
}
