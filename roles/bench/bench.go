// Package bench is the `dfkv bench` role, the capacity-planning load
// generator. It is not built yet and says so.
package bench

import (
	"github.com/urfave/cli/v2"

	"github.com/dfkv/dfkv/roles/internal/rolekit"
)

// Command is `dfkv bench`.
func Command() *cli.Command {
	return &cli.Command{
		Name:            "bench",
		Usage:           "load-test a cluster (not implemented yet)",
		SkipFlagParsing: true,
		Action:          rolekit.NotImplemented("bench", "issue 5 (operating dfkv)"),
	}
}
