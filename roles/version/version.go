// Package version is the `dfkv version` role and the build identity every
// role reports.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// Version and Commit are set at link time
// (-ldflags "-X github.com/dfkv/dfkv/roles/version.Version=…").
var (
	Version = "dev"
	Commit  = ""
)

// CommitID is the commit the binary was built from: Commit when set at
// link time, else the revision the go command stamped from the checkout
// (a plain `go build` in a git clone), else "unknown". Every place that
// reports the build (version, metrics, ctl info) uses it, so they agree.
func CommitID() string {
	if Commit != "" {
		return Commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// String is the one-line build identity.
func String() string {
	return fmt.Sprintf("dfkv %s (commit %s, %s, %s/%s)", Version, CommitID(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// Command is `dfkv version`.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the build version",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("dfkv version: unexpected argument %q", c.Args().First()), 2)
			}
			_, err := fmt.Fprintln(c.App.Writer, String())
			return err
		},
	}
}
