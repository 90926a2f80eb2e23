// Command dfkv is the one binary of dfkv, a KV-cache store for LLM
// inference. It runs a role chosen by subcommand (`dfkv server`) or by the
// name it was invoked under (a symlink `dfkv-server` runs the server).
// This file only dispatches; each role lives in its own package under
// roles/.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/bench"
	"github.com/dfkv/dfkv/roles/ctl"
	"github.com/dfkv/dfkv/roles/mds"
	"github.com/dfkv/dfkv/roles/server"
	"github.com/dfkv/dfkv/roles/smoke"
	"github.com/dfkv/dfkv/roles/version"
)

// aliases maps the names dfkv may be invoked under to the role they run.
var aliases = map[string]string{
	"dfkv-server": "server", "dfkv_server": "server",
	"dfkv-mds": "mds", "dfkv_mds": "mds",
	"dfkv-bench": "bench", "dfkv_bench": "bench",
	"dfkv-smoke": "smoke", "dfkv_smoke": "smoke",
	"dfkv-ctl": "ctl", "dfkv_ctl": "ctl", "dfkvctl": "ctl",
	"dfkv-version": "version", "dfkv_version": "version",
}

// roleNames are the roles a first argument may name.
var roleNames = map[string]bool{"server": true, "mds": true, "smoke": true, "bench": true, "ctl": true, "version": true,
	"help": true, "--help": true, "-h": true, "--version": true, "-v": true}

func main() { os.Exit(run(os.Args, os.Stdout, os.Stderr)) }

// run dispatches args (args[0] is the invoked name) and returns the exit
// status. It is main without the process, so tests call it directly.
func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	argv, err := dispatch(args)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	status := 0
	unknown := app.CommandNotFound
	app.CommandNotFound = func(c *cli.Context, name string) {
		unknown(c, name)
		status = 2 // cli.Exit from here is not seen (dfkv help nosuch)
	}
	app.ExitErrHandler = func(c *cli.Context, err error) {
		if err == nil {
			return
		}
		if ec, ok := err.(cli.ExitCoder); ok {
			if msg := ec.Error(); msg != "" {
				fmt.Fprintln(stderr, msg)
			}
			status = ec.ExitCode()
			return
		}
		fmt.Fprintln(stderr, "dfkv:", err)
		status = 1
	}
	if err := app.Run(argv); err != nil && status == 0 {
		fmt.Fprintln(stderr, "dfkv:", err)
		status = 2
	}
	return status
}

// dispatch rewrites a symlink invocation (`dfkv-server --listen …`) into
// the subcommand form (`dfkv server --listen …`) so both go through one
// parser. A name that looks like a dfkv alias but is not one is an error
// that lists the valid names.
func dispatch(args []string) ([]string, error) {
	if len(args) == 0 {
		return []string{"dfkv"}, nil
	}
	name := filepath.Base(args[0])
	if role, ok := aliases[name]; ok {
		return append([]string{"dfkv", role}, args[1:]...), nil
	}
	if len(args) > 1 && (roleNames[args[1]] || !strings.HasPrefix(args[1], "-") && !nearAlias(name)) {
		// A binary named otherwise (dfkv-linux-amd64, dfkv-1.4) run
		// as `NAME server …`: the subcommand form, whose parser names a
		// mistyped role and lists the valid ones. A name a typo away
		// from an alias (dfkv-clt) is a mistyped link: its name is blamed.
		return append([]string{"dfkv"}, args[1:]...), nil
	}
	if strings.HasPrefix(name, "dfkv-") || strings.HasPrefix(name, "dfkv_") {
		return nil, fmt.Errorf("dfkv: unknown role name %q; invoke dfkv as one of: dfkv, %s",
			name, strings.Join(aliasNames(), ", "))
	}
	return append([]string{"dfkv"}, args[1:]...), nil
}

// nearAlias reports whether name is within two edits of an alias: a
// link made with a typo rather than a binary renamed on purpose.
func nearAlias(name string) bool { return config.Closest(name, aliasNames()) != "" }

func aliasNames() []string {
	names := make([]string, 0, len(aliases))
	for n := range aliases {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func newApp(stdout, stderr io.Writer) *cli.App {
	cmds := []*cli.Command{
		server.Command(),
		mds.Command(),
		smoke.Command(),
		bench.Command(),
		ctl.Command(),
		version.Command(),
	}
	roles := make([]string, len(cmds))
	for i, c := range cmds {
		roles[i] = c.Name
	}
	// `dfkv --version` prints what `dfkv version` prints.
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, version.String()) }
	// A mistyped flag gets one line naming it the way it was typed, a
	// suggestion and where the full help is, not the whole help text.
	for _, c := range cmds {
		setUsageError(c, nil, "dfkv "+c.Name)
	}
	return &cli.App{
		Name:    "dfkv",
		Version: version.Version,
		Suggest: true,
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return cli.Exit("dfkv: "+flagError(err)+" (dfkv --help lists the roles; each role's flags come after it)", 2)
		},
		Usage:     "a KV-cache store for LLM inference",
		UsageText: "dfkv ROLE [options]   (or invoke through a symlink such as dfkv-server)",
		Description: "Roles: server (cache node), mds (membership directory), smoke (end-to-end check),\n" +
			"bench (load generator), ctl (inspect and edit a cluster), version.\n" +
			"Every role reads the same configuration: defaults < --config FILE < DFKV_* env < flags.\n\n" +
			"Exit status, the same whichever layer a problem came from:\n" +
			"  0  success\n" +
			"  1  the work failed: a node or MDS could not start or stopped on an error, a smoke\n" +
			"     check or bench operation failed, ctl's key was not found\n" +
			"  2  usage or configuration: an unknown role, flag, setting or TOML key, a bad value\n" +
			"     from a flag, DFKV_* or the file, settings that cannot work together; ctl: a\n" +
			"     node or MDS could not be reached, so whether the key is stored is unknown",
		Commands:  cmds,
		Writer:    stdout,
		ErrWriter: stderr,
		CommandNotFound: func(c *cli.Context, name string) {
			fmt.Fprintf(c.App.ErrWriter, "dfkv: unknown role %q; valid roles: %s\n", name, strings.Join(roles, ", "))
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("dfkv: unknown role %q; valid roles: %s", c.Args().First(), strings.Join(roles, ", ")), 2)
			}
			_ = cli.ShowAppHelp(c)
			return cli.Exit("", 2)
		},
	}
}

// setUsageError makes c and its subcommands answer a usage error (an
// unknown flag, a flag without its value) with one line and exit 2. parent
// is the command c is a verb of (ctl), whose options go before the verb.
func setUsageError(c, parent *cli.Command, name string) {
	c.OnUsageError = func(ctx *cli.Context, err error, _ bool) error {
		msg := flagError(err)
		if typed := unknownFlag(err); typed != "" && parent != nil && hasFlag(parent, typed) {
			msg += fmt.Sprintf("; it is an option of dfkv %s: give it before the verb (dfkv %s --%s … %s)", parent.Name, parent.Name, typed, c.Name)
		} else if s := suggestFlag(ctx, err); s != "" {
			msg += "; did you mean --" + s + "?"
		}
		return cli.Exit(fmt.Sprintf("%s: %s (dfkv %s --help lists the flags)", name, msg, strings.TrimPrefix(name, "dfkv ")), 2)
	}
	for _, sub := range c.Subcommands {
		setUsageError(sub, c, name+" "+sub.Name)
	}
}

// flagError is a flag parser's error with the flag spelled as dfkv's help
// and README spell flags (--name; Go's flag package writes -name).
func flagError(err error) string {
	msg := strings.Replace(err.Error(), "defined: -", "defined: --", 1)
	return strings.Replace(msg, "needs an argument: -", "needs an argument: --", 1)
}

// unknownFlag is the flag name in an "flag provided but not defined"
// error, without dashes, or "".
func unknownFlag(err error) string {
	const prefix = "flag provided but not defined: -"
	msg := err.Error()
	i := strings.Index(msg, prefix)
	if i < 0 {
		return ""
	}
	return strings.TrimLeft(msg[i+len(prefix):], "-")
}

func hasFlag(c *cli.Command, name string) bool {
	for _, f := range c.Flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

// suggestFlag is the defined flag closest to the unknown one in err, or "".
func suggestFlag(ctx *cli.Context, err error) string {
	typed := unknownFlag(err)
	if len(typed) < 3 || ctx.Command == nil {
		return "" // "-k" is two edits from every one-letter alias
	}
	var names []string
	for _, f := range ctx.Command.Flags {
		names = append(names, f.Names()...)
	}
	return config.Closest(typed, names)
}
