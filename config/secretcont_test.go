package config

import (
	"strings"
	"testing"
)

// A value running over several lines whose continuation holds an "=" of
// its own (a comment between the elements, a quoted element, base64
// padding) still keeps the parser's message, which quotes the bad token,
// out of the error.
func TestFileSecretsNeverEchoedWhenAContinuationLineHoldsAnEquals(t *testing.T) {
	for _, c := range []struct{ text, leak string }{
		{"[client]\ntoken = [\"a\",\n # rotated: old = retired\n 12345678901234567890123 ]\n", "123456789012"},
		{"[client]\ntoken = [\"a\",\n \"x=y\", 12345678901234567890123 ]\n", "123456789012"},
		{"[client]\ntoken = [\"a\",\n 12345678901234567890123= ]\n", "123456789012"},
	} {
		_, _, err := LoadText("ctl", "test configuration", c.text, nil, nil)
		if err == nil {
			t.Fatalf("%q: accepted", c.text)
		}
		if strings.Contains(err.Error(), c.leak) {
			t.Errorf("%q: the error shows (part of) the secret: %v", c.text, err)
		}
	}
}
