package config

import (
	"bytes"
	"strings"
	"testing"
)

// A secret written wrongly as a dotted key at top level
// (client.token = ...) or in an inline table (client = { token = ... })
// is as secret as one under [client]: the TOML parser's message, which
// quotes what it found, must not reach the error.
func TestFileSecretsNeverEchoedInDottedOrInlineForm(t *testing.T) {
	for _, c := range []struct{ role, text, leak string }{
		{"ctl", "client.token = 12345678901234567890123\n", "12345678901234567890123"},
		{"ctl", "client.token = 0123456789abcdef0123456789abcdef\n", "0123456789"},
		{"ctl", "client = { token = 12345678901234567890123 }\n", "12345678901234567890123"},
		{"server", "server.mds_token = 98765432109876543210987\n", "98765432109876543210987"},
		{"server", "server . mds_token = 98765432109876543210987\n", "98765432109876543210987"},
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

// server.slab_extent_bytes must be what the slab engine can format: a
// multiple of 4KiB (slab.MinClass) up to 1GiB (its maxExtentBytes),
// refused by Load and --print-config, naming the setting, rather than at
// start with an error that blames server.disks.
func TestSlabExtentOutsideEngineRangeRefused(t *testing.T) {
	for _, v := range []string{"2GiB", "16GiB", "1000", "1048577"} {
		_, _, err := LoadFrom("server", "", envOf(map[string]string{"DFKV_SERVER_SLAB_EXTENT_BYTES": v}), nil)
		if err == nil || !strings.Contains(err.Error(), "server.slab_extent_bytes") {
			t.Errorf("slab_extent_bytes %s: %v; want it refused, naming the setting", v, err)
		}
	}
	for _, v := range []string{"0", "1MiB", "64MiB", "1GiB"} {
		if _, _, err := LoadFrom("server", "", envOf(map[string]string{"DFKV_SERVER_SLAB_EXTENT_BYTES": v}), nil); err != nil {
			t.Errorf("slab_extent_bytes %s refused: %v", v, err)
		}
	}
}

// With the RAM tier on, ram_tier_bytes must leave at least one 16MiB
// arena extent after the large-value reserve (auto = two extents), or
// ramtier.Open refuses it after the node has started up. crossCheck
// exists so --print-config reports such combinations.
func TestRAMTierBudgetBelowReserveRefused(t *testing.T) {
	for _, env := range []map[string]string{
		{"DFKV_SERVER_RAM_TIER": "1", "DFKV_SERVER_RAM_TIER_BYTES": "1"},
		{"DFKV_SERVER_RAM_TIER": "1", "DFKV_SERVER_RAM_TIER_BYTES": "32MiB"},
		{"DFKV_SERVER_RAM_TIER": "1", "DFKV_SERVER_RAM_TIER_BYTES": "64MiB", "DFKV_SERVER_RAM_TIER_LARGE_RESERVE_BYTES": "1GiB"},
		{"DFKV_SERVER_RAM_TIER": "1", "DFKV_SERVER_RAM_TIER_BYTES": "1MiB", "DFKV_SERVER_RAM_TIER_LARGE_RESERVE_BYTES": "0"},
	} {
		_, _, err := LoadFrom("server", "", envOf(env), nil)
		if err == nil || !strings.Contains(err.Error(), "ram_tier") {
			t.Errorf("%v: %v; want the RAM tier budget refused", env, err)
		}
	}
	if _, _, err := LoadFrom("server", "", envOf(map[string]string{"DFKV_SERVER_RAM_TIER": "1", "DFKV_SERVER_RAM_TIER_BYTES": "64MiB"}), nil); err != nil {
		t.Errorf("64MiB with the automatic reserve refused: %v", err)
	}
}

// A 0/1 setting given an empty value (DFKV_MDS_MEMBERS_NEED_TOKEN= from
// an unset shell variable, --tls=, tls = "") is a mistake, as it is for
// every other kind of setting (an int says "is not a whole number", a
// switch "is empty"): taken as 0 it would turn off an access check the
// file asked for.
func TestOnOffEmptyValueRefused(t *testing.T) {
	file := "[mds]\nmembers_need_token = 1\nnode_credentials_file = \"/etc/dfkv/nodes.toml\"\n"
	cfg, _, err := LoadText("mds", "test configuration", file, envOf(map[string]string{"DFKV_MDS_MEMBERS_NEED_TOKEN": ""}), nil)
	if err == nil || !strings.Contains(err.Error(), "mds.members_need_token") {
		t.Errorf("DFKV_MDS_MEMBERS_NEED_TOKEN=\"\": %v (members_need_token %d); want it refused", err, cfg.MDS.MembersNeedToken)
	}
	if _, _, err := LoadFrom("ctl", "", nil, map[string][]string{"tls": {""}}); err == nil {
		t.Errorf("--tls= accepted")
	}
	if _, _, err := LoadText("ctl", "test configuration", "[client]\ntls = \"\"\n", nil, nil); err == nil {
		t.Errorf("tls = \"\" accepted")
	}
}

// An async upload queue smaller than the largest value can never hold
// such a value (the queue drops every value larger than
// server.s3_upload_queue_bytes, even when empty), so those values would
// never reach the object store: Load refuses it, or at least warns.
func TestS3QueueSmallerThanLargestValueReported(t *testing.T) {
	_, res, err := LoadFrom("server", "", envOf(map[string]string{
		"DFKV_SERVER_S3_ENDPOINT": "s3.example:9000", "DFKV_SERVER_S3_BUCKET": "kv",
		"DFKV_SERVER_S3_UPLOAD_QUEUE_BYTES": "1MiB", "DFKV_SERVER_MAX_BLOCK_BYTES": "64MiB"}), nil)
	if err != nil {
		if !strings.Contains(err.Error(), "s3_upload_queue_bytes") {
			t.Fatalf("refused, but not naming s3_upload_queue_bytes: %v", err)
		}
		return
	}
	if !strings.Contains(strings.Join(res.Warnings(), "\n"), "s3_upload_queue_bytes") {
		t.Errorf("s3_upload_queue_bytes 1MiB < max_block_bytes 64MiB accepted without a word; warnings %q", res.Warnings())
	}
}

// --print-config's output loads as a config file, also for a size past
// what a TOML integer holds that is not a whole number of KiB (printed
// as a string, not as a bare integer TOML would refuse).
func TestPrintConfigRoundTripHugeSize(t *testing.T) {
	for _, env := range []map[string]string{
		{"DFKV_SERVER_TENANT_DEFAULT_QUOTA_BYTES": "18446744073709551615"},
		{"DFKV_SERVER_DISK_CAPACITY_BYTES": "9223372036854775809"},
	} {
		cfg, res, err := LoadFrom("server", "", envOf(env), nil)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if _, err := res.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		back, _, err := LoadText("server", "printed", b.String(), nil, nil)
		if err != nil {
			t.Errorf("%v: --print-config output does not load: %v", env, err)
			continue
		}
		if back.Server.TenantDefaultQuotaBytes != cfg.Server.TenantDefaultQuotaBytes || back.Server.DiskCapacityBytes != cfg.Server.DiskCapacityBytes {
			t.Errorf("%v: round trip changed the value", env)
		}
	}
}

// LoadFrom with a setting under both its name and its earlier name (an
// embedder passing both) gives one answer, the current name's, not
// whichever map entry Go's randomised iteration visits last.
func TestLoadFromBothFlagSpellingsDeterministic(t *testing.T) {
	flags := map[string][]string{"disk-capacity": {"1GiB"}, "disk-capacity-bytes": {"2GiB"}}
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		cfg, _, err := LoadFrom("server", "", nil, flags)
		if err != nil {
			seen["error"] = true
			continue
		}
		seen[FormatSize(cfg.Server.DiskCapacityBytes)] = true
	}
	if len(seen) != 1 || !seen["2GiB"] {
		t.Errorf("--disk-capacity 1GiB with --disk-capacity-bytes 2GiB gave %v over 200 loads; want the current name's 2GiB", seen)
	}
}
