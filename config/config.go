// Package config is the gateway's configuration: a YAML file (strict: unknown
// fields are errors) overlaid with command-line flags. Validate reports every
// problem at once, so an operator fixes a config in one pass.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/s3door"
)

// Config is the whole configuration of `gateway serve` and `gateway dev`.
type Config struct {
	// Addr is the listen address of the API (workloads and operators).
	Addr string `yaml:"addr"`
	// MetricsAddr is the operator listener that serves /metrics; "" serves
	// none. The API listener never serves /metrics.
	MetricsAddr string `yaml:"metricsAddr"`
	// Pprof serves Go's profiling endpoints (net/http/pprof: /debug/pprof/,
	// profile, trace, heap ...) on the operator listener MetricsAddr, for
	// operators; off by default (--pprof). They are never on the API
	// listener: a profile shows request data in memory and costs CPU, so
	// only whoever can reach the operator listener may take one.
	Pprof bool `yaml:"pprof"`
	// Log is the log format and level (flags --log-format, --log-level).
	Log Log `yaml:"log"`
	// Tracing exports OpenTelemetry spans (off by default; --otlp-endpoint).
	Tracing Tracing `yaml:"tracing"`
	// HTTP bounds what one client can hold of the API listener.
	HTTP HTTPLimits `yaml:"http"`
	// DataDir holds embedded state (fence store, registry, local objects, spool).
	DataDir string `yaml:"dataDir"`
	// FenceStore is "embedded" (a file in DataDir) or a postgres:// URL.
	FenceStore string `yaml:"fenceStore"`
	// Stores maps object store names to URLs: local:///dir or s3://bucket/prefix?...
	Stores map[string]string `yaml:"stores"`
	// Auth is how workloads authenticate: "bearer" (Identities) or "mtls"
	// (a client certificate verified against TLS.ClientCA; its first URI SAN
	// is the identity, else "cn:" and its subject CN, which no san rule
	// matches: authz.CNIdentity).
	Auth string `yaml:"auth"`
	// TLS serves HTTPS with this certificate and key (required for mtls).
	TLS *TLS `yaml:"tls"`
	// Identities are the bearer credentials of workload identities.
	Identities []Identity `yaml:"identities"`
	// Admins are the bearer credentials of operators (admin routes only).
	Admins []Identity `yaml:"admins"`
	// Gateways are the bearer credentials of gateway replicas that ask this
	// process's registry for lease status (POST /v1/leases/{lease}/attest) on
	// behalf of any workload; a workload is answered for its own leases only.
	// A replica presents one as its registryCredential.
	Gateways []Identity `yaml:"gateways"`
	// BreakGlass (the --break-glass flag, never the file) lets this start
	// switch validation off against the modes in force; it is logged and
	// counted (fencegate_break_glass_total).
	BreakGlass bool `yaml:"-"`
	// Failpoint (test-only, never the file) names the acceptance point's
	// step at which the process exits with status 3 (gateway.Config's
	// Failpoint). Only `gateway dev` sets it, from FENCEGATE_FAILPOINT, so
	// a production process cannot be made to crash by its environment.
	Failpoint string `yaml:"-"`
	// KeyOverlap is how long keys replaced by a rotation stay trusted.
	KeyOverlap time.Duration `yaml:"keyOverlap"`
	// TrustBundle is the path of the trust bundle file (required unless an
	// in-process registry signs the grants).
	TrustBundle string `yaml:"trustBundle"`
	// StatusMode is "proof" (Fence-Status headers) or "query" (ask the registry).
	StatusMode string `yaml:"statusMode"`
	// RegistryURL is a registry in another process that query mode asks,
	// with the bearer credential RegistryCredential.
	// A replica with a registryURL also fetches the registry's trust bundle
	// (GET /v1/trust-bundle, as a gateway identity) every BundleRefresh and
	// installs newer versions, so rotations and revocations reach it by
	// themselves; RegistryCredential must be one of the registry's gateways.
	//
	// A fetched bundle is installed only under a signature by a key of the
	// bundle in force here (the chain; see RegistryBundleUnsigned), but the
	// credential is a bearer token and an unsigned bundle may be accepted
	// during an upgrade: so RegistryURL must be https:// (verified against
	// the system roots, or RegistryCA), unless its host is loopback
	// (127.0.0.0/8, ::1, localhost) or RegistryInsecureHTTP is set.
	RegistryURL        string   `yaml:"registryURL"`
	RegistryCredential Identity `yaml:"registryCredential"`
	// RegistryCA is a PEM file of the CA certificates a registryURL's
	// https certificate must chain to (a private CA); empty uses the
	// system roots.
	RegistryCA string `yaml:"registryCA"`
	// RegistryInsecureHTTP accepts an http:// registryURL on a host that is
	// not loopback. Only for a private network you trust end to end:
	// whoever can answer that address reads the gateway credential, and
	// with registryBundleUnsigned: accept names the keys the replica trusts
	// (for good: bundle versions never go down). Logged as a warning at
	// every start.
	RegistryInsecureHTTP bool `yaml:"registryInsecureHTTP"`
	// RegistryBundleUnsigned is what a replica with a registryURL does with
	// a fetched trust bundle that carries no signature (Fence-Bundle-Signature):
	// "refuse" (the default, also ""), since whoever answers the URL could
	// strip the signature, or "accept", only for a rolling upgrade whose
	// registry does not sign yet (upgrade the registry first, then remove
	// the setting). Logged as a warning at every start. A signature that does
	// not verify is refused either way.
	RegistryBundleUnsigned string `yaml:"registryBundleUnsigned"`
	// BundleRefresh is how often a replica with a registryURL fetches the
	// trust bundle (default 1s; keep it well below the registry's statusLife).
	BundleRefresh time.Duration `yaml:"bundleRefresh"`
	// PolicyGeneration is the oldest policy generation a grant may carry.
	PolicyGeneration uint64 `yaml:"policyGeneration"`
	// RevokedEpochs are issuer epochs whose grants and proofs are refused.
	RevokedEpochs []uint64 `yaml:"revokedEpochs"`
	// MaxBodyBytes caps a request body.
	MaxBodyBytes int64 `yaml:"maxBodyBytes"`
	// S3StagingBytes bounds the bytes the S3 front door's open multipart
	// uploads stage in dataDir/spool/s3-uploads together, each part counting
	// at least 1 MiB (0: StagingBytes's default, 32 GiB or twice
	// maxBodyBytes; set, at least twice maxBodyBytes, so that an upload of
	// the largest object and a part of it sent again fit). A part beyond it
	// is refused before it is read (503 SlowDown, RESOURCE_BUSY) until
	// uploads complete, abort or go idle.
	S3StagingBytes int64 `yaml:"s3StagingBytes"`
	// S3StagingBytesPerIdentity bounds what one workload identity's open
	// multipart uploads (over all its leases) hold of that staging, counted
	// the same way, so that one identity cannot take it from the others (0:
	// StagingBytesPerIdentity's default, a quarter of the staging budget but
	// at least twice maxBodyBytes and at most the budget; set, at least
	// twice maxBodyBytes and at most the budget). A part beyond it is
	// refused before it is read (503 SlowDown, RESOURCE_BUSY) until the
	// identity's uploads complete, abort or go idle.
	S3StagingBytesPerIdentity int64 `yaml:"s3StagingBytesPerIdentity"`
	// QuarantinePayloadBytes is the largest refused payload a quarantine
	// record keeps (default 64 KiB, at most 1 MiB; 0 keeps none); a larger
	// one keeps its digest and size only.
	QuarantinePayloadBytes int64 `yaml:"quarantinePayloadBytes"`
	// EffectTimeout bounds one forwarded effect; reconcile.orphan must exceed it.
	EffectTimeout time.Duration `yaml:"effectTimeout"`
	// DeferSettle is the deferred settle's window (docs/deferred-settle.md):
	// a COMMITTED object PUT is answered once the object store holds it and
	// its settle is folded into the next admission on the resource, or
	// flushed this long after; 0s (the default) settles before answering.
	// At most 1 s. Off by default: with it, an answered COMMITTED rests on
	// the object's own metadata until the settle is durable, so after a
	// crash a reader that cannot reach the object store sees the receipt
	// PENDING, and an out-of-band overwrite can erase the proof
	// (docs/deferred-settle.md, "Why it is off by default").
	DeferSettle time.Duration `yaml:"deferSettle"`
	// Registry configures the in-process lease registry; nil runs none.
	Registry *Registry `yaml:"registry"`
	// Reconcile configures the settlement of unknown outcomes.
	Reconcile Reconcile `yaml:"reconcile"`
	// Retention configures the compaction of settled receipts and of
	// quarantine records (each off by default).
	Retention Retention `yaml:"retention"`
	// Modes sets enforcement per resource pattern (enforce unless listed);
	// the only place a pattern may start in shadow mode.
	Modes []gateway.ModeRule `yaml:"modes"`
	// Access is the authorization policy: who may lease (renew, write) and
	// read which resources. Without rules, serve and registry deny every
	// workload; dev permits everything.
	Access Access `yaml:"access"`
	// APIs are the third-party HTTP APIs the gateway fronts, decoded here with
	// the rest of the file and checked by Validate (httpapi.Config's rules),
	// so the adapter is handed a plain, validated struct.
	APIs []httpapi.APIConfig `yaml:"apis"`

	// src is the file Load read, kept to give problems their line numbers.
	src *source
}

// Identity is one workload identity and where its bearer token comes from.
type Identity struct {
	Name      string `yaml:"name"`
	Token     string `yaml:"token"`
	TokenEnv  string `yaml:"tokenEnv"`
	TokenFile string `yaml:"tokenFile"`
}

// HTTPLimits are the API listener's timeouts and limits. A client that
// trickles its headers or body is cut off; a refusal is answered at once and
// its connection closed instead of waiting for a body it does not need.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10 s).
	ReadHeaderTimeout time.Duration `yaml:"readHeaderTimeout"`
	// BodyReadTimeout bounds every wait for more of a request body: a body
	// that makes no progress for this long is refused (default 30 s). It is
	// a gap, not a total, so large uploads at any steady rate pass.
	BodyReadTimeout time.Duration `yaml:"bodyReadTimeout"`
	// WriteTimeout bounds every wait to send more of an answer: a client
	// that stops reading its answer is cut off after this long without
	// progress (default 30 s; at least 8 KiB must go out per gap). A gap,
	// not a total: a large download read at a steady rate passes, and a
	// long poll waits as long as it must before its answer begins.
	WriteTimeout time.Duration `yaml:"writeTimeout"`
	// IdleTimeout closes a keep-alive connection idle this long (default 60 s).
	IdleTimeout time.Duration `yaml:"idleTimeout"`
	// MaxHeaderBytes caps a request's header block (default 64 KiB).
	MaxHeaderBytes int `yaml:"maxHeaderBytes"`
	// MaxConns caps the open client connections; more wait in the kernel's
	// accept queue (default 1024), so the open file count stays bounded.
	MaxConns int `yaml:"maxConns"`
	// MemoryBodyBytes: a request body of at most this many bytes is held in
	// memory instead of being spooled to dataDir/spool (default 1 MiB; 0
	// spools every body).
	MemoryBodyBytes int64 `yaml:"memoryBodyBytes"`
	// MemoryBodiesBytes bounds the memory all bodies held at once may take
	// (default 64 MiB); a body that does not fit is spooled.
	MemoryBodiesBytes int64 `yaml:"memoryBodiesBytes"`
}

// TLS is the server's certificate and the CA that client certificates must chain to.
type TLS struct {
	Cert     string `yaml:"cert"`
	Key      string `yaml:"key"`
	ClientCA string `yaml:"clientCA"`
}

// Registry configures the in-process lease registry.
type Registry struct {
	// Backend is "embedded", a postgres:// URL, redis://HOST:PORT[?prefix=P&replicas=N&waitMs=MS]
	// or etcd://HOST:PORT[,HOST:PORT][?prefix=P].
	Backend string `yaml:"backend"`
	// AllowVolatileBackend accepts a Redis backend that does not fsync every
	// write (appendfsync always) or may evict keys (a maxmemory-policy other
	// than noeviction); without it such a backend is refused at start.
	AllowVolatileBackend bool `yaml:"allowVolatileBackend"`
	// HighWater is where the registry learns the highest fence gateways have
	// accepted after a coordination state loss: "fencestore" (this process's
	// fence store, which the gateways share: the default with gateways in
	// the process, and for `gateway registry` with a postgres:// fenceStore)
	// or "operator" (an operator floor is needed to resume; the default of
	// `gateway registry` with its own embedded fence store). See HighWaterSource.
	HighWater string `yaml:"highWater"`
	// SigningKey is a file holding the Ed25519 seed (hex); generated if absent.
	SigningKey string `yaml:"signingKey"`
	// S3CredentialKey is a file holding the key leases' S3 credentials are
	// derived under (32 bytes, hex; default DATA_DIR/s3-credential-key);
	// generated if absent. Registries sharing a backend must share it.
	S3CredentialKey string `yaml:"s3CredentialKey"`
	KeyID           string `yaml:"keyId"`
	// IssuerEpoch is the epoch of grants this registry signs.
	IssuerEpoch uint64        `yaml:"issuerEpoch"`
	StatusLife  time.Duration `yaml:"statusLife"`
	MaxTTL      time.Duration `yaml:"maxTTL"`
	// LeaseRetention is how long the coordination backend keeps a lease
	// record that is no longer held, and its request ID, after the lease's
	// expiry (0: the default, registry.DefaultLeaseRetention, 7 days). A
	// reuse of the request ID within it returns the same lease; after it,
	// the record is deleted and a reuse is a new acquisition. Fences are
	// never deleted. At least registry.MinLeaseRetention and above maxTTL.
	LeaseRetention time.Duration `yaml:"leaseRetention"`
}

// Retention is the lease retention in force: LeaseRetention, or
// registry.DefaultLeaseRetention when 0.
func (r Registry) Retention() time.Duration {
	if r.LeaseRetention == 0 {
		return registry.DefaultLeaseRetention
	}
	return r.LeaseRetention
}

// HighWaterSource resolves Registry.HighWater: the configured value, else
// "fencestore" when the fence store is the gateways' (object stores served
// in this process, or a postgres:// fence store), else "operator".
func (c Config) HighWaterSource() string {
	switch {
	case c.Registry == nil:
		return ""
	case c.Registry.HighWater != "":
		return c.Registry.HighWater
	case c.fenceStoreWritten():
		return "fencestore"
	}
	return "operator"
}

// fenceStoreWritten reports whether gateways write the fence store this
// process opens: it serves stores or APIs, or the store is a shared
// postgres:// one. Only then does it know every fence accepted, so that a
// registry can resume above it after a state loss (highWater fencestore).
func (c Config) fenceStoreWritten() bool {
	return len(c.Stores) > 0 || len(c.APIs) > 0 || strings.HasPrefix(c.FenceStore, "postgres")
}

// Reconcile configures the reconciler.
type Reconcile struct {
	Interval time.Duration `yaml:"interval"`
	// Deadline is the age after which an UNKNOWN needs a person (default 15m).
	Deadline time.Duration `yaml:"deadline"`
	// Orphan is the age after which a PENDING receipt is taken as orphaned,
	// and the grace after a write's expiry (effectTimeout after admission)
	// before an object write the object does not show is NOT_APPLIED: it
	// must cover the clock skew between gateway and store and the longest a
	// store takes from a request's headers to its last body byte.
	Orphan time.Duration `yaml:"orphan"`
}

// Default returns the defaults shared by serve and dev.
func Default() Config {
	return Config{
		Addr:                   "127.0.0.1:8080",
		DataDir:                "data",
		Auth:                   "bearer",
		FenceStore:             "embedded",
		StatusMode:             "proof",
		PolicyGeneration:       1,
		MaxBodyBytes:           5 << 30,
		QuarantinePayloadBytes: fencegate.DefaultQuarantinePayload,
		KeyOverlap:             10 * time.Minute,
		BundleRefresh:          time.Second,
		EffectTimeout:          60 * time.Second,
		Reconcile:              Reconcile{Interval: 5 * time.Second, Deadline: 15 * time.Minute, Orphan: 2 * time.Minute},
		Retention:              defaultRetention(),
		HTTP: HTTPLimits{ReadHeaderTimeout: 10 * time.Second, BodyReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
			IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10, MaxConns: 1024,
			MemoryBodyBytes: 1 << 20, MemoryBodiesBytes: 64 << 20},
	}
}

// Access holds the authorization rules (see package authz).
type Access struct {
	Rules []authz.Rule `yaml:"rules"`
	// openWithoutRules: no rules means permit everything (dev only; no
	// file can set it).
	openWithoutRules bool
}

// Policy returns the policy the rules grant: Open when there are none and
// the mode is dev, else exactly the rules (none: deny everything).
func (a Access) Policy() (*authz.Policy, error) {
	if len(a.Rules) == 0 && a.openWithoutRules {
		return authz.Open(), nil
	}
	return authz.New(a.Rules)
}

// Dev returns the defaults of `gateway dev`: embedded everything, an
// in-process registry, and a local-directory object store named local.
func Dev() Config {
	c := Default()
	c.Stores = map[string]string{"local": "local:"}
	c.Registry = &Registry{Backend: "embedded", KeyID: "dev-1", IssuerEpoch: 1}
	c.Access.openWithoutRules = true
	return c
}

// RegistryOnly returns the defaults of `gateway registry`: the lease registry
// alone (embedded backend), with no object stores.
func RegistryOnly() Config {
	c := Default()
	c.Registry = &Registry{Backend: "embedded", KeyID: "registry-1", IssuerEpoch: 1}
	return c
}

// Load reads a YAML file over c. Unknown fields and values of the wrong type
// are errors, every one of them reported with its line; c keeps the file's
// positions so that Validate's problems carry line numbers too.
func Load(path string, c *Config) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: %w", path, err)
	}
	c.src = &source{path: path, root: &root}
	return nil
}

// APIConfig is the `apis:` section as httpapi.Config.
func (c *Config) APIConfig() httpapi.Config { return httpapi.Config{APIs: c.APIs} }

// Tokens resolves every workload identity's token: token -> identity name.
func (c *Config) Tokens() (map[string]string, error) { return TokensOf(c.Identities) }

// TokensOf resolves the tokens of ids: token -> identity name. A token
// shared by two identities is an error.
func TokensOf(ids []Identity) (map[string]string, error) {
	out := map[string]string{}
	var errs []error
	for _, id := range ids {
		tok, err := id.Secret()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := out[tok]; dup {
			errs = append(errs, fmt.Errorf("identity %q: token shared with another identity", id.Name))
			continue
		}
		out[tok] = id.Name
	}
	return out, errors.Join(errs...)
}

// StagingBytes is the S3 front door's staging budget: S3StagingBytes, or
// when unset the larger of s3door.DefaultStagingBytes and twice
// MaxBodyBytes (a configuration that raised maxBodyBytes keeps working).
func (c *Config) StagingBytes() int64 {
	if c.S3StagingBytes > 0 {
		return c.S3StagingBytes
	}
	return max(s3door.DefaultStagingBytes, 2*c.MaxBodyBytes)
}

// StagingBytesPerIdentity is one workload identity's share of the S3 front
// door's staging budget: S3StagingBytesPerIdentity, or when unset
// s3door.DefaultStagingShare of StagingBytes and MaxBodyBytes (a quarter
// of the budget, at least twice MaxBodyBytes, at most the budget).
func (c *Config) StagingBytesPerIdentity() int64 {
	if c.S3StagingBytesPerIdentity > 0 {
		return c.S3StagingBytesPerIdentity
	}
	return s3door.DefaultStagingShare(c.StagingBytes(), c.MaxBodyBytes)
}

// Secret resolves the identity's token from its value, environment variable
// or file, exactly one of which must be given; an empty token is an error.
func (id Identity) Secret() (string, error) {
	n := 0
	for _, src := range []string{id.Token, id.TokenEnv, id.TokenFile} {
		if src != "" {
			n++
		}
	}
	if n > 1 {
		return "", fmt.Errorf("identity %q: give one of token, tokenEnv and tokenFile, not %d", id.Name, n)
	}
	tok := id.Token
	switch {
	case id.TokenEnv != "":
		tok = os.Getenv(id.TokenEnv)
	case id.TokenFile != "":
		b, err := os.ReadFile(id.TokenFile)
		if err != nil {
			return "", fmt.Errorf("identity %q: %w", id.Name, err)
		}
		tok = strings.TrimSpace(string(b))
	}
	if tok == "" {
		return "", fmt.Errorf("identity %q: empty token", id.Name)
	}
	return tok, nil
}
