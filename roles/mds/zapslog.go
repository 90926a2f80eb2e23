package mds

import (
	"context"
	"log/slog"
	"maps"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapToSlog is a zap logger for a library that logs through zap (the etcd
// client) whose entries at WARN and above go to log, prefixed, with their
// fields as attributes; lower levels are dropped before they are built.
func zapToSlog(log *slog.Logger, prefix string) *zap.Logger {
	return zap.New(&slogCore{log: log, prefix: prefix, min: zapcore.WarnLevel})
}

// slogCore is a zapcore.Core that forwards entries to a *slog.Logger.
// zap's own MapObjectEncoder renders each field, so every field type zap
// knows (errors, durations, stringers, arrays, objects) comes out as the
// value zap's JSON encoder would write.
type slogCore struct {
	log    *slog.Logger
	prefix string
	min    zapcore.Level
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return l >= c.min && c.log.Enabled(context.Background(), slogLevel(l))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	log := c.log
	if attrs := attrsOf(fields); len(attrs) > 0 {
		log = slog.New(log.Handler().WithAttrs(attrs))
	}
	return &slogCore{log: log, prefix: c.prefix, min: c.min}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	attrs := attrsOf(fields)
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", e.LoggerName))
	}
	c.log.LogAttrs(context.Background(), slogLevel(e.Level), c.prefix+e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

// attrsOf renders zap fields as slog attributes, in their order (the
// keys one field adds, zap.Error's "errorVerbose" say, sorted among
// themselves). zap.Namespace is dropped: the fields after it stay at the
// top.
func attrsOf(fields []zapcore.Field) []slog.Attr {
	var attrs []slog.Attr
	for _, f := range fields {
		if f.Type == zapcore.NamespaceType {
			continue
		}
		enc := zapcore.NewMapObjectEncoder()
		f.AddTo(enc)
		for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
			attrs = append(attrs, slog.Any(k, enc.Fields[k]))
		}
	}
	return attrs
}

// slogLevel maps zap's levels onto slog's; DPanic, Panic and Fatal are
// errors (zap itself panics or exits after writing them).
func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l < zapcore.InfoLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}
