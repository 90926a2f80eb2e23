package config

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	f := func(in string, want uint64) {
		t.Helper()
		got, err := ParseSize(in)
		if err != nil {
			t.Fatalf("ParseSize(%q): unexpected error: %v", in, err)
		}
		if got != want {
			t.Fatalf("ParseSize(%q) = %d; want %d", in, got, want)
		}
	}
	f("0", 0)
	f("1", 1)
	f("4096", 4096)
	f("4KiB", 4096)
	f("4kib", 4096)
	f("4KIB", 4096)
	f("4 KiB", 4096)
	f(" 64MiB ", 64<<20)
	f("64\tMiB", 64<<20)
	f("1GiB", 1<<30)
	f("2TiB", 2<<40)
	f("1KB", 1000)
	f("1kb", 1000)
	f("5MB", 5e6)
	f("2GB", 2e9)
	f("3TB", 3e12)
	f("007", 7)
	f("18446744073709551615", 1<<64-1)
	f("16777215TiB", 16777215<<40)
}

func TestParseSizeFail(t *testing.T) {
	f := func(in, wantErr string) {
		t.Helper()
		got, err := ParseSize(in)
		if err == nil {
			t.Fatalf("ParseSize(%q) = %d; want an error", in, got)
		}
		if !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("ParseSize(%q) error %q; want it to contain %q", in, err, wantErr)
		}
	}
	f("", "is empty")
	f("  ", "is empty")
	f("-1", "is negative")
	f("-1KiB", "is negative")
	f("+1", "does not start with a number")
	f("abc", "does not start with a number")
	f("KiB", "does not start with a number")
	// Fractions are refused, not rounded: see ParseSize.
	f("1.5MiB", "has a fraction")
	f("1,5MiB", "has a fraction")
	f("0.5", "has a fraction")
	f("18446744073709551616", "is too large")
	f("16777216TiB", "is too large")
	f("18446745TB", "is too large")
	f("1 K", `unknown unit "K"`)
	f("1KiBB", `unknown unit "KiBB"`)
	f("1iB", `unknown unit "iB"`)
	f("1B", `unknown unit "B"`)
	f("1 2", `unknown unit "2"`)
	f("0x10", `unknown unit "x10"`)
	f("1e3", `unknown unit "e3"`)
}

func TestFormatSize(t *testing.T) {
	f := func(n uint64, want string) {
		t.Helper()
		if got := FormatSize(n); got != want {
			t.Fatalf("FormatSize(%d) = %q; want %q", n, got, want)
		}
		back, err := ParseSize(want)
		if err != nil || back != n {
			t.Fatalf("ParseSize(FormatSize(%d)) = %d, %v; want it back", n, back, err)
		}
	}
	f(0, "0")
	f(1, "1")
	f(1000, "1000")
	f(1024, "1KiB")
	f(1536, "1536")
	f(64<<20, "64MiB")
	f(1<<30, "1GiB")
	f(3<<40, "3TiB")
	f(1<<64-1, "18446744073709551615")
}
