package config

import (
	"strings"
	"testing"
)

// An async upload queue exactly max_block_bytes large cannot hold the
// largest value either: the queue holds objects, each the value plus
// objtier.HeaderLen (64) bytes of header, so it is reported too.
func TestS3QueueEqualToLargestValueReported(t *testing.T) {
	_, res, err := LoadFrom("server", "", envOf(map[string]string{
		"DFKV_SERVER_S3_ENDPOINT": "s3.example:9000", "DFKV_SERVER_S3_BUCKET": "kv",
		"DFKV_SERVER_S3_UPLOAD_QUEUE_BYTES": "64MiB", "DFKV_SERVER_MAX_BLOCK_BYTES": "64MiB"}), nil)
	if err != nil {
		if !strings.Contains(err.Error(), "s3_upload_queue_bytes") {
			t.Fatalf("refused, but not naming s3_upload_queue_bytes: %v", err)
		}
		return
	}
	if !strings.Contains(strings.Join(res.Warnings(), "\n"), "s3_upload_queue_bytes") {
		t.Errorf("s3_upload_queue_bytes 64MiB = max_block_bytes 64MiB accepted without a word, though a 64MiB value "+
			"(a 64MiB+64-byte object) never fits the queue; warnings %q", res.Warnings())
	}
}

// A syntax error must not echo a secret in any form: also when the value
// continues past its key's line (the parser reports the line the bad
// token is on, where no key is), or when the key is written in another
// case (TOML keys are case-sensitive, so "Token" is not the setting, but
// what follows it is the token all the same).
func TestFileSecretsNeverEchoedOnContinuationLinesOrOtherCase(t *testing.T) {
	for _, c := range []struct{ role, text, leak string }{
		{"ctl", "[client]\ntoken = [\"a\",\n 12345678901234567890123 ]\n", "123456789012"},
		{"ctl", "[client]\nToken = 12345678901234567890123\n", "123456789012"},
		{"server", "[server]\nMDS_TOKEN = 98765432109876543210987\n", "987654321098"},
	} {
		_, _, err := LoadText(c.role, "test configuration", c.text, nil, nil)
		if err == nil {
			t.Fatalf("%q: accepted", c.text)
		}
		if strings.Contains(err.Error(), c.leak) {
			t.Errorf("%q: the error shows (part of) the secret: %v", c.text, err)
		}
	}
}
