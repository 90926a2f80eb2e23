package ctl

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
)

// output is a verb's stdout that remembers its first write error, so a
// verb whose answer was lost (a full disk, a closed pipe) exits as failed
// rather than 0, or, for exist, 1, which says "not stored".
type output struct {
	w   io.Writer
	err error
}

func newOutput(c *cli.Context) *output { return &output{w: c.App.Writer} }

func (o *output) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	if err != nil {
		o.err = err
	}
	return n, err
}

// check returns the exit for a lost answer, or nil.
func (o *output) check(c *cli.Context) error {
	if o.err != nil {
		return cli.Exit(fmt.Sprintf("dfkv ctl %s: write stdout: %v", c.Command.Name, o.err), exitFailure)
	}
	return nil
}
