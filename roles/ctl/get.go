package ctl

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"

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
			if dst := c.Args().Get(1); dst != "" && dst != "-" {
				if err := writeValue(dst, value); err != nil {
					return cli.Exit(fmt.Sprintf("dfkv ctl get: write %s: %v", dst, err), exitFailure)
				}
				return nil
			}
			if _, err := c.App.Writer.Write(value); err != nil {
				return cli.Exit(fmt.Sprintf("dfkv ctl get: write stdout: %v", err), exitFailure)
			}
			return nil
		},
	}
}

// writeValue writes value to dst as an operator means it. Something that
// is not a regular file (a named pipe, a device such as /dev/null,
// /dev/fd/N from a shell's process substitution) is written into, as a
// shell redirection would. A regular file, or a symlink to one, is
// replaced through the link by a file written next to the target and
// renamed over it, with the target's permissions, so a failed get never
// leaves a truncated file under the asked name. A new file gets 0666
// less the umask.
func writeValue(dst string, value []byte) error {
	fi, err := os.Stat(dst)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		return writeInPlace(dst, value, 0)
	case err == nil:
		if dst, err = filepath.EvalSymlinks(dst); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	tmp, err := createBeside(dst)
	if err != nil && fi != nil && (errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)) {
		// The file may be written where no file may be created: write it
		// in place, as a shell's > would (a failed get may then leave it
		// cut short).
		return writeInPlace(dst, value, os.O_TRUNC)
	}
	if err != nil {
		return fmt.Errorf("cannot create a file in %s: %w", filepath.Dir(dst), errors.Unwrap(err))
	}
	var werr error
	if fi != nil {
		werr = tmp.Chmod(fi.Mode().Perm())
	}
	if werr == nil {
		_, werr = tmp.Write(value)
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), dst)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
	}
	return werr
}

// writeInPlace opens dst for writing (with extra flags) and writes value.
func writeInPlace(dst string, value []byte, flags int) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|flags, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write(value)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
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
