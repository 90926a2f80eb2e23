package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Sweep is bench.sweep: one setting of the run that takes several
// values, each measured in a stage of its own, so one invocation draws
// throughput against latency as the load grows.
type Sweep struct {
	// Dimension is SweepConcurrency or SweepValueSize; "" = no sweep.
	Dimension string
	// Values are the setting's values, one stage each, increasing.
	Values []uint64
}

// The dimensions a sweep may vary.
const (
	SweepConcurrency = "concurrency"
	SweepValueSize   = "value_size"
)

// sweep limits: the values of a dimension are those of its own setting.
const (
	maxSweepSteps       = 32
	maxSweepConcurrency = 4096 // bench.concurrency's maximum
)

// String writes the sweep as it is given: "concurrency=1,4,16".
func (s Sweep) String() string {
	if s.Dimension == "" {
		return ""
	}
	vals := make([]string, len(s.Values))
	for i, v := range s.Values {
		vals[i] = s.Label(v)
	}
	return s.Dimension + "=" + strings.Join(vals, ",")
}

// Label writes one value of the sweep's dimension: a count, or a size in
// the unit people write it in.
func (s Sweep) Label(v uint64) string {
	if s.Dimension == SweepValueSize {
		return FormatSize(v)
	}
	return strconv.FormatUint(v, 10)
}

// parseSweep reads "dimension=v1,v2,…" (value-size may be spelt like its
// flag); an empty text is no sweep.
func parseSweep(text string) (Sweep, error) {
	t := strings.TrimSpace(text)
	if t == "" {
		return Sweep{}, nil
	}
	dim, list, found := strings.Cut(t, "=")
	if !found {
		return Sweep{}, errors.New(`has no "="; write dimension=v1,v2,… such as concurrency=1,4,16,64 or value_size=4KiB,64KiB,1MiB`)
	}
	s := Sweep{Dimension: strings.ReplaceAll(strings.ToLower(strings.TrimSpace(dim)), "-", "_")}
	if s.Dimension != SweepConcurrency && s.Dimension != SweepValueSize {
		return Sweep{}, fmt.Errorf("sweeps %s; the dimensions are concurrency and value_size", Echo(strings.TrimSpace(dim)))
	}
	for i, e := range strings.Split(list, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			return Sweep{}, fmt.Errorf("has an empty value %d", i+1)
		}
		v, err := s.parseValue(e)
		if err != nil {
			return Sweep{}, fmt.Errorf("has value %d %s that %v", i+1, Echo(e), err)
		}
		s.Values = append(s.Values, v)
	}
	return s, nil
}

func (s Sweep) parseValue(e string) (uint64, error) {
	if s.Dimension == SweepValueSize {
		return parseSize(e)
	}
	n, err := strconv.ParseUint(e, 10, 64)
	if err != nil {
		return 0, errors.New("is not a whole number")
	}
	return n, nil
}

// check refuses sweeps of one step, too many steps, values outside their
// setting's range and values out of order: the steps run in the order
// given, and the knee is found by comparing each step to the one before,
// so they must grow.
func (s Sweep) check() error {
	if s.Dimension == "" {
		return nil
	}
	switch n := len(s.Values); {
	case n < 2:
		return fmt.Errorf("has one value; a sweep takes 2..%d", maxSweepSteps)
	case n > maxSweepSteps:
		return fmt.Errorf("has %d values; a sweep takes at most %d", n, maxSweepSteps)
	}
	lo, hi := uint64(1), uint64(maxSweepConcurrency)
	if s.Dimension == SweepValueSize {
		hi = gib // bench.value_size's maximum
	}
	for i, v := range s.Values {
		if v < lo || v > hi {
			return fmt.Errorf("has %s %s, out of range %s..%s", s.Dimension, s.Label(v), s.Label(lo), s.Label(hi))
		}
		if i > 0 && v <= s.Values[i-1] {
			return fmt.Errorf("has %s after %s; give the values in increasing order", s.Label(v), s.Label(s.Values[i-1]))
		}
	}
	return nil
}

// sweepValue is the bench.sweep setting.
type sweepValue struct {
	field func(*Config) *Sweep
}

func (v sweepValue) set(c *Config, vals []string) error {
	s, err := parseSweep(vals[0])
	if err != nil {
		return err
	}
	*v.field(c) = s
	return nil
}

func (v sweepValue) check(c *Config) error   { return v.field(c).check() }
func (v sweepValue) format(c *Config) string { return tomlString(v.field(c).String()) }
func (sweepValue) allowed() string {
	return "empty (no sweep), or concurrency=N,N,… (1..4096) or value_size=SIZE,SIZE,… (1..1GiB): 2..32 values in increasing order"
}
func (sweepValue) list() bool { return false }
