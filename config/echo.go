package config

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// An error repeats the value it is about, so the reader sees what was
// given; a value of up to echoWhole bytes is repeated whole, a longer one
// (a 64 KiB --namespace, say) as its first echoCut bytes and its length,
// so the error stays a line a person can read.
const (
	echoWhole = 128
	echoCut   = 64
)

// Echo quotes s, a value a user gave, for an error message: as
// strconv.Quote does when s is at most 128 bytes, else its first 64 bytes
// (cut at a character boundary), quoted, then "… (N bytes)".
func Echo(s string) string { return echoWith(s, strconv.Quote) }

// echoWith is Echo with the quoting of the caller's syntax (Go or TOML).
func echoWith(s string, quote func(string) string) string {
	if len(s) <= echoWhole {
		return quote(s)
	}
	return quote(s[:cutAt(s, echoCut)]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// cutAt is the largest index ≤ n that does not split a UTF-8 character of
// s (n itself when s is not valid UTF-8 there).
func cutAt(s string, n int) int {
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return i
		}
	}
	return n
}

// clip is Echo for text already formatted for display (a TOML value that
// is not a string): whole up to 128 bytes, else cut like Echo.
func clip(s string) string {
	if len(s) <= echoWhole {
		return s
	}
	return s[:cutAt(s, echoCut)] + fmt.Sprintf("… (%d bytes)", len(s))
}

// echoList shows a list value for an error message: as tomlArray writes
// it when that is at most 128 bytes, else its first elements (each cut
// like Echo) up to about 64 bytes, and how many there are.
func echoList(vals []string) string {
	if s := tomlArray(vals); len(s) <= echoWhole {
		return s
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, v := range vals {
		if i > 0 {
			b.WriteString(", ")
		}
		if b.Len() >= echoCut {
			b.WriteString("…")
			break
		}
		b.WriteString(echoWith(v, tomlString))
	}
	fmt.Fprintf(&b, "] (%d elements)", len(vals))
	return b.String()
}
