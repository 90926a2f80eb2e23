// Package quota reads the tenant quotas file a node is configured with
// (server.tenant_quotas_file) into the engine's per-tenant byte limits,
// and says at start which tenants already hold more than theirs. The file
// is the operator's; its errors name the file, the entry and the setting,
// and `dfkv server --print-config` checks it as a start would.
package quota

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/BurntSushi/toml"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// Load reads the tenant quotas file (DFKV_SERVER_TENANT_QUOTAS_FILE):
//
//	[tenants]
//	"acme" = "100GiB"              # a tenant name: the tenant field of its namespace
//	"0x9f2c4e6a8b1d3f50" = "1TiB"  # or its 64-bit tenant hash, 16 hex digits
//
// A name is hashed exactly as the client hashes a namespace's tenant
// (wire.TenantHash), so operators write the names their connectors use.
// Sizes take the same forms as every size setting. Anything else in the
// file is an error naming it. With no file and a zero default, Load
// returns nil: no quotas.
func Load(path string, def uint64) (*engine.Quotas, error) {
	limits := map[uint64]uint64{}
	names := map[uint64]string{}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("tenant quotas file %s (server.tenant_quotas_file / DFKV_SERVER_TENANT_QUOTAS_FILE): "+format, append([]any{path}, args...)...)
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("tenant quotas file (server.tenant_quotas_file / DFKV_SERVER_TENANT_QUOTAS_FILE): %w", err)
		}
		var doc map[string]any
		_, err = toml.Decode(string(data), &doc)
		if err != nil {
			return nil, bad("%w", err)
		}
		for k, v := range doc {
			if k != "tenants" {
				return nil, bad("unknown key %q; the file holds one [tenants] table of name = size", k)
			}
			table, ok := v.(map[string]any)
			if !ok {
				return nil, bad("tenants must be a table of name = size")
			}
			for name, raw := range table {
				hash, byHash, err := wire.ParseTenant(name)
				if err != nil {
					return nil, bad("%w", err)
				}
				size, err := quotaSize(raw)
				if err != nil {
					return nil, bad("tenant %q: %w", name, err)
				}
				if _, dup := limits[hash]; dup {
					return nil, bad("tenant %q is listed twice (by name and by hash?)", name)
				}
				limits[hash] = size
				if !byHash {
					names[hash] = name
				}
			}
		}
	}
	if len(limits) == 0 && def == 0 {
		return nil, nil
	}
	q := engine.NewQuotas(def, limits)
	q.SetNames(names)
	return q, nil
}

func quotaSize(raw any) (uint64, error) {
	switch v := raw.(type) {
	case string:
		return config.ParseSize(v)
	case int64:
		if v < 0 {
			return 0, fmt.Errorf("negative size %d", v)
		}
		return uint64(v), nil
	default:
		return 0, fmt.Errorf("size must be a string such as \"100GiB\" or a number of bytes, not %T", raw)
	}
}

// overQuotaLines bounds the start-up lines about tenants over their quota.
const overQuotaLines = 10

// WarnOver says at start which tenants already hold more than their
// quota (it was lowered, or the default set, since they stored it): their
// new keys are refused until their own removals or evictions bring them
// under, and nothing is evicted to meet the quota, so an operator who
// lowered one should know it bites at once.
func WarnOver(log *slog.Logger, q *engine.Quotas) {
	over := 0
	for tenant, used := range q.Usage() {
		limit := q.Limit(tenant)
		if limit == 0 || used <= int64(limit) {
			continue
		}
		if over < overQuotaLines {
			log.Warn("tenant holds more than its quota: its new keys are refused until removals or evictions bring it under (nothing is evicted to meet a quota)",
				"tenant", q.Label(tenant), "committed_bytes", used, "quota_bytes", limit)
		}
		over++
	}
	if over > overQuotaLines {
		log.Warn("more tenants hold more than their quota", "not_listed", over-overQuotaLines)
	}
}
