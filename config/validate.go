package config

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/backends/s3"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/s3door"
)

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	var errs []error
	// at reports a problem of one field (a YAML path): Load's file gives it a line.
	at := func(field, format string, args ...any) {
		errs = append(errs, &fieldError{field: field, err: fmt.Errorf(format, args...)})
	}
	if c.Addr == "" {
		at("addr", "addr is required")
	}
	if c.DataDir == "" {
		at("dataDir", "dataDir is required")
	}
	c.validateObservability(at)
	if c.MetricsAddr != "" && c.MetricsAddr == c.Addr {
		at("metricsAddr", "metricsAddr must differ from addr: /metrics is served on an operator listener only")
	}
	if c.Pprof && c.MetricsAddr == "" {
		at("pprof", "pprof needs metricsAddr: the profiling endpoints are served on the operator listener only")
	}
	if h := c.HTTP; h.ReadHeaderTimeout <= 0 || h.BodyReadTimeout <= 0 || h.WriteTimeout <= 0 || h.IdleTimeout <= 0 {
		at("http", "http readHeaderTimeout, bodyReadTimeout, writeTimeout and idleTimeout must be positive")
	}
	if h := c.HTTP; h.MaxHeaderBytes < 32<<10 {
		at("http.maxHeaderBytes", "http.maxHeaderBytes must be at least 32768: a grant and a status proof are up to 8 KiB each")
	}
	if c.HTTP.MaxConns < 1 {
		at("http.maxConns", "http.maxConns must be positive")
	}
	if h := c.HTTP; h.MemoryBodyBytes < 0 || h.MemoryBodiesBytes < h.MemoryBodyBytes {
		at("http.memoryBodyBytes", "http.memoryBodyBytes must be at least 0 and at most http.memoryBodiesBytes (%d), not %d", h.MemoryBodiesBytes, h.MemoryBodyBytes)
	}
	if c.FenceStore != "embedded" && !strings.HasPrefix(c.FenceStore, "postgres://") && !strings.HasPrefix(c.FenceStore, "postgresql://") {
		at("fenceStore", "fenceStore must be \"embedded\" or a postgres:// URL, not %q", Redacted(c.FenceStore))
	}
	for name, raw := range c.Stores {
		if err := fencegate.CheckName(name); err != nil || strings.Contains(name, "/") {
			at("stores."+name, "store name %q must be a single canonical segment", name)
		}
		u, err := url.Parse(raw)
		switch {
		case err != nil || (u.Scheme != "local" && u.Scheme != "s3"):
			at("stores."+name, "store %q: URL must be local:DIR or s3://BUCKET[/PREFIX]?..., not %q", name, Redacted(raw))
		case u.Scheme == "s3":
			// The adapter's own parser, once, here: the app opens the parsed URL.
			if _, err := s3.ParseURL(raw); err != nil {
				at("stores."+name, "store %q: %s", name, fencegate.ErrorMessage(err))
			}
		}
	}
	switch c.Auth {
	case "bearer":
		if len(c.Identities) == 0 {
			at("identities", "at least one identity is required")
		}
	case "mtls":
		if c.TLS == nil || c.TLS.ClientCA == "" {
			at("auth", "auth mtls needs tls.cert, tls.key and tls.clientCA")
		}
	default:
		at("auth", "auth must be bearer or mtls, not %q", c.Auth)
	}
	if c.TLS != nil && (c.TLS.Cert == "" || c.TLS.Key == "") {
		at("tls", "tls needs cert and key")
	}
	for _, list := range []struct {
		key string
		ids []Identity
	}{{"identities", c.Identities}, {"admins", c.Admins}, {"gateways", c.Gateways}} {
		for i, id := range list.ids {
			if strings.TrimSpace(id.Name) == "" {
				at(list.key, "%s[%d] needs a name: the caller its token authenticates", list.key, i)
			}
		}
	}
	work, err := c.Tokens()
	if err != nil {
		errs = append(errs, err)
	}
	admins, err := TokensOf(c.Admins)
	if err != nil {
		errs = append(errs, fmt.Errorf("admins: %w", err))
	}
	for tok, name := range admins {
		if _, clash := work[tok]; clash {
			at("admins", "admin %q shares its token with a workload identity", name)
		}
	}
	gateways, err := TokensOf(c.Gateways)
	if err != nil {
		errs = append(errs, fmt.Errorf("gateways: %w", err))
	}
	for tok, name := range gateways {
		if _, clash := work[tok]; clash {
			at("gateways", "gateway %q shares its token with a workload identity", name)
		}
		if _, clash := admins[tok]; clash {
			at("gateways", "gateway %q shares its token with an admin", name)
		}
	}
	if len(c.Gateways) > 0 && c.Registry == nil {
		at("gateways", "gateways are answered by an in-process registry: add a registry section or remove gateways")
	}
	if c.KeyOverlap <= 0 {
		at("keyOverlap", "keyOverlap must be positive")
	}
	if c.StatusMode != "proof" && c.StatusMode != "query" {
		at("statusMode", "statusMode must be proof or query, not %q", c.StatusMode)
	}
	if c.StatusMode == "query" && c.Registry == nil && c.RegistryURL == "" {
		at("statusMode", "statusMode query needs the in-process registry or registryURL")
	}
	switch {
	case c.BundleRefresh <= 0:
		at("bundleRefresh", "bundleRefresh must be positive")
	case c.RegistryURL != "" && c.BundleRefresh >= fencegate.DefaultStatusLife:
		// A revocation reaches this replica by itself within one status-proof
		// life (DESIGN: a revoked epoch is refused everywhere within one); the
		// registry's life is not known here, so the default's bounds it.
		at("bundleRefresh", "bundleRefresh %s must be below the status-proof life (%s by default), so that a revocation at the registry reaches this replica within one", c.BundleRefresh, fencegate.DefaultStatusLife)
	}
	if c.RegistryURL != "" {
		if c.Registry != nil {
			at("registryURL", "registryURL and an in-process registry exclude each other")
		}
		c.validateRegistryTransport(at)
		if _, err := c.RegistryCredential.Secret(); err != nil {
			at("registryCredential", "registryCredential: %v", err)
		}
	}
	if c.RegistryURL == "" && c.RegistryCA != "" {
		at("registryCA", "registryCA verifies registryURL, which is not set")
	}
	if c.RegistryURL == "" && c.RegistryInsecureHTTP {
		at("registryInsecureHTTP", "registryInsecureHTTP allows a plain http registryURL, which is not set")
	}
	switch c.RegistryBundleUnsigned {
	case "", "refuse":
	case "accept":
		if c.RegistryURL == "" {
			at("registryBundleUnsigned", "registryBundleUnsigned: accept is for bundles fetched from registryURL, which is not set")
		}
	default:
		at("registryBundleUnsigned", "registryBundleUnsigned must be refuse or accept, not %q", c.RegistryBundleUnsigned)
	}
	if c.Registry == nil && c.TrustBundle == "" {
		at("trustBundle", "trustBundle is required when no in-process registry signs grants (with a registryURL it is the first link of the chain fetched bundles are verified along)")
	}
	if c.PolicyGeneration == 0 {
		at("policyGeneration", "policyGeneration must be >= 1")
	}
	if c.QuarantinePayloadBytes < 0 || c.QuarantinePayloadBytes > fencegate.MaxQuarantinePayload {
		at("quarantinePayloadBytes", "quarantinePayloadBytes must be between 0 and %d, not %d", fencegate.MaxQuarantinePayload, c.QuarantinePayloadBytes)
	}
	if c.MaxBodyBytes <= 0 {
		at("maxBodyBytes", "maxBodyBytes must be positive")
	}
	if least := s3door.LeastStaging(c.MaxBodyBytes); c.S3StagingBytes != 0 && c.S3StagingBytes < least {
		at("s3StagingBytes", "s3StagingBytes must be at least twice maxBodyBytes and 2 MiB (%d), not %d: an upload of the largest object, and a part of it sent again, must fit in the S3 front door's multipart staging (0 for the default)", least, c.S3StagingBytes)
	}
	if least, share := s3door.LeastStaging(c.MaxBodyBytes), c.S3StagingBytesPerIdentity; share != 0 && share < least {
		at("s3StagingBytesPerIdentity", "s3StagingBytesPerIdentity must be at least twice maxBodyBytes and 2 MiB (%d), not %d: every identity must be able to stage an upload of the largest object and a part of it sent again (0 for the default, a quarter of s3StagingBytes)", least, share)
	} else if budget := c.StagingBytes(); share > budget {
		at("s3StagingBytesPerIdentity", "s3StagingBytesPerIdentity must be at most the staging budget s3StagingBytes (%d), not %d: an identity's share is a part of it (0 for the default, a quarter of it)", budget, share)
	}
	if r := c.Registry; r != nil {
		if _, err := ParseLeaseBackend(r.Backend); err != nil {
			at("registry.backend", "%v", err)
		}
		if r.IssuerEpoch == 0 {
			at("registry.issuerEpoch", "registry.issuerEpoch must be >= 1")
		}
		if r.HighWater != "" && r.HighWater != "fencestore" && r.HighWater != "operator" {
			at("registry.highWater", "registry.highWater must be fencestore or operator, not %q", r.HighWater)
		}
		if r.HighWater == "fencestore" && !c.fenceStoreWritten() {
			// The fence store is this process's own, and no gateway writes
			// it: after a state loss grants would resume above 0.
			at("registry.highWater", "registry.highWater fencestore asks the gateways' fence store, but this process serves no stores or APIs and its fenceStore is not a shared postgres:// one: use operator (or point fenceStore at the gateways' postgres store)")
		}
		if r.StatusLife < 0 || r.StatusLife > fencegate.MaxStatusLife {
			at("registry.statusLife", "registry.statusLife must be within (0, %s]", fencegate.MaxStatusLife)
		}
		// The bounds the registry will enforce (the app passes maxTTL and no
		// minTTL): the registry resolves their defaults, not this check.
		minTTL, maxTTL := registry.Config{MaxTTL: r.MaxTTL}.TTLBounds()
		if r.MaxTTL != 0 && r.MaxTTL < minTTL {
			at("registry.maxTTL", "registry.maxTTL must be at least %s (0 for the default %s), not %s", minTTL, registry.DefaultMaxTTL, r.MaxTTL)
		}
		switch ret := r.Retention(); {
		case ret < registry.MinLeaseRetention:
			at("registry.leaseRetention", "registry.leaseRetention must be at least %s (0 for the default %s), not %s", registry.MinLeaseRetention, registry.DefaultLeaseRetention, r.LeaseRetention)
		case ret <= maxTTL:
			at("registry.leaseRetention", "registry.leaseRetention (%s) must exceed registry.maxTTL (%s): a request ID must stay answerable for every retry of an acquisition", ret, maxTTL)
		}
		for _, e := range c.RevokedEpochs {
			if e == r.IssuerEpoch {
				at("revokedEpochs", "registry.issuerEpoch %d is listed in revokedEpochs", e)
			}
		}
	}
	if _, err := c.Access.Policy(); err != nil {
		errs = append(errs, err)
	}
	if c.Auth == "mtls" {
		// An mTLS identity is a URI SAN or cn:NAME (authz.CNIdentity); a
		// bare name matches no certificate (a CN was the bare NAME before
		// cn: was its prefix: such a rule now refuses everything, silently).
		for i, r := range c.Access.Rules {
			switch id := r.Identity; {
			case id == "" || authz.IsCNIdentity(id):
			case !strings.Contains(id, ":"):
				at(fmt.Sprintf("access.rules[%d].identity", i), "identity %q names no mTLS identity: write a certificate's URI SAN, or %s%s for one without a URI SAN (its common name)", id, authz.CNPrefix, id)
			default:
				// A certificate's URI SAN is the identity as crypto/x509
				// parsed it (net/url, which lowercases the scheme) and
				// wrote it again: a rule spelled otherwise matches none.
				if u, err := url.Parse(id); err != nil || u.String() != id {
					want := "a URI as a certificate's URI SAN reads"
					if err == nil {
						want = fmt.Sprintf("%q", u.String())
					}
					at(fmt.Sprintf("access.rules[%d].identity", i), "identity %q matches no client certificate (a URI SAN reads as net/url writes it, its scheme in lower case): write %s", id, want)
				}
			}
		}
	}
	// Each rule alone first, so that every bad rule is reported (with its
	// line); then all together, for what only their combination refuses.
	bad := false
	for i, m := range c.Modes {
		if _, err := gateway.NewModes(m); err != nil {
			at(fmt.Sprintf("modes[%d]", i), "%v", err)
			bad = true
		}
	}
	if _, err := gateway.NewModes(c.Modes...); err != nil && !bad {
		errs = append(errs, err)
	}
	if err := c.APIConfig().Validate(); err != nil {
		errs = append(errs, err.(interface{ Unwrap() []error }).Unwrap()...)
	}
	if c.Reconcile.Interval <= 0 || c.Reconcile.Deadline <= 0 || c.Reconcile.Orphan <= 0 {
		at("reconcile", "reconcile interval, deadline and orphan must be positive")
	}
	c.Retention.check(at, c.Reconcile.Deadline)
	if c.DeferSettle < 0 || c.DeferSettle > time.Second {
		at("deferSettle", "deferSettle must be between 0 (off) and 1s")
	}
	if c.EffectTimeout <= 0 {
		at("effectTimeout", "effectTimeout must be positive")
	} else if c.Reconcile.Orphan <= c.EffectTimeout {
		at("reconcile.orphan", "reconcile.orphan (%s) must exceed effectTimeout (%s): a live effect must never be taken for an orphan", c.Reconcile.Orphan, c.EffectTimeout)
	}
	return errors.Join(c.src.locate(errs)...)
}

// validateRegistryTransport checks how a replica reaches registryURL: the
// gateway credential travels with every request, the answers are statements
// about leases, and the trust bundle it installs from there names the keys
// it trusts (signed along the chain, unless registryBundleUnsigned accepts
// unsigned ones), so the URL must be https://, unless its host is loopback or
// registryInsecureHTTP opts in (a private network the operator trusts).
func (c *Config) validateRegistryTransport(at func(field, format string, args ...any)) {
	u, err := url.Parse(c.RegistryURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		at("registryURL", "registryURL must be an https:// URL with a host (http:// only to a loopback host or with registryInsecureHTTP), not %q", Redacted(c.RegistryURL))
		return
	}
	if c.InsecureRegistryHTTP() && !c.RegistryInsecureHTTP {
		at("registryURL", "registryURL %q is plain http: the gateway credential travels in clear, and an unsigned trust bundle fetched from it (registryBundleUnsigned: accept) would name the keys this replica trusts; use https:// (registryCA for a private CA), a loopback host, or registryInsecureHTTP: true on a private network you trust", Redacted(c.RegistryURL))
	}
	if c.RegistryCA != "" {
		if u.Scheme != "https" {
			at("registryCA", "registryCA verifies an https:// registryURL, not %q", Redacted(c.RegistryURL))
		} else if _, err := c.RegistryRootCAs(); err != nil {
			at("registryCA", "%v", err)
		}
	}
}

// InsecureRegistryHTTP reports whether registryURL is plain http to a host
// that is not loopback (allowed only by registryInsecureHTTP): the start-up
// log warns about it.
func (c *Config) InsecureRegistryHTTP() bool {
	u, err := url.Parse(c.RegistryURL)
	return err == nil && u.Scheme == "http" && !loopbackHost(u.Hostname())
}

// loopbackHost reports whether host (no port, no brackets) is localhost or
// a loopback IP address (127.0.0.0/8, ::1).
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RegistryRootCAs returns the CA certificates of registryCA, or nil (the
// system roots) when it is not set.
func (c *Config) RegistryRootCAs() (*x509.CertPool, error) {
	if c.RegistryCA == "" {
		return nil, nil
	}
	return LoadCAPool("registryCA", c.RegistryCA)
}

// LoadCAPool reads the PEM CA certificates at path (the setting field's),
// refusing a file that holds none: the one loader of registryCA and
// tls.clientCA.
func LoadCAPool(field, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s holds no PEM certificate", field, path)
	}
	return pool, nil
}

// AcceptsUnsignedBundles reports whether a replica installs a bundle fetched
// from registryURL that carries no signature (registryBundleUnsigned:
// accept, for a rolling upgrade).
func (c *Config) AcceptsUnsignedBundles() bool {
	return c.RegistryURL != "" && c.RegistryBundleUnsigned == "accept"
}
