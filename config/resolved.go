package config

import (
	"bufio"
	"fmt"
	"io"
)

// Resolved remembers where each of a role's settings got its value, so
// --print-config can show an operator not just what a process runs with but
// which layer to change (pebble's Options.String, VictoriaMetrics WriteFlags).
type Resolved struct {
	role     string
	file     string // "" = no file
	fileFrom string // "--config" or "DFKV_CONFIG"
	values   []resolvedValue
	warnings []string
	cfg      *Config           // a copy, so the role changing its Config does not change the printout
	auto     map[string]string // key → what its automatic value resolves to (SetAuto)
}

// SetAuto records what the automatic value of key (a setting left at 0 or
// "auto") resolves to, as the role would choose it now, so --print-config
// shows "auto (= …)" instead of a bare 0 that means something else. A key
// set to a value of its own prints no note.
func (r *Resolved) SetAuto(key, resolved string) {
	if r.auto == nil {
		r.auto = map[string]string{}
	}
	r.auto[key] = resolved
}

// FromDefault reports whether key (e.g. "server.disks") kept its
// default: no file, variable or flag set it. An embedder uses it to pick
// defaults of its own for what the user left alone.
func (r *Resolved) FromDefault(key string) bool {
	for _, v := range r.values {
		if v.s.key == key {
			return v.src.kind == fromDefault
		}
	}
	return false
}

// Layer is where a setting's value came from. The layers apply in this
// order, each overriding the ones before it.
type Layer int

const (
	LayerDefault Layer = iota // no file, variable or flag set it
	LayerFile                 // the TOML file
	LayerEnv                  // a DFKV_* variable
	LayerFlag                 // a flag on the command line
)

// Origin is where one setting got its value. A role whose checks involve
// more than one setting reads it to tell what the user gave, and where,
// from what was left alone: a flag typed for this run is a choice about
// it, a variable or a file shared by every tool may not be.
type Origin struct {
	Key   string // TOML key, "client.tls"
	Env   string // its environment variable, for messages
	Flag  string // its flag, without dashes
	Layer Layer
	From  string // the layer as messages name it: "flag --tls", "env", "env DFKV_TOKEN" (an earlier name), "file PATH", "default"
	// Default: the value is the default, whatever the layer: a file that
	// spells out every default (as dfkv.example.toml does) chose nothing.
	Default bool
}

// Origin returns where key got its value; ok is false when the role
// does not take key.
func (r *Resolved) Origin(key string) (o Origin, ok bool) {
	for _, v := range r.values {
		if v.s.key == key {
			return r.origin(v, defaultConfig()), true
		}
	}
	return Origin{}, false
}

// Origins returns where each of the role's settings got its value, in
// the order --print-config shows them.
func (r *Resolved) Origins() []Origin {
	def := defaultConfig()
	out := make([]Origin, len(r.values))
	for i, v := range r.values {
		out[i] = r.origin(v, def)
	}
	return out
}

func (r *Resolved) origin(v resolvedValue, def *Config) Origin {
	o := Origin{Key: v.s.key, Env: v.s.env, Flag: v.s.flag, From: v.src.String(),
		Default: v.s.value.format(r.cfg) == v.s.value.format(def)}
	switch v.src.kind {
	case fromFile:
		o.Layer = LayerFile
	case fromEnv:
		o.Layer = LayerEnv
	case fromFlag:
		o.Layer = LayerFlag
	}
	return o
}

type resolvedValue struct {
	s   *setting
	src source
	raw string // the input as written, quoted, for errors
}

// source is the layer a value came from.
type source struct {
	kind  string // one of fromDefault, fromFile, fromEnv, fromFlag
	where string // file path, flag name, or the earlier env name that set it
}

const (
	fromDefault = "default"
	fromFile    = "file"
	fromEnv     = "env"
	fromFlag    = "flag"
)

func (s source) String() string {
	switch s.kind {
	case fromFile:
		return "file " + s.where
	case fromFlag:
		return "flag --" + s.where
	case fromEnv:
		if s.where != "" {
			return "env " + s.where
		}
	}
	return s.kind
}

// WriteTo prints every setting of the role, in table order, one per line as
//
//	key = value  # source (ENV_NAME)
//
// where source is default, file, env or flag. The lines are TOML (dotted keys
// at top level), so the output can be saved and used as a config file.
func (r *Resolved) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	b := bufio.NewWriter(cw)
	fmt.Fprintf(b, "# dfkv %s: resolved configuration (defaults < file < env < flags)\n", r.role)
	if r.file != "" {
		fmt.Fprintf(b, "# config file: %s (from %s)\n", r.file, r.fileFrom)
	} else {
		fmt.Fprintf(b, "# config file: none\n")
	}
	for _, rv := range r.values {
		kind := rv.src.kind
		if kind == fromEnv && rv.src.where != "" {
			kind += " " + rv.src.where // set through the earlier name
		}
		if a, ok := r.auto[rv.s.key]; ok && isAuto(rv.s.value.format(r.cfg)) {
			kind += ", auto (= " + a + ")"
		}
		fmt.Fprintf(b, "%s = %s  # %s (%s)\n", rv.s.key, rv.s.value.format(r.cfg), kind, rv.s.env)
	}
	err := b.Flush()
	return cw.n, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Warnings returns what Load found worth telling but not worth refusing to
// start over: unknown DFKV_* variables, a DFKV_CONFIG that --config
// overrode. The role logs each one once it has a logger.
func (r *Resolved) Warnings() []string { return append([]string(nil), r.warnings...) }

// File returns the config file that was read and what named it ("--config"
// or "DFKV_CONFIG"), or "", "" when there was none, for the role's startup log.
func (r *Resolved) File() (path, from string) { return r.file, r.fileFrom }

// isAuto reports a printed value that asks for the automatic choice.
func isAuto(printed string) bool { return printed == "0" || printed == `"auto"` || printed == `""` }
