// Package ctl is `dfkv ctl`: inspect and edit a cluster by hand. Each verb
// is one file. Keys are given as text (their bytes as typed) or, with
// --key-hex, as hex for binary keys.
//
// Exit status: 0 success; 1 the key was not found (get, exist, rm); 2 or
// more any other failure.
package ctl

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/embed"
	"github.com/dfkv/dfkv/roles/internal/rolekit"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// Exit statuses of ctl verbs.
const (
	exitNotFound = 1
	exitFailure  = 2
)

// Command is `dfkv ctl`.
func Command() *cli.Command {
	flags := append(config.Flags("ctl"),
		&cli.BoolFlag{Name: "key-hex", Usage: "KEY arguments are hex-encoded bytes"},
	)
	for _, f := range flags {
		for _, n := range f.Names() {
			optionNames[n] = true
		}
	}
	return &cli.Command{
		Name:      "ctl",
		Usage:     "inspect and edit a cluster: put, get, exist, rm, stats, members, info",
		UsageText: "dfkv ctl [options] VERB [ARGS]   (options such as --members go before the verb)",
		Flags:     flags,
		Action: func(c *cli.Context) error {
			if _, _, done, err := rolekit.Load(c, "ctl"); err != nil || done {
				return err
			}
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("dfkv ctl: unknown verb %q; valid: put, get, exist, rm, stats, members, info", c.Args().First()), exitFailure)
			}
			_ = cli.ShowSubcommandHelp(c)
			return cli.Exit("dfkv ctl: give a verb: put, get, exist, rm, stats, members, info", exitFailure)
		},
		Subcommands: []*cli.Command{
			putCommand(),
			getCommand(),
			existCommand(),
			rmCommand(),
			statsCommand(),
			membersCommand(),
			infoCommand(),
		},
	}
}

// optionNames are ctl's own option names (Command fills it), to tell an
// option given after the verb from a key that starts with "-".
var optionNames = map[string]bool{}

// maxArgs is how many arguments each verb takes at most.
var maxArgs = map[string]int{"put": 2, "get": 2, "exist": 1, "rm": 1, "stats": 0, "members": 0, "info": 0}

// open checks the verb's argument count, resolves the config (the ctl
// options stand before the verb: the flag parser stops at the verb) and
// opens a client. done reports a --print-config run.
func open(c *cli.Context) (*client.Client, *config.Config, bool, error) {
	for i, a := range c.Args().Slice() {
		// A ctl option after the key reached us as an argument (the flag
		// parser stops at the first argument); a key that merely starts
		// with "-" is a key. The first argument is always the key: an
		// option there is refused by the flag parser, so it got here only
		// after "--" (put -- --config).
		if i == 0 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && optionNames[name] {
			return nil, nil, false, cli.Exit(fmt.Sprintf("dfkv ctl %s: %q after the verb: ctl's options go before it (dfkv ctl %s … %s); usage: %s",
				c.Command.Name, a, a, c.Command.Name, c.Command.UsageText), exitFailure)
		}
	}
	if n, ok := maxArgs[c.Command.Name]; ok && c.NArg() > n {
		return nil, nil, false, cli.Exit(fmt.Sprintf("dfkv ctl %s: unexpected argument %q; usage: %s",
			c.Command.Name, c.Args().Get(n), c.Command.UsageText), exitFailure)
	}
	cfg, res, log, done, err := rolekit.LoadResolved(c, "ctl")
	if err != nil || done {
		return nil, cfg, done, err
	}
	// One command, one answer: a node the client cannot reach is in the
	// verb's own error. A log.level given keeps the client's warnings.
	log = rolekit.ToolLogger(c, "ctl", cfg, res, log)
	if cfg.Client.Embedded == 1 && (c.Command.Name == "put" || c.Command.Name == "rm") {
		// A store kept in this command's RAM alone ends with it: a PUT
		// there would be reported done and be gone at once.
		scfg, err := embed.ServerConfig(c.String("config"), os.LookupEnv, nil)
		if err == nil && len(scfg.Server.Disks) == 0 && scfg.Server.S3Endpoint == "" {
			return nil, nil, false, cli.Exit(fmt.Sprintf("dfkv ctl %s --embedded: the embedded store has no disk (server.disks) and no object store (server.s3_endpoint), so nothing it holds outlives this command; name a disk directory", c.Command.Name), exitFailure)
		}
	}
	cl, err := embed.ToolClient(cfg, c.String("config"), log)
	if err != nil {
		return nil, nil, false, cli.Exit(fmt.Sprintf("dfkv ctl: %v", err), exitFailure)
	}
	return cl, cfg, false, nil
}

// keyArg returns argument i as key bytes.
func keyArg(c *cli.Context, i int) ([]byte, error) {
	if c.NArg() <= i {
		return nil, cli.Exit(fmt.Sprintf("dfkv ctl %s: missing KEY argument; usage: %s", c.Command.Name, c.Command.UsageText), exitFailure)
	}
	s := c.Args().Get(i)
	if c.Bool("key-hex") {
		b, err := hex.DecodeString(s)
		if err != nil {
			return nil, cli.Exit(fmt.Sprintf("dfkv ctl %s: --key-hex: %v", c.Command.Name, err), exitFailure)
		}
		return b, nil
	}
	return []byte(s), nil
}

// fail maps a client error to the ctl exit convention. The client answers
// a read of an unreachable node as a miss (an engine then recomputes); a
// person asking whether a key is stored must learn that the node could not
// be asked, so that is a failure here, not exit 1. A miss names the key
// and the namespace it was looked up in: a key stored under another
// namespace (a --namespace left out) is the usual reason for one.
func fail(c *cli.Context, cfg *config.Config, key []byte, err error) error {
	verb := c.Command.Name
	if errors.Is(err, client.ErrPeerDown) {
		return cli.Exit(fmt.Sprintf("dfkv ctl %s: cannot reach the node, so whether the key is stored is unknown: %v", verb, unreachableCause(err)), exitFailure)
	}
	if wire.StatusOf(err) == wire.StatusNotFound {
		return cli.Exit(fmt.Sprintf("dfkv ctl: %s %s: not found in namespace %s",
			verb, shownKey(key, c.Bool("key-hex")), config.Echo(cfg.Client.Namespace)), exitNotFound)
	}
	return cli.Exit(fmt.Sprintf("dfkv ctl %s: %v", verb, err), exitFailure)
}

// shownKey is a key as the user gave it, for a message: quoted, or with
// --key-hex in hex and marked so; a long one cut as config.Echo cuts.
func shownKey(key []byte, inHex bool) string {
	if !inHex {
		return config.Echo(string(key))
	}
	h := hex.EncodeToString(key)
	if len(key) > 64 {
		return fmt.Sprintf("%s… (hex, %d bytes)", h[:64], len(key))
	}
	return h + " (hex)"
}

// unreachableCause is the connection failure inside the client's error for
// an unreachable node (which joins the miss status, ErrPeerDown and the
// cause, in that order), without the "answered as a miss" wording meant
// for engines.
func unreachableCause(err error) error {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		if errs := joined.Unwrap(); len(errs) > 0 {
			return errs[len(errs)-1]
		}
	}
	return err
}
