package config

import (
	"bytes"
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestDefaults pins the defaults of the settings table: roles, scripts and
// tests rely on them.
func TestDefaults(t *testing.T) {
	want := &Config{
		Group: "default",
		Server: Server{
			ID:                  "",
			Listen:              "127.0.0.1:7600",
			HTTPListen:          "127.0.0.1:7680",
			Weight:              1,
			Disks:               []string{"./dfkv-data/disk0"},
			DiskCapacityBytes:   0,
			StoreEngine:         "slab",
			ScrubBytesPerSecond: 64 << 20,
			ScrubIntervalHours:  168,
			URing:               1,
			RAMWriteMode:        "writeback",
			PutAckMode:          "ram",
			RAMTierShards:       8,
			RAMTierNUMA:         "interleave",
			ReadCoalesce:        1,
			RAMTierLargeReserve: SizeAuto,
			MaxBlockBytes:       64 << 20,
			MaxBatchItems:       4096,
			MaxConns:            4096,
			FirstRequest:        30 * time.Second,
			BodyTimeout:         time.Minute,
			Drain:               2 * time.Second,
			ShutdownTimeout:     30 * time.Second,
			MetricsFirstRequest: 30 * time.Second,
			ShmSocketMode:       "0600",
			TLSMinVersion:       "1.3",
			Lease:               2 * time.Second,
			LeaseMax:            65536,
			ShmStagingBytes:     64 << 20,
			S3Prefix:            "dfkv",
			S3Region:            "us-east-1",
			S3BucketLookup:      "auto",
			S3TLS:               1,
			S3Write:             "async",
			S3Exist:             "remote",
			S3Timeout:           5 * time.Second,
			S3UploadWorkers:     8,
			S3UploadQueueBytes:  256 << 20,
		},
		Client: Client{
			Members:          []string{"127.0.0.1:7600"},
			MDSPoll:          500 * time.Millisecond,
			Namespace:        "dfkv-tools",
			Timeout:          10 * time.Second,
			DialTimeout:      2 * time.Second,
			PoolSize:         16,
			BatchConcurrency: 8,
			Shm:              "auto",
		},
		MDS: MDS{
			Listen:              "127.0.0.1:7700",
			HTTPListen:          "127.0.0.1:7780",
			EtcdPrefix:          "/dfkv",
			DBPath:              "./dfkv-data/mds.db",
			HeartbeatTTL:        10 * time.Second,
			FirstRequest:        30 * time.Second,
			ProbeCache:          2500 * time.Millisecond,
			MetricsFirstRequest: 30 * time.Second,
			TLSMinVersion:       "1.3",
		},
		Bench: Bench{
			Workload:      "put",
			Protocol:      "dfkv",
			ValueSize:     1 << 20,
			Keys:          1024,
			Concurrency:   16,
			Duration:      10 * time.Second,
			Warmup:        time.Second,
			Fill:          SwitchAuto,
			MixedGetRatio: 0.9,
			Sequences:     64,
			PagesPerSeq:   16,
			SharedPrefix:  0.5,
			KeyPrefix:     "bench/",
			Seed:          1,
		},
		Log: Log{Level: "info", Format: "text"},
	}
	for _, rn := range roleNames {
		t.Run(rn.name, func(t *testing.T) {
			cfg, r, err := LoadFrom(rn.name, "", nil, nil)
			if err != nil {
				t.Fatalf("defaults do not validate: %v", err)
			}
			if !reflect.DeepEqual(cfg, want) {
				t.Fatalf("defaults:\n got %+v\nwant %+v", cfg, want)
			}
			for _, rv := range r.values {
				if rv.src.kind != fromDefault {
					t.Errorf("%s: source %s; want default", rv.s.key, rv.src.kind)
				}
			}
			if len(r.Warnings()) != 0 {
				t.Errorf("warnings %q; want none", r.Warnings())
			}
		})
	}
}

// TestPrecedence checks defaults < file < env < flag, for a scalar and a list,
// and that each layer records its source.
func TestPrecedence(t *testing.T) {
	file := writeTOML(t, `
[server]
listen = "10.0.0.1:1001"
disks = ["/file/a", "/file/b"]
`)
	env := map[string]string{"DFKV_SERVER_LISTEN": "10.0.0.2:1002", "DFKV_SERVER_DISKS": " /env/a , /env/b,/env/c "}
	flags := map[string][]string{"listen": {"10.0.0.3:1003"}, "disks": {"/flag/a"}}

	type layers struct{ file, env, flag bool }
	f := func(l layers, wantListen string, wantDisks []string, wantSource string) {
		t.Helper()
		var path string
		lookup := envOf(nil)
		var fl map[string][]string
		if l.file {
			path = file
		}
		if l.env {
			lookup = envOf(env)
		}
		if l.flag {
			fl = flags
		}
		cfg, r, err := LoadFrom("server", path, lookup, fl)
		if err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
		if cfg.Server.Listen != wantListen {
			t.Errorf("%+v: listen %q; want %q", l, cfg.Server.Listen, wantListen)
		}
		if !reflect.DeepEqual(cfg.Server.Disks, wantDisks) {
			t.Errorf("%+v: disks %q; want %q", l, cfg.Server.Disks, wantDisks)
		}
		for _, key := range []string{"server.listen", "server.disks"} {
			if got := sourceOf(t, r, key); got != wantSource {
				t.Errorf("%+v: %s source %s; want %s", l, key, got, wantSource)
			}
		}
		if got := sourceOf(t, r, "server.max_conns"); got != fromDefault {
			t.Errorf("%+v: untouched server.max_conns has source %s; want default", l, got)
		}
	}
	def := []string{"./dfkv-data/disk0"}
	fileDisks := []string{"/file/a", "/file/b"}
	envDisks := []string{"/env/a", "/env/b", "/env/c"}
	flagDisks := []string{"/flag/a"} // replaces the list, does not add to it

	f(layers{}, "127.0.0.1:7600", def, fromDefault)
	f(layers{file: true}, "10.0.0.1:1001", fileDisks, fromFile)
	f(layers{env: true}, "10.0.0.2:1002", envDisks, fromEnv)
	f(layers{flag: true}, "10.0.0.3:1003", flagDisks, fromFlag)
	f(layers{file: true, env: true}, "10.0.0.2:1002", envDisks, fromEnv)
	f(layers{file: true, flag: true}, "10.0.0.3:1003", flagDisks, fromFlag)
	f(layers{env: true, flag: true}, "10.0.0.3:1003", flagDisks, fromFlag)
	f(layers{file: true, env: true, flag: true}, "10.0.0.3:1003", flagDisks, fromFlag)
}

// TestConfigFileFromEnv: with no --config, DFKV_CONFIG names the file, and
// --config wins over it with a warning.
func TestConfigFileFromEnv(t *testing.T) {
	a := writeTOML(t, "[server]\nlisten = \"10.0.0.1:1\"\n")
	b := writeTOML(t, "[server]\nlisten = \"10.0.0.2:2\"\n")

	cfg, r, err := LoadFrom("server", "", envOf(map[string]string{"DFKV_CONFIG": a}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.Listen != "10.0.0.1:1" || sourceOf(t, r, "server.listen") != fromFile {
		t.Fatalf("DFKV_CONFIG file not read: listen %q from %s", cfg.Server.Listen, sourceOf(t, r, "server.listen"))
	}
	if path, from := r.File(); path != a || from != "DFKV_CONFIG" {
		t.Fatalf("File() = %q, %q; want %q, DFKV_CONFIG", path, from, a)
	}

	cfg, r, err = LoadFrom("server", b, envOf(map[string]string{"DFKV_CONFIG": a}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.Listen != "10.0.0.2:2" {
		t.Fatalf("--config did not win over DFKV_CONFIG: listen %q", cfg.Server.Listen)
	}
	if w := r.Warnings(); len(w) != 1 || !strings.Contains(w[0], "DFKV_CONFIG") || !strings.Contains(w[0], "is ignored") {
		t.Fatalf("warnings %q; want one about DFKV_CONFIG being ignored", w)
	}

	// DFKV_CONFIG set but empty names no file.
	if _, r, err := LoadFrom("server", "", envOf(map[string]string{"DFKV_CONFIG": ""}), nil); err != nil {
		t.Fatalf("empty DFKV_CONFIG: %v", err)
	} else if path, _ := r.File(); path != "" {
		t.Fatalf("empty DFKV_CONFIG read file %q", path)
	}
}

// TestFileValues covers the TOML spellings each kind accepts.
func TestFileValues(t *testing.T) {
	path := writeTOML(t, `
# Dotted keys at the top level are the same as tables.
server.listen = ":7601"
group = "g-1.a_b"

[server]
max_block_bytes = 1048576
disk_capacity_bytes = "1 TB"
max_conns = "12"
first_request_ms = 0
http_listen = ""
store_engine = "slab"

[client]
members = ["a:1", "b:2"]
`)
	cfg, _, err := LoadFrom("server", path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Server
	if s.Listen != ":7601" || cfg.Group != "g-1.a_b" || s.MaxBlockBytes != 1<<20 || s.DiskCapacityBytes != 1e12 ||
		s.MaxConns != 12 || s.FirstRequest != 0 || s.HTTPListen != "" || s.StoreEngine != "slab" {
		t.Fatalf("file values not applied: %+v group %q", s, cfg.Group)
	}
	// client.members is not a server setting: known, but left at its default.
	if !reflect.DeepEqual(cfg.Client.Members, []string{"127.0.0.1:7600"}) {
		t.Fatalf("server role read client.members = %q", cfg.Client.Members)
	}
	cfg, _, err = LoadFrom("ctl", path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.Client.Members, []string{"a:1", "b:2"}) || cfg.Server.MaxBlockBytes != 1<<20 {
		t.Fatalf("ctl: members %q, max block %d", cfg.Client.Members, cfg.Server.MaxBlockBytes)
	}
	if cfg.Server.Listen != "127.0.0.1:7600" {
		t.Fatalf("ctl role read server.listen = %q", cfg.Server.Listen)
	}
}

// TestLargeReserveValues: server.ram_tier_large_reserve_bytes reads the word
// auto or a size, and prints back what it read, since 0 ("none") and auto
// ("two extents") must not be confused.
func TestLargeReserveValues(t *testing.T) {
	f := func(file, env string, want int64, printed string) {
		t.Helper()
		var path string
		if file != "" {
			path = writeTOML(t, "[server]\nram_tier_large_reserve_bytes = "+file+"\n")
		}
		lookup := envOf(nil)
		if env != "" {
			lookup = envOf(map[string]string{"DFKV_SERVER_RAM_TIER_LARGE_RESERVE_BYTES": env})
		}
		cfg, r, err := LoadFrom("server", path, lookup, nil)
		if err != nil {
			t.Fatalf("file %s env %q: %v", file, env, err)
		}
		if cfg.Server.RAMTierLargeReserve != want {
			t.Errorf("file %s env %q: %d; want %d", file, env, cfg.Server.RAMTierLargeReserve, want)
		}
		var buf bytes.Buffer
		if _, err := r.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		if line := "server.ram_tier_large_reserve_bytes = " + printed + "  #"; !strings.Contains(buf.String(), line) {
			t.Errorf("file %s env %q: print-config lacks %q", file, env, line)
		}
	}
	f("", "", SizeAuto, `"auto"`)
	f(`"auto"`, "", SizeAuto, `"auto"`)
	f("", " AUTO ", SizeAuto, `"auto"`)
	f("0", "", 0, "0")
	f("", "0", 0, "0")
	f(`"64MiB"`, "", 64<<20, `"64MiB"`)
	f("4097", "", 4097, "4097")
	f(`"0"`, "64MiB", 64<<20, `"64MiB"`)
	f("", "16TiB", 16<<40, `"16TiB"`)
}

// TestOnlyRoleRowsChecked: a shared file may hold values another role would
// refuse, but not keys no role knows.
func TestOnlyRoleRowsChecked(t *testing.T) {
	path := writeTOML(t, "[client]\nmembers = [\"no-port\"]\n[server]\nlisten = \"7600\"\n")
	if _, _, err := LoadFrom("mds", path, nil, nil); err != nil {
		t.Fatalf("mds failed on settings it does not take: %v", err)
	}
	if _, _, err := LoadFrom("server", path, nil, nil); err == nil || !strings.Contains(err.Error(), "server.listen") {
		t.Fatalf("server accepted listen \"7600\": %v", err)
	}
	if _, _, err := LoadFrom("smoke", path, nil, nil); err == nil || !strings.Contains(err.Error(), "client.members") {
		t.Fatalf("smoke accepted members [\"no-port\"]: %v", err)
	}
	// Env variables of other roles' settings are neither read nor refused.
	cfg, _, err := LoadFrom("server", "", envOf(map[string]string{"DFKV_CLIENT_MEMBERS": ",,"}), nil)
	if err != nil || !reflect.DeepEqual(cfg.Client.Members, []string{"127.0.0.1:7600"}) {
		t.Fatalf("server read DFKV_CLIENT_MEMBERS: %q, %v", cfg.Client.Members, err)
	}
	bad := writeTOML(t, "[client]\nmembrs = [\"a:1\"]\n")
	if _, _, err := LoadFrom("mds", bad, nil, nil); err == nil || !strings.Contains(err.Error(), "client.membrs") {
		t.Fatalf("mds accepted unknown key client.membrs: %v", err)
	}
}

// TestLayerOverride: a layer that does not parse is an error even when a
// later layer overrides it; range is judged on the merged value only.
func TestLayerOverride(t *testing.T) {
	path := writeTOML(t, "[server]\nmax_block_bytes = \"abc\"\n")
	_, _, err := LoadFrom("server", path, nil, map[string][]string{"max-block-bytes": {"1MiB"}})
	if err == nil || !strings.Contains(err.Error(), "from file "+path) {
		t.Fatalf("unparsable file value hidden by a flag: %v", err)
	}
	path = writeTOML(t, "[server]\nmax_batch_items = 0\n")
	cfg, r, err := LoadFrom("server", path, envOf(map[string]string{"DFKV_SERVER_MAX_BATCH_ITEMS": "10"}), nil)
	if err != nil {
		t.Fatalf("out-of-range file value overridden by env: %v", err)
	}
	if cfg.Server.MaxBatchItems != 10 || sourceOf(t, r, "server.max_batch_items") != fromEnv {
		t.Fatalf("max_batch_items %d from %s; want 10 from env", cfg.Server.MaxBatchItems, sourceOf(t, r, "server.max_batch_items"))
	}
}

// TestErrors checks that each kind of bad input is refused with a message
// that names the setting, its env name, the source and what is allowed.
func TestErrors(t *testing.T) {
	type in struct {
		role  string
		file  string // TOML body; "" = no file
		env   map[string]string
		flags map[string][]string
	}
	f := func(name string, c in, want ...string) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			t.Helper()
			path := ""
			if c.file != "" {
				path = writeTOML(t, c.file)
			}
			role := c.role
			if role == "" {
				role = "server"
			}
			cfg, r, err := LoadFrom(role, path, envOf(c.env), c.flags)
			if err == nil {
				t.Fatalf("no error; want one containing %q", want)
			}
			if cfg != nil || r != nil {
				t.Fatalf("error %v came with a config", err)
			}
			msg := err.Error()
			if path != "" {
				msg = strings.ReplaceAll(msg, path, "PATH")
			}
			for _, w := range want {
				if !strings.Contains(msg, w) {
					t.Fatalf("error\n\t%s\ndoes not contain\n\t%s", msg, w)
				}
			}
		})
	}

	// Unknown keys.
	f("unknown top-level key", in{file: "listen = \"x:1\"\n"},
		`config file PATH: unknown key listen: no such setting (did you mean server.listen (DFKV_SERVER_LISTEN) or mds.listen (DFKV_MDS_LISTEN)?); valid top-level keys are group, [server], [client], [mds], [bench], [log]`)
	f("unknown key in section", in{file: "[server]\nlistn = \"x:1\"\n"},
		`config file PATH: unknown key server.listn in [server]: no such setting (did you mean server.listen (DFKV_SERVER_LISTEN) or mds.listen (DFKV_MDS_LISTEN)?)`,
		`valid keys in [server] are id, listen, http_listen, http_token_file, tls_cert, tls_key, tls_client_ca, tls_min_version, http_tls, mds_tls_ca, advertise_addr, weight, mds, mds_token, disks, disk_capacity_bytes, store_engine, slab_extent_bytes, scrub_bytes_per_second, scrub_interval_hours, uring, pprof, ram_tier, ram_tier_bytes, ram_write_mode, put_ack_mode, ram_flush_threads, ram_flush_delay_ms, ram_tier_shards, ram_tier_large_reserve_bytes, ram_tier_numa, read_coalesce, shm_socket, shm_socket_mode, lease_ms, lease_max, shm_staging_bytes, s3_endpoint, s3_bucket, s3_prefix, s3_region, s3_bucket_lookup, s3_tls, s3_credentials_file, s3_profile, s3_write, s3_exist, s3_timeout_ms, s3_upload_workers, s3_upload_queue_bytes, max_block_bytes, max_batch_items, max_conns, buffer_budget_bytes, socket_buffer_bytes, first_request_ms, body_timeout_ms, metrics_first_request_ms, drain_ms, shutdown_timeout_ms, credentials_file, tenant_quotas_file, tenant_default_quota_bytes`)
	f("key in the wrong section", in{file: "[client]\nlisten = \"x:1\"\n"},
		`unknown key client.listen in [client]`, `did you mean server.listen (DFKV_SERVER_LISTEN)`, `valid keys in [client] are members, mds, mds_poll_ms, namespace`)
	f("key in the wrong case", in{file: "[server]\nListen = \"x:1\"\n"},
		`unknown key server.Listen in [server]`, `did you mean server.listen (DFKV_SERVER_LISTEN)`)
	f("unknown table", in{file: "[quic]\nlisten = \"x:1\"\n"},
		`config file PATH: unknown table [quic]: no such table; valid top-level keys are`)
	f("mistyped table", in{file: "[sever]\nlisten = \"x:1\"\n"}, `unknown table [sever]: no such table (did you mean [server]?)`)
	f("table in the wrong case", in{file: "[Server]\nlisten = \"x:1\"\n"}, `unknown table [Server]: no such table (did you mean [server]?)`)
	f("transposed table", in{file: "[clinet]\nmembers = [\"x:1\"]\n"}, `unknown table [clinet]: no such table (did you mean [client]?)`)
	f("table one letter long", in{file: "[mdss]\nlisten = \"x:1\"\n"}, `unknown table [mdss]: no such table (did you mean [mds]?)`)
	f("key with a suffix", in{file: "[server]\nlisten_addr = \"x:1\"\n"}, `unknown key server.listen_addr in [server]`, `did you mean server.listen (DFKV_SERVER_LISTEN)`)
	f("unknown nested table", in{file: "[server.tls]\ncert = \"x\"\n"},
		`unknown key server.tls in [server]`)
	f("quoted dotted key", in{file: "\"server.listen\" = \"x:1\"\n"},
		`unknown key "server.listen"`)
	f("every unknown key is named", in{file: "a = 1\n[log]\nb = 2\n"},
		`unknown key a:`, `unknown key log.b in [log]`)
	f("unknown keys of other roles' sections fail every role", in{role: "mds", file: "[client]\nmembrs = [\"a:1\"]\n"},
		`unknown key client.membrs in [client]`, `did you mean client.members (DFKV_CLIENT_MEMBERS)?`)

	// TOML syntax and shape.
	f("syntax error names the line", in{file: "[server]\nlisten = \"x:1\"\nmax_conns = = 3\n"},
		`config file PATH: line 3: `, `fix the TOML syntax`)
	f("unterminated string", in{file: "group = \"abc\n"}, `config file PATH: line 1: `)
	f("section is not a table", in{file: "server = 5\n"},
		`config file PATH: server is a TOML integer; it must be the table [server]`)
	f("float for a string", in{file: "[server]\nlisten = 1.5\n"},
		`server.listen (DFKV_SERVER_LISTEN) from file PATH: 1.5 is a TOML float; want a string or an integer; allowed host:port`)
	f("bool for a number", in{file: "[server]\nmax_conns = true\n"},
		`server.max_conns (DFKV_SERVER_MAX_CONNS) from file PATH: true is a TOML boolean; want a string or an integer; allowed 1..1000000`)
	f("string for a list", in{file: "[server]\ndisks = \"/a\"\n"},
		`server.disks (DFKV_SERVER_DISKS) from file PATH: "/a" is a TOML string; want an array of strings`)
	f("table for a scalar", in{file: "[log]\nlevel = {x = 1}\n"},
		`log.level (DFKV_LOG_LEVEL) from file PATH: {…} is a TOML table`)

	// Malformed values, from each source.
	f("size from file", in{file: "[server]\nmax_block_bytes = \"abc\"\n"},
		`server.max_block_bytes (DFKV_SERVER_MAX_BLOCK_BYTES) from file PATH: "abc" does not start with a number`, `; allowed 4KiB..1GiB`)
	f("fractional size from env", in{env: map[string]string{"DFKV_SERVER_MAX_BLOCK_BYTES": "1.5MiB"}},
		`server.max_block_bytes (DFKV_SERVER_MAX_BLOCK_BYTES) from env: "1.5MiB" has a fraction`)
	f("listen without port from env", in{env: map[string]string{"DFKV_SERVER_LISTEN": "7600"}},
		`server.listen (DFKV_SERVER_LISTEN) from env: "7600" is not host:port (missing port in address); allowed host:port with port 0..65535`)
	f("listen port out of range from flag", in{flags: map[string][]string{"listen": {"127.0.0.1:70000"}}},
		`server.listen (DFKV_SERVER_LISTEN) from flag --listen: "127.0.0.1:70000" has port 70000 out of range; allowed host:port with port 0..65535`)
	f("named port", in{env: map[string]string{"DFKV_SERVER_HTTP_LISTEN": "localhost:http"}},
		`server.http_listen (DFKV_SERVER_HTTP_LISTEN) from env: "localhost:http" has port "http" that is not a number`)
	f("count that is not a number", in{env: map[string]string{"DFKV_SERVER_MAX_CONNS": "lots"}},
		`server.max_conns (DFKV_SERVER_MAX_CONNS) from env: "lots" is not a whole number; allowed 1..1000000`)
	f("millis that are not a number", in{env: map[string]string{"DFKV_SERVER_FIRST_REQUEST_MS": "30s"}},
		`server.first_request_ms (DFKV_SERVER_FIRST_REQUEST_MS) from env: "30s" is not a whole number of milliseconds; allowed 0..3600000 milliseconds (0 = off)`)
	f("millis too large for a Duration", in{env: map[string]string{"DFKV_SERVER_SHUTDOWN_TIMEOUT_MS": "9223372036854775"}},
		`server.shutdown_timeout_ms (DFKV_SERVER_SHUTDOWN_TIMEOUT_MS) from env: "9223372036854775" is out of range`)
	f("numa policy not allowed", in{env: map[string]string{"DFKV_SERVER_RAM_TIER_NUMA": "local"}},
		`server.ram_tier_numa (DFKV_SERVER_RAM_TIER_NUMA) from env: "local" is not a known value; allowed interleave, off`)
	f("large reserve that is neither auto nor a size", in{file: "[server]\nram_tier_large_reserve_bytes = \"two extents\"\n"},
		`server.ram_tier_large_reserve_bytes (DFKV_SERVER_RAM_TIER_LARGE_RESERVE_BYTES) from file PATH: "two extents" does not start with a number`,
		`; allowed auto (two extents), 0 (none) or a size such as 64MiB`)
	f("negative large reserve", in{flags: map[string][]string{"ram-tier-large-reserve-bytes": {"-1"}}},
		`server.ram_tier_large_reserve_bytes (DFKV_SERVER_RAM_TIER_LARGE_RESERVE_BYTES) from flag --ram-tier-large-reserve-bytes: "-1" is negative`)
	f("engine not allowed", in{env: map[string]string{"DFKV_SERVER_STORE_ENGINE": "rocks"}},
		`server.store_engine (DFKV_SERVER_STORE_ENGINE) from env: "rocks" is not a known value; allowed file, slab`)
	f("log level of mds", in{role: "mds", env: map[string]string{"DFKV_LOG_LEVEL": "INFO"}},
		`log.level (DFKV_LOG_LEVEL) from env: "INFO" is not a known value; allowed debug, info, warn, error`)
	f("group charset", in{role: "mds", flags: map[string][]string{"group": {"a/b"}}},
		`group (DFKV_GROUP) from flag --group: "a/b" has character '/' at byte 2; allowed 1-64 characters`)
	f("group too long", in{file: "group = \"" + strings.Repeat("g", 65) + "\"\n"},
		`group (DFKV_GROUP) from file PATH: "`+strings.Repeat("g", 65)+`" is 65 characters long`)
	f("empty group", in{env: map[string]string{"DFKV_GROUP": ""}}, `group (DFKV_GROUP) from env: "" is empty`)
	f("server id with a space", in{flags: map[string][]string{"id": {"node 1"}}},
		`server.id (DFKV_SERVER_ID) from flag --id: "node 1" has a space or control character at byte 5`)
	// Settings valid one by one that cannot work together.
	f("ram tier without a size", in{flags: map[string][]string{"ram-tier": {"1"}}},
		`server.ram_tier = 1 needs server.ram_tier_bytes (DFKV_SERVER_RAM_TIER_BYTES, --ram-tier-bytes)`)
	f("object store without a bucket", in{env: map[string]string{"DFKV_SERVER_S3_ENDPOINT": "s3.local:9000"}},
		`server.s3_endpoint is set but server.s3_bucket (DFKV_SERVER_S3_BUCKET, --s3-bucket) is empty`)
	f("sync uploads behind a RAM-acknowledged write-back", in{env: map[string]string{"DFKV_SERVER_S3_ENDPOINT": "s3.local:9000", "DFKV_SERVER_S3_BUCKET": "b",
		"DFKV_SERVER_S3_WRITE": "sync", "DFKV_SERVER_RAM_TIER": "1", "DFKV_SERVER_RAM_TIER_BYTES": "64MiB"}},
		`server.s3_write = sync acknowledges a PUT only once its object is stored`, `set server.put_ack_mode = disk`)
	f("object store endpoint given as a URL", in{env: map[string]string{"DFKV_SERVER_S3_ENDPOINT": "https://s3.local:9000"}},
		`server.s3_endpoint (DFKV_SERVER_S3_ENDPOINT) from env: "https://s3.local:9000" has a scheme; give host:port and choose https with s3_tls`)
	f("object prefix with a trailing slash", in{env: map[string]string{"DFKV_SERVER_S3_PREFIX": "cache/"}},
		`server.s3_prefix (DFKV_SERVER_S3_PREFIX) from env: "cache/" has a leading, trailing or doubled slash`)
	f("http on the data port", in{flags: map[string][]string{"listen": {"127.0.0.1:7601"}, "http-listen": {"127.0.0.1:7601"}}},
		`server.http_listen (DFKV_SERVER_HTTP_LISTEN) "127.0.0.1:7601" takes the port of server.listen (DFKV_SERVER_LISTEN) "127.0.0.1:7601"`)
	f("http on the data port through a wildcard", in{flags: map[string][]string{"listen": {"0.0.0.0:7601"}, "http-listen": {"127.0.0.1:7601"}}},
		`server.http_listen (DFKV_SERVER_HTTP_LISTEN) "127.0.0.1:7601" takes the port of server.listen (DFKV_SERVER_LISTEN) "0.0.0.0:7601"`)
	f("http on the data port spelt with a leading zero", in{flags: map[string][]string{"listen": {"0.0.0.0:07601"}, "http-listen": {"127.0.0.1:7601"}}},
		`server.http_listen (DFKV_SERVER_HTTP_LISTEN) "127.0.0.1:7601" takes the port of server.listen (DFKV_SERVER_LISTEN) "0.0.0.0:07601"`)
	f("wildcard listen registering with an MDS", in{flags: map[string][]string{"listen": {"0.0.0.0:7600"}, "mds": {"10.0.0.1:7700"}}},
		`server.listen (DFKV_SERVER_LISTEN) "0.0.0.0:7600" is not an address clients can dial`, "set server.advertise_addr")
	f("wildcard advertise address", in{flags: map[string][]string{"advertise-addr": {"0.0.0.0:7600"}, "mds": {"10.0.0.1:7700"}}},
		`server.advertise_addr (DFKV_SERVER_ADVERTISE_ADDR) "0.0.0.0:7600" is not an address clients can dial`)
	f("buffer budget under one buffer", in{flags: map[string][]string{"max-block-bytes": {"3MiB"}, "buffer-budget-bytes": {"3MiB"}}},
		`server.buffer_budget_bytes (DFKV_SERVER_BUFFER_BUDGET_BYTES) 3MiB is less than one buffer for the largest value (server.max_block_bytes 3MiB needs 4MiB)`)
	f("mds http on its control port", in{role: "mds", env: map[string]string{"DFKV_MDS_LISTEN": "127.0.0.1:7700", "DFKV_MDS_HTTP_LISTEN": "127.0.0.1:7700"}},
		`mds.http_listen (DFKV_MDS_HTTP_LISTEN) "127.0.0.1:7700" takes the port of mds.listen (DFKV_MDS_LISTEN) "127.0.0.1:7700"`)
	f("empty namespace", in{role: "ctl", env: map[string]string{"DFKV_CLIENT_NAMESPACE": ""}},
		`client.namespace (DFKV_CLIENT_NAMESPACE) from env: "" is empty; allowed 1..65536 bytes`)
	f("long namespace", in{role: "ctl", flags: map[string][]string{"namespace": {strings.Repeat("n", 65537)}}},
		`client.namespace (DFKV_CLIENT_NAMESPACE) from flag --namespace: "`+strings.Repeat("n", 64)+`"… (65537 bytes) is 65537 bytes long; allowed 1..65536 bytes`)

	// Out of range.
	f("size out of range from env", in{env: map[string]string{"DFKV_SERVER_MAX_BLOCK_BYTES": "9TiB"}},
		`server.max_block_bytes (DFKV_SERVER_MAX_BLOCK_BYTES) from env: "9TiB" is out of range; allowed 4KiB..1GiB`)
	f("size below range from file", in{file: "[server]\nmax_block_bytes = 4095\n"},
		`server.max_block_bytes (DFKV_SERVER_MAX_BLOCK_BYTES) from file PATH: 4095 is out of range; allowed 4KiB..1GiB`)
	f("size overflow from file", in{file: "[server]\ndisk_capacity_bytes = \"16777216TiB\"\n"},
		`server.disk_capacity_bytes (DFKV_SERVER_DISK_CAPACITY_BYTES) from file PATH: "16777216TiB" is too large`)
	f("negative size from file", in{file: "[server]\ndisk_capacity_bytes = -1\n"},
		`server.disk_capacity_bytes (DFKV_SERVER_DISK_CAPACITY_BYTES) from file PATH: -1 is negative`)
	f("count out of range from file", in{file: "[server]\nmax_batch_items = 0\n"},
		`server.max_batch_items (DFKV_SERVER_MAX_BATCH_ITEMS) from file PATH: 0 is out of range; allowed 1..65536`)
	f("count out of range from flag", in{role: "bench", flags: map[string][]string{"batch-concurrency": {"257"}}},
		`client.batch_concurrency (DFKV_CLIENT_BATCH_CONCURRENCY) from flag --batch-concurrency: "257" is out of range; allowed 1..256`)
	f("shards out of range from env", in{env: map[string]string{"DFKV_SERVER_RAM_TIER_SHARDS": "65"}},
		`server.ram_tier_shards (DFKV_SERVER_RAM_TIER_SHARDS) from env: "65" is out of range; allowed 1..64`)
	f("zero shards from file", in{file: "[server]\nram_tier_shards = 0\n"},
		`server.ram_tier_shards (DFKV_SERVER_RAM_TIER_SHARDS) from file PATH: 0 is out of range; allowed 1..64`)
	f("large reserve over the tier's largest size", in{env: map[string]string{"DFKV_SERVER_RAM_TIER_LARGE_RESERVE_BYTES": "17TiB"}},
		`server.ram_tier_large_reserve_bytes (DFKV_SERVER_RAM_TIER_LARGE_RESERVE_BYTES) from env: "17TiB" is out of range`)
	f("read coalesce is 0 or 1", in{env: map[string]string{"DFKV_SERVER_READ_COALESCE": "2"}},
		`server.read_coalesce (DFKV_SERVER_READ_COALESCE) from env: "2" is out of range; allowed 0..1`)
	f("negative millis", in{env: map[string]string{"DFKV_SERVER_FIRST_REQUEST_MS": "-1"}},
		`server.first_request_ms (DFKV_SERVER_FIRST_REQUEST_MS) from env: "-1" is out of range; allowed 0..3600000 milliseconds`)
	f("zero shutdown timeout", in{env: map[string]string{"DFKV_SERVER_SHUTDOWN_TIMEOUT_MS": "0"}},
		`server.shutdown_timeout_ms (DFKV_SERVER_SHUTDOWN_TIMEOUT_MS) from env: "0" is out of range; allowed 1..3600000 milliseconds`)
	f("dial timeout over its own max", in{role: "smoke", env: map[string]string{"DFKV_CLIENT_DIAL_TIMEOUT_MS": "600001"}},
		`client.dial_timeout_ms (DFKV_CLIENT_DIAL_TIMEOUT_MS) from env: "600001" is out of range; allowed 1..600000 milliseconds`)

	// Bad lists.
	f("empty element in env list", in{env: map[string]string{"DFKV_SERVER_DISKS": "/a,,/b"}},
		`server.disks (DFKV_SERVER_DISKS) from env: "/a,,/b" has an empty element 2; allowed one or more directories`)
	f("trailing comma in env list", in{role: "ctl", env: map[string]string{"DFKV_CLIENT_MEMBERS": "a:1,"}},
		`client.members (DFKV_CLIENT_MEMBERS) from env: "a:1," has an empty element 2`)
	f("empty env list", in{env: map[string]string{"DFKV_SERVER_DISKS": " "}},
		`server.disks (DFKV_SERVER_DISKS) from env: " " is empty`)
	f("empty element in file list", in{file: "[server]\ndisks = [\"/a\", \"\"]\n"},
		`server.disks (DFKV_SERVER_DISKS) from file PATH: ["/a", ""] has an empty element 2`)
	f("empty file list", in{file: "[server]\ndisks = []\n"},
		`server.disks (DFKV_SERVER_DISKS) from file PATH: [] is empty`)
	f("non-string element in file list", in{file: "[server]\ndisks = [\"/a\", 1]\n"},
		`server.disks (DFKV_SERVER_DISKS) from file PATH: [/a 1] has element 2 that is a TOML integer; want an array of strings`)
	f("empty element in flag list", in{flags: map[string][]string{"disks": {"/a", ""}}},
		`server.disks (DFKV_SERVER_DISKS) from flag --disks: ["/a", ""] has an empty element 2`)
	f("duplicate disks after Clean", in{env: map[string]string{"DFKV_SERVER_DISKS": "/d/a,/d/b/../a/"}},
		`server.disks (DFKV_SERVER_DISKS) from env: "/d/a,/d/b/../a/" names one directory twice (elements 1 and 2 are both /d/a)`)
	f("member without port", in{role: "smoke", env: map[string]string{"DFKV_CLIENT_MEMBERS": "a:1, b"}},
		`client.members (DFKV_CLIENT_MEMBERS) from env: "a:1, b" has element 2 "b" that is not host:port (missing port in address)`)
	f("member with port 0", in{role: "smoke", file: "[client]\nmembers = [\"a:0\"]\n"},
		`client.members (DFKV_CLIENT_MEMBERS) from file PATH: ["a:0"] has element 1 "a:0" that has port 0 out of range; allowed one or more host:port with port 1..65535`)
	f("member without host", in{role: "smoke", flags: map[string][]string{"members": {":7600"}}},
		`has element 1 ":7600" that has no host`)
	f("duplicate member", in{role: "smoke", flags: map[string][]string{"members": {"a:1", "a:1"}}},
		`names one member twice (elements 1 and 2 are both a:1)`)

	// Several problems are reported together.
	f("all errors at once", in{env: map[string]string{"DFKV_SERVER_LISTEN": "x", "DFKV_SERVER_MAX_CONNS": "0"}, flags: map[string][]string{"max-batch-items": {"y"}}},
		`server.listen (DFKV_SERVER_LISTEN) from env`, `server.max_batch_items (DFKV_SERVER_MAX_BATCH_ITEMS) from flag --max-batch-items`)
	f("all range errors at once", in{env: map[string]string{"DFKV_SERVER_MAX_CONNS": "0", "DFKV_SERVER_MAX_BATCH_ITEMS": "0"}},
		`server.max_batch_items (DFKV_SERVER_MAX_BATCH_ITEMS) from env: "0" is out of range`, `server.max_conns (DFKV_SERVER_MAX_CONNS) from env: "0" is out of range`)

	// Caller mistakes.
	f("flag of another role", in{flags: map[string][]string{"members": {"a:1"}}},
		`config: --members: not a setting flag of role server`)
	f("unknown role", in{role: "proxy"}, `config: unknown role "proxy"; valid roles are server, mds, smoke, bench, ctl`)
}

// TestMissingFile: a file that is named must exist, whoever names it.
func TestMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.toml")
	f := func(file string, env map[string]string, want string) {
		t.Helper()
		_, _, err := LoadFrom("server", file, envOf(env), nil)
		if err == nil {
			t.Fatalf("missing file %s loaded", missing)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("error %v does not match fs.ErrNotExist", err)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not contain %q", err, want)
		}
	}
	f(missing, nil, "config file "+missing+" (from --config): no such file")
	f("", map[string]string{"DFKV_CONFIG": missing}, "config file "+missing+" (from DFKV_CONFIG): no such file")

	// A directory is not a file; the error is a read error, not "no such file".
	_, _, err := LoadFrom("server", t.TempDir(), nil, nil)
	if err == nil || errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "cannot read config file") {
		t.Fatalf("directory as config file: %v", err)
	}
}

// TestScalarFlagLastWins: like a command line, the last value of a repeated
// scalar flag wins.
func TestScalarFlagLastWins(t *testing.T) {
	cfg, _, err := LoadFrom("server", "", nil, map[string][]string{"max-conns": {"1", "2"}})
	if err != nil || cfg.Server.MaxConns != 2 {
		t.Fatalf("max-conns %d, %v; want 2", cfg.Server.MaxConns, err)
	}
	if _, _, err := LoadFrom("server", "", nil, map[string][]string{"max-conns": {}}); err == nil || !strings.Contains(err.Error(), "--max-conns was set without a value") {
		t.Fatalf("scalar flag without value: %v", err)
	}
}

// TestLoadFromReturnsOwnLists: the Config's lists are not shared with the
// flags map or the Resolved printout.
func TestLoadFromReturnsOwnLists(t *testing.T) {
	flags := map[string][]string{"disks": {"/a", "/b"}}
	cfg, r, err := LoadFrom("server", "", nil, flags)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.Disks[0] = "/changed"
	if flags["disks"][0] != "/a" {
		t.Fatal("Config shares its disk list with the caller's flags")
	}
	if r.cfg.Server.Disks[0] != "/a" {
		t.Fatal("Config shares its disk list with Resolved")
	}
}

// TestUnknownTableReportedOnce: a bad table is one error, not one per key
// inside it.
func TestUnknownTableReportedOnce(t *testing.T) {
	path := writeTOML(t, "[tls]\nlisten = \"x:1\"\ndb = \"y\"\n[server.tls]\ncert = \"c\"\n")
	_, _, err := LoadFrom("server", path, nil, nil)
	if err == nil {
		t.Fatal("unknown tables loaded")
	}
	msg := err.Error()
	if got := strings.Count(msg, "\n") + 1; got != 2 {
		t.Fatalf("want 2 errors ([tls], server.tls), got %d:\n%s", got, msg)
	}
	if strings.Contains(msg, "mds.listen") || strings.Contains(msg, "server.tls.cert") {
		t.Fatalf("keys inside a reported table are reported again:\n%s", msg)
	}
}

// TestNoEffectWarnings: a setting given that the rest of the configuration
// makes moot is a warning naming it and why; defaults and settings that do
// apply are not.
func TestNoEffectWarnings(t *testing.T) {
	for key := range ramTierOnly {
		if lookupKey(key) == nil {
			t.Fatalf("ramTierOnly names %q, which is not a setting", key)
		}
	}
	for key := range slabOnly {
		if lookupKey(key) == nil {
			t.Fatalf("slabOnly names %q, which is not a setting", key)
		}
	}
	warnings := func(role string, flags map[string][]string) string {
		t.Helper()
		_, res, err := LoadFrom(role, "", nil, flags)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(res.Warnings(), "\n")
	}
	w := warnings("server", map[string][]string{"ram-write-mode": {"writearound"}, "put-ack-mode": {"disk"}})
	for _, want := range []string{
		"server.ram_write_mode (DFKV_SERVER_RAM_WRITE_MODE) is set from flag --ram-write-mode but has no effect: server.ram_tier is 0",
		"server.put_ack_mode (DFKV_SERVER_PUT_ACK_MODE) is set from flag --put-ack-mode but has no effect",
	} {
		if !strings.Contains(w, want) {
			t.Fatalf("warnings %q lack %q", w, want)
		}
	}
	if w := warnings("server", map[string][]string{"ram-tier": {"1"}, "ram-tier-bytes": {"1GiB"}, "put-ack-mode": {"disk"}}); w != "" {
		t.Fatalf("the tier on: warnings %q, want none", w)
	}
	if w := warnings("server", nil); w != "" {
		t.Fatalf("defaults: warnings %q, want none", w)
	}
	// dfkv.example.toml spells out every default, the RAM tier's too;
	// starting from it must not warn about them.
	if _, res, err := LoadFrom("server", "../dfkv.example.toml", nil, nil); err != nil || len(res.Warnings()) != 0 {
		t.Fatalf("dfkv.example.toml: %v, warnings %q, want none", err, res.Warnings())
	}
	if w := warnings("server", map[string][]string{"store-engine": {"file"}, "scrub-bytes-per-second": {"1GiB"}}); !strings.Contains(w, `server.scrub_bytes_per_second (DFKV_SERVER_SCRUB_BYTES_PER_SECOND) is set from flag --scrub-bytes-per-second but has no effect: server.store_engine is "file"`) {
		t.Fatalf("a scrub rate with the file engine: warnings %q", w)
	}
	if w := warnings("server", map[string][]string{"scrub-bytes-per-second": {"1GiB"}, "scrub-interval-hours": {"0"}}); w != "" {
		t.Fatalf("scrub settings with the slab engine: warnings %q, want none", w)
	}
	if w := warnings("ctl", map[string][]string{"members": {"a:1"}, "mds": {"m:7700"}}); !strings.Contains(w, "client.members (DFKV_CLIENT_MEMBERS) is set from flag --members but has no effect: client.mds is set") {
		t.Fatalf("members beside an MDS: warnings %q", w)
	}
}

// TestSameListener: two listen addresses collide when they name one fixed
// port, as numbers, on one host or through a wildcard; port 0 (in any
// spelling) picks a free port each time and never collides.
func TestSameListener(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1:7600", "127.0.0.1:7600", true},
		{"0.0.0.0:7600", "127.0.0.1:7600", true},
		{"127.0.0.1:7600", ":7600", true},
		{"0.0.0.0:07600", "127.0.0.1:7600", true},
		{"127.0.0.1:7600", "127.0.0.2:7600", false},
		{"127.0.0.1:7600", "127.0.0.1:7680", false},
		{"127.0.0.1:0", "127.0.0.1:00", false},
		{"127.0.0.1:7600", "", false},
		{"not an address", "127.0.0.1:7600", false},
	} {
		if got := sameListener(c.a, c.b); got != c.want {
			t.Errorf("sameListener(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// A secret written wrongly in a file (an array, a bare word, a number
// too large, a float) is refused with the setting named and its value
// not shown: the error goes to stderr and the journal.
func TestFileSecretsAreNeverEchoed(t *testing.T) {
	const secret = "SECRETabcdefghijklmnop"
	for _, c := range []struct{ role, text string }{
		{"bench", "[client]\ntoken = [\"" + secret + "\"]\n"},
		{"bench", "[client]\ntoken = " + secret + "\n"},
		{"server", "[server]\nmds_token = 1234567890123456789012345\n"},
		{"bench", "[client]\n\"token\" = 3.5e7\n"},
	} {
		_, _, err := LoadText(c.role, "test configuration", c.text, nil, nil)
		if err == nil {
			t.Fatalf("%q: accepted", c.text)
		}
		msg := err.Error()
		for _, leak := range []string{secret, "SECRETabc", "1234567890123456789012345", "3.5e", "35000000"} {
			if strings.Contains(msg, leak) {
				t.Fatalf("%q: the error shows the secret: %s", c.text, msg)
			}
		}
		if !strings.Contains(msg, "token") {
			t.Fatalf("%q: the error does not name the setting: %s", c.text, msg)
		}
	}
}

// A 0/1 setting takes a TOML boolean in a file, as its help says.
func TestFileBooleansForOnOffSettings(t *testing.T) {
	cfg, _, err := LoadText("bench", "test configuration", "[client]\ntls = true\n", nil, nil)
	if err != nil || cfg.Client.TLS != 1 {
		t.Fatalf("tls = true: %v, %+v", err, cfg)
	}
	cfg, _, err = LoadText("mds", "test configuration", "[mds]\nmembers_need_token = false\n", nil, nil)
	if err != nil || cfg.MDS.MembersNeedToken != 0 {
		t.Fatalf("members_need_token = false: %v", err)
	}
}
