// Package mds is the `dfkv mds` role, the membership directory. It is not
// built yet: the role exists so that scripts and symlinks can name it, and
// says plainly that it is missing.
package mds

import (
	"github.com/urfave/cli/v2"

	"github.com/dfkv/dfkv/roles/internal/rolekit"
)

// Command is `dfkv mds`.
func Command() *cli.Command {
	return &cli.Command{
		Name:            "mds",
		Usage:           "run the membership directory (not implemented yet)",
		SkipFlagParsing: true,
		Action:          rolekit.NotImplemented("mds", "issue 4 (membership)"),
	}
}
