// Package creds reads the credentials files a node and the MDS check
// clients against, and keeps them current while the process runs.
//
// A file lists credentials as TOML tables; each names a secret token by
// its SHA-256 only, so the file grants access without holding anything
// that would let a reader use it:
//
//	[[credential]]
//	name = "team-a"                      # for logs and metrics, never the token
//	token_sha256 = "9f86d081884c7d65…"   # printf %s "$TOKEN" | sha256sum
//	# or, instead of a token, a TLS client certificate the node verified:
//	# cert_common_name = "team-a-inference"
//	tenants = ["acme", "0x9f2c4e6a8b1d3f50"]   # or ["*"]: every tenant
//	allow = ["read", "write", "remove"]        # and "stats"
//
// A token is presented once per connection; the process hashes it and
// looks the hash up, so a lookup costs one SHA-256 per connection and
// nothing per request. Files are read at start (an error refuses the
// start and names the line) and again on SIGHUP or when they change
// (Watch); a reload that fails keeps what was in force and is logged
// once.
package creds

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/dfkv/dfkv/wire"
)

// Sum is a token's SHA-256, the only form of it a process keeps.
type Sum [sha256.Size]byte

// SumOf hashes a token as presented on the wire.
func SumOf(token []byte) Sum { return sha256.Sum256(token) }

// UnmarshalText reads the 64 hex digits of token_sha256.
func (s *Sum) UnmarshalText(b []byte) error {
	t := strings.TrimSpace(string(b))
	if len(t) != 2*sha256.Size {
		return fmt.Errorf("token_sha256 must be 64 hex digits (printf %%s \"$TOKEN\" | sha256sum), got %d characters", len(t))
	}
	if _, err := hex.Decode(s[:], []byte(t)); err != nil {
		return fmt.Errorf("token_sha256 must be 64 hex digits: %v", err)
	}
	return nil
}

// Right is one thing a credential may do to a tenant's blocks.
type Right uint8

const (
	Read   Right = 1 << iota // GET, EXIST and their batch forms
	Write                    // PUT, BATCH_PUT
	Remove                   // REMOVE, BATCH_REMOVE
	Stats                    // STATS: on "*", the node's figures; on named tenants, only theirs
)

var rightNames = map[string]Right{"read": Read, "write": Write, "remove": Remove, "stats": Stats}

// UnmarshalText reads one element of allow.
func (r *Right) UnmarshalText(b []byte) error {
	v, ok := rightNames[string(b)]
	if !ok {
		return fmt.Errorf("allow: unknown right %q; rights are read, write, remove and stats", b)
	}
	*r = v
	return nil
}

// tenantRef is one element of tenants: a name hashed as clients hash a
// namespace's tenant, its 64-bit hash as 0x and 16 hex digits, or "*".
type tenantRef struct {
	all  bool
	hash uint64
	name string // "" when given by hash
}

func (t *tenantRef) UnmarshalText(b []byte) error {
	if string(b) == "*" {
		t.all = true
		return nil
	}
	hash, byHash, err := wire.ParseTenant(string(b))
	if err != nil {
		return fmt.Errorf("tenants: %w", err)
	}
	t.hash = hash
	if !byHash {
		t.name = string(b)
	}
	return nil
}

// Grant is what one credential may do. It is immutable once loaded.
type Grant struct {
	Name    string
	all     Right // rights on every tenant ("*")
	tenants map[uint64]Right
	any     Right // the union of its rights, for ops that address no tenant
}

// Allows reports whether g may do r to tenant's blocks.
func (g *Grant) Allows(tenant uint64, r Right) bool {
	if g.all&r != 0 {
		return true
	}
	return g.tenants[tenant]&r != 0
}

// Has reports whether g holds r on some tenant (Stats addresses none).
func (g *Grant) Has(r Right) bool { return g.any&r != 0 }

// AllTenants reports whether g holds r on every tenant ("*").
func (g *Grant) AllTenants(r Right) bool { return g.all&r != 0 }

// Tenants is one reading of a node's credentials file.
type Tenants struct {
	Path   string
	grants map[Sum]*Grant
	byCN   map[string]*Grant // credentials of TLS client certificates, by common name
	names  map[uint64]string // tenant names the file lists, for metrics labels
}

// Lookup returns the grant of the token whose hash is sum, or nil.
func (t *Tenants) Lookup(sum Sum) *Grant { return t.grants[sum] }

// LookupCN returns the grant of a verified TLS client certificate whose
// subject common name is cn, or nil.
func (t *Tenants) LookupCN(cn string) *Grant { return t.byCN[cn] }

// Len is the number of credentials.
func (t *Tenants) Len() int { return len(t.grants) + len(t.byCN) }

// TenantName is the name the file lists tenant under, or "".
func (t *Tenants) TenantName(tenant uint64) string { return t.names[tenant] }

// tenantsFile is the TOML document of a node's credentials file.
type tenantsFile struct {
	Credential []struct {
		Name        string      `toml:"name"`
		TokenSHA256 *Sum        `toml:"token_sha256"`
		CertCN      string      `toml:"cert_common_name"`
		Tenants     []tenantRef `toml:"tenants"`
		Allow       []Right     `toml:"allow"`
	} `toml:"credential"`
}

// LoadTenants reads a node's credentials file (server.credentials_file).
// Every problem is an error that names the file and, where the TOML
// decoder knows it, the line.
func LoadTenants(path string) (*Tenants, error) {
	var doc tenantsFile
	bad, err := decodeFile(path, "credentials file", &doc, "name, token_sha256 or cert_common_name, tenants and allow")
	if err != nil {
		return nil, err
	}
	if len(doc.Credential) == 0 {
		return nil, bad("no [[credential]] tables: a node with a credentials file and no credential would refuse every client")
	}
	t := &Tenants{Path: path, grants: map[Sum]*Grant{}, byCN: map[string]*Grant{}, names: map[uint64]string{}}
	for i, c := range doc.Credential {
		var label string
		label, c.Name = labelOf(i, c.Name)
		if (c.TokenSHA256 == nil) == (c.CertCN == "") {
			return nil, bad("%s needs exactly one of token_sha256 (a token) and cert_common_name (a TLS client certificate)", label)
		}
		if len(c.Tenants) == 0 {
			return nil, bad("%s has no tenants: list the tenant names it may address, or \"*\" for all", label)
		}
		if len(c.Allow) == 0 {
			return nil, bad("%s has no allow list: give some of read, write, remove, stats", label)
		}
		if c.TokenSHA256 != nil {
			if prev, dup := t.grants[*c.TokenSHA256]; dup {
				return nil, bad("%s has the same token_sha256 as %q: one token, one credential", label, prev.Name)
			}
		} else if prev, dup := t.byCN[c.CertCN]; dup {
			return nil, bad("%s has the same cert_common_name as %q: one certificate name, one credential", label, prev.Name)
		}
		g := &Grant{Name: c.Name, tenants: map[uint64]Right{}}
		var rights Right
		for _, r := range c.Allow {
			rights |= r
		}
		g.any = rights
		for _, ref := range c.Tenants {
			if ref.all {
				g.all = rights
				continue
			}
			g.tenants[ref.hash] |= rights
			if ref.name != "" {
				t.names[ref.hash] = ref.name
			}
		}
		if c.TokenSHA256 != nil {
			t.grants[*c.TokenSHA256] = g
		} else {
			t.byCN[c.CertCN] = g
		}
	}
	return t, nil
}

// Names lists the credentials' names, sorted, for the start's log line.
func (t *Tenants) Names() []string {
	out := make([]string, 0, t.Len())
	for _, g := range t.grants {
		out = append(out, g.Name)
	}
	for _, g := range t.byCN {
		out = append(out, g.Name)
	}
	sort.Strings(out)
	return out
}

// decodeFile reads the credentials file at path (what names its kind in
// errors) into doc, refusing keys doc does not have (keys lists the ones
// it does), and returns the function that words the loader's own errors.
func decodeFile(path, what string, doc any, keys string) (bad func(format string, args ...any) error, err error) {
	bad = func(format string, args ...any) error {
		return fmt.Errorf("%s %s: "+format, append([]any{what, path}, args...)...)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	md, err := toml.Decode(string(data), doc)
	if err != nil {
		return nil, bad("%v", err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, bad("unknown key %q; a [[credential]] has %s", und[0].String(), keys)
	}
	return bad, nil
}

// labelOf names the i-th credential in errors, and gives it a name for
// logs and metrics when the file gives none.
func labelOf(i int, name string) (label, named string) {
	if name != "" {
		return fmt.Sprintf("credential %d (%q)", i+1, name), name
	}
	return fmt.Sprintf("credential %d", i+1), fmt.Sprintf("credential-%d", i+1)
}
