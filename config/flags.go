package config

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// Flags returns the cli flags of role ("server", "mds", "smoke", "bench" or
// "ctl"): one per setting the role takes, plus --config and --print-config.
// The flags have no default values and no EnvVars, so cli's IsSet is true
// only for what the user typed and Load alone layers file, env and defaults;
// help shows the default and env name all the same. A switch's flag may
// stand alone (--fill means --fill=true) or take its value after "="
// (--fill=false); "--fill false" would leave "false" as an argument, as
// with any boolean flag. Each call builds new flags, since cli keeps state
// in them. An unknown role is a bug in the caller and panics.
func Flags(role string) []cli.Flag {
	bit, ok := roleBit(role)
	if !ok {
		panic(fmt.Sprintf("BUG: config.Flags: unknown role %q; valid roles are %s", role, validRoles()))
	}
	var flags []cli.Flag
	for i := range settings {
		s := &settings[i]
		if s.roles&bit == 0 {
			continue
		}
		usage := fmt.Sprintf("%s [$%s; toml %s]", s.help, s.env, s.key)
		var aliases []string
		if s.oldFlag != "" {
			aliases = []string{s.oldFlag}
		}
		switch s.value.(type) {
		case listValue:
			flags = append(flags, &cli.StringSliceFlag{Name: s.flag, Aliases: aliases, Usage: usage, DefaultText: s.def})
		case switchValue, onOffValue:
			flags = append(flags, &cli.GenericFlag{Name: s.flag, Aliases: aliases, Usage: usage, DefaultText: s.def, Value: &switchFlag{}})
		default:
			flags = append(flags, &cli.StringFlag{Name: s.flag, Aliases: aliases, Usage: usage, DefaultText: s.def})
		}
	}
	return append(flags,
		&cli.StringFlag{
			Name:      flagConfig,
			Usage:     "TOML config file; a file named here or in $" + envConfig + " must exist",
			TakesFile: true,
		},
		&cli.BoolFlag{
			Name:  FlagPrintConfig,
			Usage: "print the resolved configuration, with where each value came from, and exit",
		},
	)
}

// switchFlag is the cli value of a switch setting's flag. It is a boolean
// flag to the flag parser, so the flag may stand alone, and it keeps the
// text given (true when alone) for Load to parse like env and file input.
type switchFlag struct{ text string }

func (f *switchFlag) Set(v string) error { f.text = v; return nil }
func (f *switchFlag) String() string     { return f.text }
func (f *switchFlag) IsBoolFlag() bool   { return true }
