package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// TLS with the nodes and the MDS. roles/internal/tlsconf builds the tools'
// configuration, but Go's internal rule keeps it from contrib/, so the few
// lines of a client configuration are here, with the same choices: TLS 1.3
// at least, the CA file's roots (else the system's), an optional client
// certificate, and a session cache so a pool's later connections resume.

// dfkv_client_options_v2.tls (DFKV_TLS_*).
const (
	tlsModeEnv = 0 // $DFKV_CLIENT_TLS decides; unset: off
	tlsModeOn  = 1
	tlsModeOff = 2
)

// tlsFields are the TLS fields of dfkv_client_options_v2 as the caller
// set them ("" for NULL).
type tlsFields struct {
	mode                      uint32
	ca, cert, key, serverName string
}

// tlsValue is one resolved setting and where it came from: a field name,
// or an environment variable's name; from is "" when it is unset.
type tlsValue struct{ v, from string }

// tlsSettings are the TLS settings in force for a client: the fields,
// else the environment.
type tlsSettings struct {
	on bool
	// from says where on (or off) was decided: tlsField, envTLS, or ""
	// when neither said anything (off).
	from                      string
	ca, cert, key, serverName tlsValue
	// fieldSet names the first file or server-name field the caller set
	// (not the environment), "" if none: with TLS off it is refused.
	fieldSet string
}

// The settings' names: the option fields, and the environment variables
// the dfkv tools read for client.tls, client.tls_ca and the rest.
const (
	tlsField           = "dfkv_client_options_v2.tls"
	tlsCAField         = "dfkv_client_options_v2.tls_ca_file"
	tlsCertField       = "dfkv_client_options_v2.tls_cert_file"
	tlsKeyField        = "dfkv_client_options_v2.tls_key_file"
	tlsServerNameField = "dfkv_client_options_v2.tls_server_name"

	envTLS           = "DFKV_CLIENT_TLS"
	envTLSCA         = "DFKV_CLIENT_TLS_CA"
	envTLSCert       = "DFKV_CLIENT_TLS_CERT"
	envTLSKey        = "DFKV_CLIENT_TLS_KEY"
	envTLSServerName = "DFKV_CLIENT_TLS_SERVER_NAME"
)

// resolveTLS applies the fields over the environment (lookup; cEnv in
// production): a set field wins, else its variable. It refuses a mode
// that does not exist and a $DFKV_CLIENT_TLS that is not a switch.
func resolveTLS(f tlsFields, lookup func(string) (string, bool)) (tlsSettings, error) {
	var s tlsSettings
	switch f.mode {
	case tlsModeOn:
		s.on, s.from = true, tlsField
	case tlsModeOff:
		s.from = tlsField
	case tlsModeEnv:
		if v, ok := lookup(envTLS); ok && strings.TrimSpace(v) != "" {
			on, known := rdma.ParseSwitch(v)
			if !known {
				return s, fmt.Errorf("dfkv_open_v2: $%s is %q: want 1 or 0 (also true/false, yes/no, on/off): %w", envTLS, v, wire.StatusInvalid)
			}
			s.on, s.from = on, envTLS
		}
	default:
		return s, fmt.Errorf("dfkv_open_v2: tls is %d: want DFKV_TLS_ENV (0), DFKV_TLS_ON (1) or DFKV_TLS_OFF (2): %w", f.mode, wire.StatusInvalid)
	}
	pick := func(field, fieldName, env string) tlsValue {
		if field != "" {
			if s.fieldSet == "" {
				s.fieldSet = fieldName
			}
			return tlsValue{field, fieldName}
		}
		if v, ok := lookup(env); ok && v != "" {
			return tlsValue{v, env}
		}
		return tlsValue{}
	}
	s.ca = pick(f.ca, tlsCAField, envTLSCA)
	s.cert = pick(f.cert, tlsCertField, envTLSCert)
	s.key = pick(f.key, tlsKeyField, envTLSKey)
	s.serverName = pick(f.serverName, tlsServerNameField, envTLSServerName)
	return s, nil
}

// source names a setting's origin in a message: a field as it is, an
// environment variable with its $.
func source(from string) string {
	if strings.HasPrefix(from, "dfkv_client_options_v2.") {
		return from
	}
	return "$" + from
}

// describe says where on came from, for messages.
func (s tlsSettings) describe() string {
	state := "off"
	if s.on {
		state = "on"
	}
	if s.from == "" {
		return fmt.Sprintf("TLS is %s (%s is DFKV_TLS_ENV and $%s is unset)", state, tlsField, envTLS)
	}
	return fmt.Sprintf("TLS is %s (from %s)", state, source(s.from))
}

// config builds the client's TLS configuration: nil when TLS is off. A
// file or server name given in the fields with TLS off is refused (it
// means TLS was wanted), unless tls is DFKV_TLS_OFF; the environment's are
// ignored then, as the tools ignore client.tls_ca without client.tls.
// Every error is INVALID and names the file and the setting it came from.
func (s tlsSettings) config() (*tls.Config, error) {
	if !s.on {
		if s.fieldSet != "" && s.from != tlsField {
			return nil, fmt.Errorf("dfkv_open_v2: %s is set but %s: set %s to DFKV_TLS_ON (or $%s=1), or leave the TLS files unset: %w",
				s.fieldSet, s.describe(), tlsField, envTLS, wire.StatusInvalid)
		}
		return nil, nil
	}
	if (s.cert.v == "") != (s.key.v == "") {
		have, lack := s.cert, tlsKeyField+" ($"+envTLSKey+")"
		if s.cert.v == "" {
			have, lack = s.key, tlsCertField+" ($"+envTLSCert+")"
		}
		return nil, fmt.Errorf("dfkv_open_v2: a client certificate needs both its certificate and its key: %s is set and %s is not: %w",
			source(have.from), lack, wire.StatusInvalid)
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS13,
		ServerName:         s.serverName.v,
		ClientSessionCache: tls.NewLRUClientSessionCache(256),
	}
	if s.ca.v != "" {
		pem, err := os.ReadFile(s.ca.v)
		if err != nil {
			return nil, fmt.Errorf("dfkv_open_v2: TLS CA file %s (from %s): %w: %w", s.ca.v, source(s.ca.from), err, wire.StatusInvalid)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("dfkv_open_v2: TLS CA file %s (from %s) holds no PEM certificate: %w", s.ca.v, source(s.ca.from), wire.StatusInvalid)
		}
		cfg.RootCAs = pool
	}
	if s.cert.v != "" {
		pair, err := tls.LoadX509KeyPair(s.cert.v, s.key.v)
		if err != nil {
			return nil, fmt.Errorf("dfkv_open_v2: TLS client certificate %s (from %s) and key %s (from %s): %w: %w",
				s.cert.v, source(s.cert.from), s.key.v, source(s.key.from), err, wire.StatusInvalid)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// explain adds to an error that TLS caused, or that TLS would have
// avoided, which of this library's settings are in force and where they
// came from; other errors are returned as they are. The node's and
// wire/client's words name the tools' settings (client.tls, client.tls_ca).
func (s tlsSettings) explain(err error) error {
	msg := err.Error()
	switch {
	case !s.on && strings.Contains(msg, "requires TLS"):
		return fmt.Errorf("%s; set %s to DFKV_TLS_ON and %s, or $%s=1 and $%s: %w", s.describe(), tlsField, tlsCAField, envTLS, envTLSCA, err)
	case s.on && strings.Contains(msg, "does not speak TLS"):
		return fmt.Errorf("%s: %w", s.describe(), err)
	case s.on && (isCertError(err) || strings.Contains(msg, "certificate") || errors.Is(err, client.ErrPeerDown)):
		// A connection that failed: under TLS 1.3 a node that wants a
		// client certificate refuses a missing or unknown one after the
		// client's side of the handshake is done, so that shows as the
		// connection breaking rather than as a certificate error.
		return fmt.Errorf("%s, verifying nodes with %s%s: %w", s.describe(), s.roots(), s.identity(), err)
	}
	return err
}

// roots describes what node certificates are verified against.
func (s tlsSettings) roots() string {
	if s.ca.v == "" {
		return fmt.Sprintf("the system's roots (no %s or $%s)", tlsCAField, envTLSCA)
	}
	return fmt.Sprintf("the CA file %s (from %s)", s.ca.v, source(s.ca.from))
}

// identity describes the client certificate presented and the server name
// verified, when set.
func (s tlsSettings) identity() string {
	var b strings.Builder
	if s.serverName.v != "" {
		fmt.Fprintf(&b, " as %q (from %s)", s.serverName.v, source(s.serverName.from))
	}
	if s.cert.v != "" {
		fmt.Fprintf(&b, ", presenting the client certificate %s (from %s)", s.cert.v, source(s.cert.from))
	} else {
		b.WriteString(", presenting no client certificate")
	}
	return b.String()
}

func isCertError(err error) bool {
	var v *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var h x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &v) || errors.As(err, &ua) || errors.As(err, &h) || errors.As(err, &ci)
}
