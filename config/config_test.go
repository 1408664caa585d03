package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/backends/httpapi"
)

func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	c := Default()
	c.Addr = ""
	c.FenceStore = "mysql://x"
	c.StatusMode = "maybe"
	c.Stores = map[string]string{"a/b": "ftp://x"}
	c.PolicyGeneration = 0
	c.QuarantinePayloadBytes = 2 << 20
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"addr is required", "fenceStore", "statusMode", `store name "a/b"`, `store "a/b": URL`,
		"at least one identity", "trustBundle is required", "policyGeneration", "quarantinePayloadBytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestDevDefaultsWithAnIdentityAreValid(t *testing.T) {
	c := Dev()
	c.Identities = []Identity{{Name: "w", Token: "t"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestSharedTokenIsRefused(t *testing.T) {
	c := Dev()
	c.Identities = []Identity{{Name: "a", Token: "t"}, {Name: "b", Token: "t"}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "shared") {
		t.Fatalf("want shared-token error, got %v", err)
	}
}

func TestUnknownYAMLFieldIsRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("addr: 127.0.0.1:1\nadress: typo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Default()
	if err := Load(p, &c); err == nil || !strings.Contains(err.Error(), "adress") {
		t.Fatalf("want unknown-field error naming adress, got %v", err)
	}
}

func TestTokenFromEnvAndFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(p, []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FG_TEST_TOKEN", "env-token")
	c := Dev()
	c.Identities = []Identity{{Name: "a", TokenEnv: "FG_TEST_TOKEN"}, {Name: "b", TokenFile: p}}
	got, err := c.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	if got["env-token"] != "a" || got["file-token"] != "b" {
		t.Fatalf("tokens = %v", got)
	}
}

func TestAPIWithoutFencingContractIsRefusedByName(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	yml := `apis:
  - name: legacy-payments
    baseURL: http://127.0.0.1:9
    credentials: {env: HOME}
    routes:
      - {method: POST, path: "/v1/pay/{id}", resource: "pay/{id}"}
`
	if err := os.WriteFile(p, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Dev()
	c.Identities = []Identity{{Name: "w", Token: "t"}}
	if err := Load(p, &c); err != nil {
		t.Fatal(err)
	}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "legacy-payments") {
		t.Fatalf("want a refusal naming legacy-payments, got %v", err)
	}
}

func TestPayoutsExampleConfigIsValid(t *testing.T) {
	t.Setenv("PAYOUTS_TOKEN", "sk_test")
	c := Dev()
	c.Identities = []Identity{{Name: "w", Token: "t"}}
	if err := Load("../deploy/gateway.payouts.yaml", &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// loadFile writes yml to a file named c.yaml and loads it over Dev defaults.
func loadFile(t *testing.T, yml string) (Config, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Dev()
	c.Identities = []Identity{{Name: "w", Token: "t"}}
	return c, Load(p, &c)
}

func TestAPIProblemsAreAllReportedWithTheirLines(t *testing.T) {
	c, err := loadFile(t, `addr: 127.0.0.1:1
apis:
  - name: payouts
    baseURL: ftp://payments.example.com
    timeout: -1s
    contract:
      idempotency: {}
    settle: {strategy: resend}
    routes:
      - {method: POST, path: "/v1/pay/{id}", resource: "pay/{id}"}
      - {method: POST, path: "/v1/x/{id}", resource: "x/{other}"}
`)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	if err == nil {
		t.Fatal("invalid apis section accepted")
	}
	for _, want := range []string{
		`c.yaml:4: INVALID_REQUEST: api "payouts": baseURL "ftp://payments.example.com"`,
		`c.yaml:5: INVALID_REQUEST: api "payouts": timeout must not be negative`,
		`c.yaml:7: UNSUPPORTED: api "payouts": contract.idempotency needs keyRetention`,
		`c.yaml:11: INVALID_REQUEST: api "payouts": routes[1]`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestUnknownAndMistypedAPIFieldsAreAllRefusedWithTheirLines(t *testing.T) {
	_, err := loadFile(t, `apis:
  - name: payouts
    baseURL: https://payments.example.com
    retries: 3
    timeout: soon
    routes:
      - {method: POST, path: "/v1/pay/{id}", resource: "pay/{id}", verb: x}
`)
	if err == nil {
		t.Fatal("unknown fields accepted")
	}
	for _, want := range []string{"line 4: field retries not found", "line 5: cannot unmarshal", "line 7: field verb not found"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestAValidAPIsSectionReachesTheAdapterAsAStruct(t *testing.T) {
	t.Setenv("FG_TEST_PAY_TOKEN", "sk_test")
	c, err := loadFile(t, `apis:
  - name: payouts
    baseURL: https://payments.example.com
    credentials: {prefix: "Bearer ", env: FG_TEST_PAY_TOKEN}
    timeout: 10s
    contract:
      idempotency:
        keyRetention: 24h
    routes:
      - {method: POST, path: "/v1/pay/{id}", resource: "pay/{id}"}
`)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	a := c.APIConfig().APIs
	if len(a) != 1 || a[0].Timeout != 10*time.Second || a[0].Contract.Idempotency.KeyRetention != 24*time.Hour {
		t.Fatalf("decoded %+v", a)
	}
}

func TestAPIProblemsOfAConfigBuiltInCodeHaveNoLines(t *testing.T) {
	c := Dev()
	c.Identities = []Identity{{Name: "w", Token: "t"}}
	c.APIs = []httpapi.APIConfig{{Name: "x", BaseURL: "nope"}}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `api "x": baseURL "nope"`) || strings.Contains(err.Error(), ".yaml:") {
		t.Fatalf("err = %v", err)
	}
}

func TestHTTPLimitsAndMetricsListenerAreValidated(t *testing.T) {
	c := Dev()
	c.Identities = []Identity{{Name: "w", Token: "t"}}
	c.MetricsAddr = c.Addr
	c.HTTP = HTTPLimits{MaxHeaderBytes: 1024}
	err := c.Validate()
	for _, want := range []string{"metricsAddr must differ", "readHeaderTimeout", "maxHeaderBytes", "maxConns"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if d := Default().HTTP; d.ReadHeaderTimeout <= 0 || d.BodyReadTimeout <= 0 || d.WriteTimeout <= 0 || d.IdleTimeout <= 0 || d.MaxHeaderBytes < 32<<10 || d.MaxConns < 1 {
		t.Fatalf("defaults do not bound the listener: %+v", d)
	}
}

func TestAccessIsOpenInDevWithoutRulesAndDeniesOtherwise(t *testing.T) {
	dev, err := Dev().Access.Policy()
	if err != nil || !dev.IsOpen() {
		t.Fatalf("dev without rules: %v open=%v", err, dev.IsOpen())
	}
	serve, err := Default().Access.Policy()
	if err != nil || serve.IsOpen() || serve.MayRead("w", "local/x") {
		t.Fatalf("serve without rules must deny: %v", err)
	}
	d := Dev()
	d.Access.Rules = []authz.Rule{{Identity: "w", Lease: []string{"local/inv/*"}}}
	p, err := d.Access.Policy()
	if err != nil || p.IsOpen() || p.MayLease("w", "local") || !p.MayLease("w", "local/inv/7") {
		t.Fatalf("dev with rules must apply exactly the rules: %v", err)
	}
}

func TestAccessRulesFromAFileAreValidatedWithTheRest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	yml := "access:\n  rules:\n    - {identity: w, san: 'spiffe://x/*', lease: [local]}\n    - {identity: v, lease: ['a//b']}\n"
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Dev()
	if err := Load(path, &c); err != nil {
		t.Fatal(err)
	}
	c.Identities = []Identity{{Name: "w", Token: "t"}}
	err := c.Validate()
	for _, want := range []string{"access rule 1: needs exactly one of identity or san", `access rule 2: resource pattern "a//b"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestPresetsDecodeValidateAndTakeOverrides(t *testing.T) {
	t.Setenv("FG_TEST_PSP_SECRET", "sk_test")
	var yml strings.Builder
	yml.WriteString("apis:\n")
	for _, p := range httpapi.PresetNames() {
		fmt.Fprintf(&yml, `  - name: %s
    preset: %s
    baseURL: https://sandbox.example.com
    credentials: {env: FG_TEST_PSP_SECRET}
    routes:
      - {method: POST, path: /v1/payments, resource: payments}
`, p, p)
	}
	yml.WriteString(`  - name: stripe-short
    preset: stripe
    baseURL: https://sandbox.example.com
    credentials: {env: FG_TEST_PSP_SECRET}
    key: {maxLength: 40}
    routes:
      - {method: POST, path: /v1/payments, resource: payments}
`)
	c, err := loadFile(t, yml.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("presets do not validate: %v", err)
	}
	if len(c.APIs) != 7 || c.APIs[6].Preset != "stripe" || c.APIs[6].Key.MaxLength != 40 {
		t.Fatalf("decoded %+v", c.APIs[6])
	}
}

func TestUnknownPresetIsRefusedWithItsLine(t *testing.T) {
	c, err := loadFile(t, `apis:
  - name: pay
    preset: stripee
    baseURL: https://sandbox.example.com
    credentials: {env: HOME}
    routes:
      - {method: POST, path: /v1/payments, resource: payments}
`)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `c.yaml:3: INVALID_REQUEST: api "pay": preset "stripee" is none of`) {
		t.Fatalf("err = %v", err)
	}
}

func TestEveryProblemOfTheFileCarriesItsLine(t *testing.T) {
	c, err := loadFile(t, `addr: 127.0.0.1:1
fenceStore: mysql://db
stores:
  s3a: ftp://bucket
statusMode: maybe
registry:
  backend: zookeeper://x
  issuerEpoch: 0
`)
	if err != nil {
		t.Fatal(err)
	}
	c.Identities = nil // from no flag and not in the file: a problem without a line
	err = c.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{
		"c.yaml:2: fenceStore must be", `c.yaml:4: store "s3a": URL must be`, "c.yaml:5: statusMode must be proof or query",
		`c.yaml:7: registry.backend "zookeeper://x": must be`, "c.yaml:8: registry.issuerEpoch must be >= 1",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if !strings.Contains(err.Error(), "at least one identity is required") || strings.Contains(err.Error(), ": at least one identity") {
		t.Errorf("a problem of a field not in the file must carry no line:\n%v", err)
	}
}

func TestS3StoreURLDetailsAreCheckedUpFrontWithTheirLine(t *testing.T) {
	c, err := loadFile(t, `stores:
  s3a: "s3://bucket/p?endpoint=http://127.0.0.1:7070&regoin=us-east-1"
  s3b: "s3://bucket/q?endpoint=ftp://x"
`)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	for _, want := range []string{`c.yaml:2: store "s3a": s3 store URL: unknown parameter "regoin"`, `c.yaml:3: store "s3b": s3 store URL: endpoint "ftp://x"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestStripeExampleConfigIsValid(t *testing.T) {
	t.Setenv("STRIPE_SECRET_KEY", "sk_test")
	t.Setenv("CHECKOUT_WORKER_TOKEN", "token")
	c := Default()
	if err := Load("../deploy/gateway.stripe.yaml", &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if a := c.APIs[0]; a.Preset != "stripe" || len(a.Routes) != 5 {
		t.Fatalf("decoded %+v", a)
	}
}

func TestLeaseBackendURLIsReadOnceAndRefusedInFull(t *testing.T) {
	for raw, want := range map[string]LeaseBackend{
		"embedded":                              {Kind: "embedded"},
		"postgres://u@db:5432/fg?sslmode=false": {Kind: "postgres", DSN: "postgres://u@db:5432/fg?sslmode=false"},
		"redis://r:6379?prefix=p&replicas=2":    {Kind: "redis", Hosts: []string{"r:6379"}, Prefix: "p", Replicas: 2, Wait: time.Second},
		"redis://r:6379?replicas=1&waitMs=250":  {Kind: "redis", Hosts: []string{"r:6379"}, Replicas: 1, Wait: 250 * time.Millisecond},
		"etcd://a:2379,b:2379?prefix=/fg/":      {Kind: "etcd", Hosts: []string{"a:2379", "b:2379"}, Prefix: "/fg/"},
	} {
		got, err := ParseLeaseBackend(raw)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ParseLeaseBackend(%q) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for _, raw := range []string{"zookeeper://z:1", "redis://", "redis://r:1?prefx=p", "redis://r:1?replicas=-1",
		"redis://r:1?waitMs=5", "redis://a:1,b:1", "etcd://e:1?replicas=2", "embeded"} {
		if _, err := ParseLeaseBackend(raw); err == nil {
			t.Errorf("ParseLeaseBackend(%q) accepted", raw)
		}
	}
}

// TestDeferSettleOutsideItsRangeIsRefused: the deferred settle's window is
// 0 (off) up to 1 s; a negative or longer one is a config error naming it.
func TestDeferSettleOutsideItsRangeIsRefused(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, 2 * time.Second} {
		c := Dev()
		c.Identities = []Identity{{Name: "w", Token: "t"}}
		c.DeferSettle = d
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "deferSettle") {
			t.Errorf("deferSettle %v: want an error naming it, got %v", d, err)
		}
	}
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("deferSettle: 2ms\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Default()
	if err := Load(p, &c); err != nil || c.DeferSettle != 2*time.Millisecond {
		t.Fatalf("deferSettle: 2ms loads as %v (%v)", c.DeferSettle, err)
	}
}

// TestDeferredSettleIsOffByDefault: every mode's defaults settle before
// answering (docs/deferred-settle.md, "Why it is off by default").
func TestDeferredSettleIsOffByDefault(t *testing.T) {
	for name, c := range map[string]Config{"serve": Default(), "dev": Dev(), "registry": RegistryOnly()} {
		if c.DeferSettle != 0 {
			t.Errorf("%s: deferSettle %v by default, want 0s (off)", name, c.DeferSettle)
		}
	}
}

// A mistyped URL still carries its password: errors name the field and show
// the URL with the password replaced (or not at all when it does not
// parse), since they go to stderr and from there to journald or a pod log.
// A Redis or etcd URL with a user or password is refused: those backends
// would not send it.
func TestURLErrorsNeverShowAPassword(t *testing.T) {
	c := Default()
	c.FenceStore = "postgress://fg:S3cretPW@db/fg"
	c.Stores = map[string]string{"a": "ftp://u:S3cretPW@x/b", "b": "s3://u:S3cretPW@%zz"}
	c.Registry = &Registry{Backend: "redis://:S3cretPW@r:6379?replica=2"}
	err := c.Validate()
	if err == nil || strings.Contains(err.Error(), "S3cretPW") {
		t.Fatalf("validation error shows the password:\n%v", err)
	}
	for _, want := range []string{"fenceStore", `store "a"`, "registry.backend"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	for _, raw := range []string{"redis://:pw@r:6379", "etcd://u:pw@e:2379"} {
		if _, err := ParseLeaseBackend(raw); err == nil || strings.Contains(err.Error(), "pw@") {
			t.Errorf("ParseLeaseBackend(%q) = %v, want a refusal without the password", raw, err)
		}
	}
	// libpq also takes the password as a query parameter, or in a key=value
	// string that no URL parser reads.
	for _, raw := range []string{"postgress://db/fg?password=S3cretPW", "mysql://db/fg?sslpassword=S3cretPW&x=1",
		"postgress://db/fg?password=S3cretPW%zz", "postgress://db/fg?sslmode=disable;password=S3cretPW",
		"host=db password=S3cretPW dbname=fg", "postgres://fg:S3cretPW@db/fg"} {
		c := Default()
		c.FenceStore = raw
		c.Registry = &Registry{Backend: raw}
		c.Tracing.Endpoint = raw
		if err := c.Validate(); err == nil || strings.Contains(err.Error(), "S3cretPW") {
			t.Errorf("%q: the error shows the password:\n%v", raw, err)
		}
		if got := Redacted(raw); strings.Contains(got, "S3cretPW") {
			t.Errorf("Redacted(%q) = %q", raw, got)
		}
	}
}

// Rule: a registry's high-water source defaults to the fence store exactly
// when gateways write it (stores, APIs, or a shared postgres:// store), and
// an explicit "fencestore" is accepted for the same configurations: an
// API-only process defaulted to operator while it accepted fencestore.
func TestTheHighWaterDefaultAndItsCheckAgree(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"nothing written", func(c *Config) { c.Stores = nil }, "operator"},
		{"APIs", func(c *Config) { c.Stores, c.APIs = nil, []httpapi.APIConfig{{Name: "x"}} }, "fencestore"},
		{"stores", func(*Config) {}, "fencestore"},
		{"shared postgres", func(c *Config) { c.Stores, c.FenceStore = nil, "postgres://db/fence" }, "fencestore"},
	} {
		cfg := Dev()
		c.set(&cfg)
		if got := cfg.HighWaterSource(); got != c.want {
			t.Errorf("%s: default %q, want %q", c.name, got, c.want)
		}
	}
}
