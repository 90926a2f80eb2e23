package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size units. The 1024-based ones are what block and disk sizes are usually
// written in; the 1000-based ones are accepted because disk vendors and df -H
// speak them, and silently reading "500GB" as GiB would overstate a disk by 7%.
const (
	kib uint64 = 1 << 10
	mib uint64 = 1 << 20
	gib uint64 = 1 << 30
	tib uint64 = 1 << 40
)

var sizeUnits = []struct {
	name string
	mult uint64
}{
	{"TiB", tib}, {"GiB", gib}, {"MiB", mib}, {"KiB", kib},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
}

const sizeSyntax = "bytes as a whole number, optionally followed by KiB, MiB, GiB, TiB (1024-based) or KB, MB, GB, TB (1000-based)"

// ParseSize reads a byte size as the config file, DFKV_* variables and flags
// write it: a whole number of bytes, optionally followed (with or without a
// space, in any case) by KiB, MiB, GiB or TiB (powers of 1024) or KB, MB, GB
// or TB (powers of 1000). Fractions such as "1.5MiB" are rejected rather than
// rounded, because a size that is not a whole number of bytes is a typo more
// often than a wish; write "1536KiB" instead. Roles that take sizes of their
// own (bench value sizes, for one) use it so every size in dfkv reads alike.
func ParseSize(s string) (uint64, error) {
	n, err := parseSize(s)
	if err != nil {
		return 0, fmt.Errorf("size %s %w", Echo(s), err)
	}
	return n, nil
}

// parseSize is ParseSize with a bare problem ("is negative") so the loader
// can put the setting's name and source in front of it.
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("is empty; want " + sizeSyntax)
	}
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		if t[0] == '-' {
			return 0, errors.New("is negative; sizes are 0 or more bytes")
		}
		return 0, errors.New("does not start with a number; want " + sizeSyntax)
	}
	n, err := strconv.ParseUint(t[:i], 10, 64)
	if err != nil {
		return 0, errors.New("is too large; the largest size is 18446744073709551615 bytes")
	}
	rest := strings.TrimSpace(t[i:])
	if strings.HasPrefix(rest, ".") || strings.HasPrefix(rest, ",") {
		return 0, errors.New("has a fraction; sizes are whole numbers, e.g. 1536KiB rather than 1.5MiB")
	}
	if rest == "" {
		return n, nil
	}
	for _, u := range sizeUnits {
		if strings.EqualFold(rest, u.name) {
			if n > math.MaxUint64/u.mult {
				return 0, errors.New("is too large; the largest size is 18446744073709551615 bytes")
			}
			return n * u.mult, nil
		}
	}
	return 0, fmt.Errorf("has unknown unit %s; want %s", Echo(rest), sizeSyntax)
}

// FormatSize writes n the way ParseSize reads it back, in the largest
// 1024-based unit that divides it exactly ("64MiB"), else as plain bytes, so
// --print-config and error messages show sizes the way people write them.
func FormatSize(n uint64) string {
	if n == 0 {
		return "0"
	}
	for _, u := range sizeUnits[:4] {
		if n%u.mult == 0 {
			return strconv.FormatUint(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatUint(n, 10)
}

// HumanSize prints n for people, in binary units with one decimal
// ("64.0 MiB"); FormatSize prints a size exactly, for configuration.
func HumanSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
