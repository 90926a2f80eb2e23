package config

import (
	"strings"
	"testing"
)

// TestSettingsTable pins each row's names, the earlier names it still
// accepts, its roles and default, which roles, scripts and operators rely on.
func TestSettingsTable(t *testing.T) {
	const all = "server, mds, smoke, bench, ctl"
	const tools = "smoke, bench, ctl"
	want := [][7]string{ // key, env, flag, old env, old flag, roles, default
		{"group", "DFKV_GROUP", "group", "", "", all, "default"},
		{"server.id", "DFKV_SERVER_ID", "id", "", "", "server", ""},
		{"server.listen", "DFKV_SERVER_LISTEN", "listen", "DFKV_LISTEN", "", "server", "127.0.0.1:7600"},
		{"server.http_listen", "DFKV_SERVER_HTTP_LISTEN", "http-listen", "DFKV_HTTP_LISTEN", "", "server", "127.0.0.1:7680"},
		{"server.http_token_file", "DFKV_SERVER_HTTP_TOKEN_FILE", "http-token-file", "", "", "server", ""},
		{"server.tls_cert", "DFKV_SERVER_TLS_CERT", "tls-cert", "", "", "server", ""},
		{"server.tls_key", "DFKV_SERVER_TLS_KEY", "tls-key", "", "", "server", ""},
		{"server.tls_client_ca", "DFKV_SERVER_TLS_CLIENT_CA", "tls-client-ca", "", "", "server", ""},
		{"server.tls_min_version", "DFKV_SERVER_TLS_MIN_VERSION", "tls-min-version", "", "", "server", "1.3"},
		{"server.http_tls", "DFKV_SERVER_HTTP_TLS", "http-tls", "", "", "server", "0"},
		{"server.mds_tls_ca", "DFKV_SERVER_MDS_TLS_CA", "mds-tls-ca", "", "", "server", ""},
		{"server.advertise_addr", "DFKV_SERVER_ADVERTISE_ADDR", "advertise-addr", "DFKV_ADVERTISE_ADDR", "", "server", ""},
		{"server.weight", "DFKV_SERVER_WEIGHT", "weight", "", "", "server", "1"},
		{"server.mds", "DFKV_SERVER_MDS", "mds", "DFKV_MDS_ADDRS", "", "server", ""},
		{"server.mds_token", "DFKV_SERVER_MDS_TOKEN", "mds-token", "", "", "server", ""},
		{"server.disks", "DFKV_SERVER_DISKS", "disks", "DFKV_DISKS", "disk", "server", "./dfkv-data/disk0"},
		{"server.disk_capacity_bytes", "DFKV_SERVER_DISK_CAPACITY_BYTES", "disk-capacity-bytes", "DFKV_DISK_CAPACITY_BYTES", "disk-capacity", "server", "0"},
		{"server.store_engine", "DFKV_SERVER_STORE_ENGINE", "store-engine", "DFKV_STORE_ENGINE", "", "server", "slab"},
		{"server.slab_extent_bytes", "DFKV_SERVER_SLAB_EXTENT_BYTES", "slab-extent-bytes", "DFKV_SLAB_EXTENT_BYTES", "", "server", "0"},
		{"server.scrub_bytes_per_second", "DFKV_SERVER_SCRUB_BYTES_PER_SECOND", "scrub-bytes-per-second", "DFKV_SCRUB_BYTES_PER_SECOND", "scrub-rate", "server", "64MiB"},
		{"server.scrub_interval_hours", "DFKV_SERVER_SCRUB_INTERVAL_HOURS", "scrub-interval-hours", "DFKV_SCRUB_INTERVAL_HOURS", "", "server", "168"},
		{"server.uring", "DFKV_SERVER_URING", "uring", "", "", "server", "1"},
		{"server.pprof", "DFKV_SERVER_PPROF", "pprof", "DFKV_PPROF", "", "server", "0"},
		{"server.ram_tier", "DFKV_SERVER_RAM_TIER", "ram-tier", "DFKV_RAM_TIER", "", "server", "0"},
		{"server.ram_tier_bytes", "DFKV_SERVER_RAM_TIER_BYTES", "ram-tier-bytes", "DFKV_RAM_TIER_BYTES", "", "server", "0"},
		{"server.ram_write_mode", "DFKV_SERVER_RAM_WRITE_MODE", "ram-write-mode", "DFKV_RAM_WRITE_MODE", "", "server", "writeback"},
		{"server.put_ack_mode", "DFKV_SERVER_PUT_ACK_MODE", "put-ack-mode", "DFKV_PUT_ACK_MODE", "", "server", "ram"},
		{"server.ram_flush_threads", "DFKV_SERVER_RAM_FLUSH_THREADS", "ram-flush-threads", "DFKV_RAM_FLUSH_THREADS", "", "server", "0"},
		{"server.ram_flush_delay_ms", "DFKV_SERVER_RAM_FLUSH_DELAY_MS", "ram-flush-delay-ms", "DFKV_RAM_FLUSH_DELAY_MS", "", "server", "0"},
		{"server.ram_tier_shards", "DFKV_SERVER_RAM_TIER_SHARDS", "ram-tier-shards", "DFKV_RAM_TIER_SHARDS", "", "server", "8"},
		{"server.ram_tier_large_reserve_bytes", "DFKV_SERVER_RAM_TIER_LARGE_RESERVE_BYTES", "ram-tier-large-reserve-bytes", "DFKV_RAM_TIER_LARGE_RESERVE_BYTES", "", "server", "auto"},
		{"server.ram_tier_numa", "DFKV_SERVER_RAM_TIER_NUMA", "ram-tier-numa", "DFKV_RAM_TIER_NUMA", "", "server", "interleave"},
		{"server.read_coalesce", "DFKV_SERVER_READ_COALESCE", "read-coalesce", "DFKV_READ_COALESCE", "", "server", "1"},
		{"server.shm_socket", "DFKV_SERVER_SHM_SOCKET", "shm-socket", "", "", "server", ""},
		{"server.shm_socket_mode", "DFKV_SERVER_SHM_SOCKET_MODE", "shm-socket-mode", "", "", "server", "0600"},
		{"server.lease_ms", "DFKV_SERVER_LEASE_MS", "lease-ms", "", "", "server", "2000"},
		{"server.lease_max", "DFKV_SERVER_LEASE_MAX", "lease-max", "", "", "server", "65536"},
		{"server.shm_staging_bytes", "DFKV_SERVER_SHM_STAGING_BYTES", "shm-staging-bytes", "", "", "server", "64MiB"},
		{"server.s3_endpoint", "DFKV_SERVER_S3_ENDPOINT", "s3-endpoint", "", "", "server", ""},
		{"server.s3_bucket", "DFKV_SERVER_S3_BUCKET", "s3-bucket", "", "", "server", ""},
		{"server.s3_prefix", "DFKV_SERVER_S3_PREFIX", "s3-prefix", "", "", "server", "dfkv"},
		{"server.s3_region", "DFKV_SERVER_S3_REGION", "s3-region", "", "", "server", "us-east-1"},
		{"server.s3_bucket_lookup", "DFKV_SERVER_S3_BUCKET_LOOKUP", "s3-bucket-lookup", "", "", "server", "auto"},
		{"server.s3_tls", "DFKV_SERVER_S3_TLS", "s3-tls", "", "", "server", "1"},
		{"server.s3_credentials_file", "DFKV_SERVER_S3_CREDENTIALS_FILE", "s3-credentials-file", "", "", "server", ""},
		{"server.s3_profile", "DFKV_SERVER_S3_PROFILE", "s3-profile", "", "", "server", ""},
		{"server.s3_write", "DFKV_SERVER_S3_WRITE", "s3-write", "", "", "server", "async"},
		{"server.s3_exist", "DFKV_SERVER_S3_EXIST", "s3-exist", "", "", "server", "remote"},
		{"server.s3_timeout_ms", "DFKV_SERVER_S3_TIMEOUT_MS", "s3-timeout-ms", "", "", "server", "5000"},
		{"server.s3_upload_workers", "DFKV_SERVER_S3_UPLOAD_WORKERS", "s3-upload-workers", "", "", "server", "8"},
		{"server.s3_upload_queue_bytes", "DFKV_SERVER_S3_UPLOAD_QUEUE_BYTES", "s3-upload-queue-bytes", "", "", "server", "256MiB"},
		{"server.max_block_bytes", "DFKV_SERVER_MAX_BLOCK_BYTES", "max-block-bytes", "DFKV_MAX_BLOCK_BYTES", "", "server, " + tools, "64MiB"},
		{"server.max_batch_items", "DFKV_SERVER_MAX_BATCH_ITEMS", "max-batch-items", "DFKV_MAX_BATCH_ITEMS", "", "server", "4096"},
		{"server.max_conns", "DFKV_SERVER_MAX_CONNS", "max-conns", "DFKV_MAX_CONNS", "", "server", "4096"},
		{"server.buffer_budget_bytes", "DFKV_SERVER_BUFFER_BUDGET_BYTES", "buffer-budget-bytes", "DFKV_BUFFER_BUDGET_BYTES", "buffer-budget", "server", "0"},
		{"server.socket_buffer_bytes", "DFKV_SERVER_SOCKET_BUFFER_BYTES", "socket-buffer-bytes", "DFKV_SOCKET_BUFFER_BYTES", "socket-buffer", "server", "0"},
		{"server.first_request_ms", "DFKV_SERVER_FIRST_REQUEST_MS", "first-request-ms", "DFKV_TCP_FIRST_REQ_MS", "", "server", "30000"},
		{"server.body_timeout_ms", "DFKV_SERVER_BODY_TIMEOUT_MS", "body-timeout-ms", "DFKV_TCP_BODY_TIMEOUT_MS", "", "server", "60000"},
		{"server.metrics_first_request_ms", "DFKV_SERVER_METRICS_FIRST_REQUEST_MS", "metrics-first-request-ms", "DFKV_METRICS_FIRST_REQ_MS", "", "server", "30000"},
		{"server.drain_ms", "DFKV_SERVER_DRAIN_MS", "drain-ms", "", "", "server", "2000"},
		{"server.shutdown_timeout_ms", "DFKV_SERVER_SHUTDOWN_TIMEOUT_MS", "shutdown-timeout-ms", "DFKV_SHUTDOWN_TIMEOUT_MS", "", "server", "30000"},
		{"server.credentials_file", "DFKV_SERVER_CREDENTIALS_FILE", "credentials-file", "", "", "server", ""},
		{"server.tenant_quotas_file", "DFKV_SERVER_TENANT_QUOTAS_FILE", "tenant-quotas-file", "DFKV_TENANT_QUOTAS_FILE", "", "server", ""},
		{"server.tenant_default_quota_bytes", "DFKV_SERVER_TENANT_DEFAULT_QUOTA_BYTES", "tenant-default-quota-bytes", "DFKV_TENANT_DEFAULT_QUOTA_BYTES", "tenant-default-quota", "server", "0"},
		{"client.members", "DFKV_CLIENT_MEMBERS", "members", "DFKV_MEMBERS", "", tools, "127.0.0.1:7600"},
		{"client.mds", "DFKV_CLIENT_MDS", "mds", "DFKV_MDS_ADDRS", "", tools, ""},
		{"client.mds_poll_ms", "DFKV_CLIENT_MDS_POLL_MS", "mds-poll-ms", "DFKV_MDS_POLL_MS", "", tools, "500"},
		{"client.namespace", "DFKV_CLIENT_NAMESPACE", "namespace", "DFKV_NAMESPACE", "", tools, "dfkv-tools"},
		{"client.token", "DFKV_CLIENT_TOKEN", "token", "DFKV_TOKEN", "", tools, ""},
		{"client.tls", "DFKV_CLIENT_TLS", "tls", "", "", tools, "0"},
		{"client.tls_ca", "DFKV_CLIENT_TLS_CA", "tls-ca", "", "", tools, ""},
		{"client.tls_cert", "DFKV_CLIENT_TLS_CERT", "tls-cert", "", "", tools, ""},
		{"client.tls_key", "DFKV_CLIENT_TLS_KEY", "tls-key", "", "", tools, ""},
		{"client.tls_server_name", "DFKV_CLIENT_TLS_SERVER_NAME", "tls-server-name", "", "", tools, ""},
		{"client.timeout_ms", "DFKV_CLIENT_TIMEOUT_MS", "timeout-ms", "", "", tools, "10000"},
		{"client.dial_timeout_ms", "DFKV_CLIENT_DIAL_TIMEOUT_MS", "dial-timeout-ms", "", "", tools, "2000"},
		{"client.pool_size", "DFKV_CLIENT_POOL_SIZE", "pool-size", "", "", tools, "16"},
		{"client.shm", "DFKV_CLIENT_SHM", "shm", "", "", tools, "auto"},
		{"client.embedded", "DFKV_CLIENT_EMBEDDED", "embedded", "", "", tools, "0"},
		{"client.batch_concurrency", "DFKV_CLIENT_BATCH_CONCURRENCY", "batch-concurrency", "DFKV_BATCH_CONCURRENCY", "", tools, "8"},
		{"mds.listen", "DFKV_MDS_LISTEN", "listen", "", "", "mds", "127.0.0.1:7700"},
		{"mds.http_listen", "DFKV_MDS_HTTP_LISTEN", "http-listen", "", "", "mds", "127.0.0.1:7780"},
		{"mds.http_token_file", "DFKV_MDS_HTTP_TOKEN_FILE", "http-token-file", "", "", "mds", ""},
		{"mds.tls_cert", "DFKV_MDS_TLS_CERT", "tls-cert", "", "", "mds", ""},
		{"mds.tls_key", "DFKV_MDS_TLS_KEY", "tls-key", "", "", "mds", ""},
		{"mds.tls_client_ca", "DFKV_MDS_TLS_CLIENT_CA", "tls-client-ca", "", "", "mds", ""},
		{"mds.tls_min_version", "DFKV_MDS_TLS_MIN_VERSION", "tls-min-version", "", "", "mds", "1.3"},
		{"mds.http_tls", "DFKV_MDS_HTTP_TLS", "http-tls", "", "", "mds", "0"},
		{"mds.node_credentials_file", "DFKV_MDS_NODE_CREDENTIALS_FILE", "node-credentials-file", "", "", "mds", ""},
		{"mds.members_need_token", "DFKV_MDS_MEMBERS_NEED_TOKEN", "members-need-token", "", "", "mds", "0"},
		{"mds.etcd_endpoints", "DFKV_MDS_ETCD_ENDPOINTS", "etcd-endpoints", "DFKV_ETCD_ENDPOINTS", "etcd", "mds", ""},
		{"mds.etcd_prefix", "DFKV_MDS_ETCD_PREFIX", "etcd-prefix", "DFKV_ETCD_PREFIX", "", "mds", "/dfkv"},
		{"mds.db_path", "DFKV_MDS_DB_PATH", "db-path", "DFKV_MDS_DB", "db", "mds", "./dfkv-data/mds.db"},
		{"mds.heartbeat_ttl_ms", "DFKV_MDS_HEARTBEAT_TTL_MS", "heartbeat-ttl-ms", "", "", "mds", "10000"},
		{"mds.first_request_ms", "DFKV_MDS_FIRST_REQUEST_MS", "first-request-ms", "DFKV_MDS_FIRST_REQ_MS", "", "mds", "30000"},
		{"mds.metrics_first_request_ms", "DFKV_MDS_METRICS_FIRST_REQUEST_MS", "metrics-first-request-ms", "DFKV_METRICS_FIRST_REQ_MS", "", "mds", "30000"},
		{"mds.probe_cache_ms", "DFKV_MDS_PROBE_CACHE_MS", "probe-cache-ms", "", "", "mds", "2500"},
		{"bench.workload", "DFKV_BENCH_WORKLOAD", "workload", "", "", "bench", "put"},
		{"bench.protocol", "DFKV_BENCH_PROTOCOL", "protocol", "", "", "bench", "dfkv"},
		{"bench.addr", "DFKV_BENCH_ADDR", "addr", "", "", "bench", ""},
		{"bench.value_size", "DFKV_BENCH_VALUE_SIZE", "value-size", "", "", "bench", "1MiB"},
		{"bench.keys", "DFKV_BENCH_KEYS", "keys", "", "", "bench", "1024"},
		{"bench.concurrency", "DFKV_BENCH_CONCURRENCY", "concurrency", "", "c", "bench", "16"},
		{"bench.duration", "DFKV_BENCH_DURATION", "duration", "", "", "bench", "10s"},
		{"bench.ops", "DFKV_BENCH_OPS", "ops", "", "", "bench", "0"},
		{"bench.warmup", "DFKV_BENCH_WARMUP", "warmup", "", "", "bench", "1s"},
		{"bench.sweep", "DFKV_BENCH_SWEEP", "sweep", "", "", "bench", ""},
		{"bench.fill", "DFKV_BENCH_FILL", "fill", "", "", "bench", "auto"},
		{"bench.mixed_get_ratio", "DFKV_BENCH_MIXED_GET_RATIO", "mixed-get-ratio", "", "", "bench", "0.9"},
		{"bench.sequences", "DFKV_BENCH_SEQUENCES", "sequences", "", "", "bench", "64"},
		{"bench.pages_per_seq", "DFKV_BENCH_PAGES_PER_SEQ", "pages-per-seq", "", "", "bench", "16"},
		{"bench.shared_prefix", "DFKV_BENCH_SHARED_PREFIX", "shared-prefix", "", "", "bench", "0.5"},
		{"bench.key_prefix", "DFKV_BENCH_KEY_PREFIX", "key-prefix", "", "", "bench", "bench/"},
		{"bench.seed", "DFKV_BENCH_SEED", "seed", "", "", "bench", "1"},
		{"log.level", "DFKV_LOG_LEVEL", "log-level", "", "", all, "info"},
		{"log.format", "DFKV_LOG_FORMAT", "log-format", "", "", all, "text"},
	}
	if len(settings) != len(want) {
		t.Errorf("table has %d rows; want %d", len(settings), len(want))
	}
	for i := 0; i < len(settings) && i < len(want); i++ {
		s := &settings[i]
		got := [7]string{s.key, s.env, s.flag, s.oldEnv, s.oldFlag, s.roles.String(), s.def}
		if got != want[i] {
			t.Errorf("row %d:\n got %q\nwant %q", i, got, want[i])
		}
	}
}

// TestSettingsTableWellFormed: names are unique and spelled alike, so the
// env, flag and TOML bindings cannot collide, and every row has help.
func TestSettingsTableWellFormed(t *testing.T) {
	// Flags may repeat only across rows of disjoint roles (server.mds and
	// client.mds share --mds); within one role every binding is unique.
	keys := map[string]bool{}
	envs, flags := map[string]role{}, map[string]role{}
	lastSection := ""
	seenSection := map[string]bool{}
	for i := range settings {
		s := &settings[i]
		if keys[s.key] || envs[s.env]&s.roles != 0 || flags[s.flag]&s.roles != 0 {
			t.Errorf("%s: key, env or flag used twice within a role", s.key)
		}
		keys[s.key] = true
		envs[s.env] |= s.roles
		flags[s.flag] |= s.roles
		if s.env != envName(s.key) || s.flag != flagName(s.key) {
			t.Errorf("%s: env %s and flag %s do not follow from the key", s.key, s.env, s.flag)
		}
		if !strings.HasPrefix(s.env, "DFKV_") || strings.ToUpper(s.env) != s.env {
			t.Errorf("%s: env %s is not DFKV_ upper case", s.key, s.env)
		}
		if strings.ToLower(s.flag) != s.flag || strings.ContainsAny(s.flag, "_. ") || s.flag == flagConfig || s.flag == FlagPrintConfig {
			t.Errorf("%s: flag %q is not a lower-case dashed name of its own", s.key, s.flag)
		}
		if strings.Count(s.key, ".") > 1 || strings.ToLower(s.key) != s.key {
			t.Errorf("%s: key is not lower-case section.name", s.key)
		}
		if s.roles == 0 || s.help == "" || s.value.allowed() == "" {
			t.Errorf("%s: no roles, help or allowed text", s.key)
		}
		// Rows of one section stay together: the example file and
		// --print-config show them grouped.
		if sec := s.section(); sec != lastSection {
			if seenSection[sec] {
				t.Errorf("%s: section [%s] split across the table", s.key, sec)
			}
			seenSection[sec], lastSection = true, sec
		}
	}
	// An earlier name must not be a current name in the same role, or one
	// spelling would set two settings.
	for i := range settings {
		s := &settings[i]
		if s.oldEnv != "" && envs[s.oldEnv]&s.roles != 0 {
			t.Errorf("%s: earlier env %s is a current env name in its roles", s.key, s.oldEnv)
		}
		if s.oldFlag != "" && flags[s.oldFlag]&s.roles != 0 {
			t.Errorf("%s: earlier flag %s is a current flag in its roles", s.key, s.oldFlag)
		}
	}
	for _, name := range append(append([]string{}, otherEnv...), notBuiltEnv...) {
		if envs[name] != 0 {
			t.Errorf("%s is a setting and also in otherEnv or notBuiltEnv; drop it from there", name)
		}
	}
}
