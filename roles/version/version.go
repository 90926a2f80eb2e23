// Package version is the `dfkv version` role and the build identity every
// role reports.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// Version and Commit are set at link time by scripts/build.sh
// (-ldflags "-X github.com/dfkv/dfkv/roles/version.Version=…").
var (
	Version = "dev"
	Commit  = ""
)

// String is the one-line build identity.
func String() string {
	commit := Commit
	if commit == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					commit = s.Value
				}
			}
		}
	}
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("dfkv %s (commit %s, %s, %s/%s)", Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// Command is `dfkv version`.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the build version",
		Action: func(c *cli.Context) error {
			_, err := fmt.Fprintln(c.App.Writer, String())
			return err
		},
	}
}
