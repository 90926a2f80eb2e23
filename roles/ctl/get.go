package ctl

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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
			cl, cfg, done, err := open(c)
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
				return fail(c, cfg, key, err)
			}
			var w io.Writer = c.App.Writer
			if dst := c.Args().Get(1); dst != "" && dst != "-" {
				// Write next to the target and rename, so a failed get
				// never leaves a truncated file under the asked name.
				tmp, err := createBeside(dst)
				if err != nil {
					return cli.Exit(fmt.Sprintf("dfkv ctl get: write %s: cannot create a file in %s: %v",
						dst, filepath.Dir(dst), errors.Unwrap(err)), exitFailure)
				}
				_, werr := tmp.Write(value)
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

// createBeside creates a new temporary file in dst's directory with mode
// 0666 less the umask, as any output file (CreateTemp's 0600 ignores the
// umask one way, a chmod to 0644 the other: values can hold data derived
// from prompts, and a umask of 077 must keep them private).
func createBeside(dst string) (*os.File, error) {
	for {
		name := filepath.Join(filepath.Dir(dst), fmt.Sprintf(".dfkv-get-%d", rand.Uint64()))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if !errors.Is(err, os.ErrExist) {
			return f, err
		}
	}
}
