package authority_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

type alarms struct {
	mu       sync.Mutex
	uses     []string
	refusals []string
}

func (a *alarms) BreakGlass(source string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.uses = append(a.uses, source)
}

func (a *alarms) BundleRefused(source string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refusals = append(a.refusals, source)
}

// wantRefusals checks the bundle refusals counted so far, by source.
func (a *alarms) wantRefusals(t *testing.T, want ...string) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.Equal(a.refusals, want) {
		t.Fatalf("bundle refusals counted %v, want %v", a.refusals, want)
	}
}

// env is a data directory and the config an Authority is opened with.
type env struct {
	t     *testing.T
	dir   string
	clock *clock
	alarm *alarms
	logs  *bytes.Buffer
	cfg   authority.Config
}

func newEnv(t *testing.T, signing bool) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, dir: dir, clock: &clock{now: t0}, alarm: &alarms{}, logs: &bytes.Buffer{}}
	e.cfg = authority.Config{
		Files: authority.Files{State: filepath.Join(dir, "authority.json"), Bundle: filepath.Join(dir, "trust-bundle.json"),
			Key: filepath.Join(dir, "key")},
		Signing: signing, KeyID: "registry-1", IssuerEpoch: 1, PolicyGeneration: 1, Overlap: 10 * time.Minute,
		Now: e.clock.Now, Alarm: e.alarm, Log: slog.New(slog.NewTextHandler(io.MultiWriter(e.logs), nil)),
	}
	return e
}

func (e *env) open() *authority.Authority {
	e.t.Helper()
	a, err := authority.Open(e.cfg)
	if err != nil {
		e.t.Fatalf("open: %v", err)
	}
	return a
}

// bundles returns a's trust bundle now and after each of n key rotations.
func bundles(t *testing.T, a *authority.Authority, n int) [][]byte {
	t.Helper()
	v, _ := a.TrustBundle(ctx)
	out := [][]byte{v}
	for range n {
		if _, err := a.RotateKey(ctx); err != nil {
			t.Fatal(err)
		}
		v, _ = a.TrustBundle(ctx)
		out = append(out, v)
	}
	return out
}

func (e *env) read(name string) []byte {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, name))
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func epochsOf(b *proofs.Bundle) []uint64 {
	var out []uint64
	for _, k := range b.Keys() {
		out = append(out, k.Epoch)
	}
	return out
}

func wantCode(t *testing.T, err error, code fencegate.Code) {
	t.Helper()
	if fencegate.ErrorCode(err) != code {
		t.Fatalf("want %s, got %v", code, err)
	}
}

var ctx = context.Background()

func TestRetiringTheCurrentEpochRotatesThenDropsItsKeyWithNoOverlap(t *testing.T) {
	e := newEnv(t, true)
	a := e.open()
	st, err := a.RetireEpoch(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := a.Verifier().Bundle()
	if st.IssuerEpoch != 2 || !a.EpochRevoked(1) || !slices.Equal(epochsOf(b), []uint64{2}) ||
		!slices.Equal(b.RevokedEpochs(), []uint64{1}) || b.Version() != 2 {
		t.Fatalf("after retiring epoch 1: state %+v, bundle v%d epochs %v revoked %v", st, b.Version(), epochsOf(b), b.RevokedEpochs())
	}
	if is := a.Issuing(); is.Epoch != 2 || len(is.Standing) != 0 || !is.Revoked[1] {
		t.Fatalf("registry view %+v", is)
	}
	// The published file is the bundle in force; a restart keeps everything.
	onDisk, err := proofs.ParseBundle(e.read("trust-bundle.json"))
	if err != nil || onDisk.Version() != 2 || !onDisk.EpochRevoked(1) {
		t.Fatalf("bundle file: %v %v", onDisk, err)
	}
	again := e.open()
	if again.CurrentEpoch() != 2 || !again.EpochRevoked(1) || again.Verifier().Bundle().Version() != 2 {
		t.Fatalf("after restart: %+v", again.Issuing())
	}
	// Retiring it again changes nothing.
	before := e.read("trust-bundle.json")
	if _, err := again.RetireEpoch(ctx, 1); err != nil || !bytes.Equal(before, e.read("trust-bundle.json")) {
		t.Fatalf("second retirement: %v", err)
	}
}

func TestRotationTrustsTheEarlierKeyForTheOverlapOnly(t *testing.T) {
	e := newEnv(t, true)
	a := e.open()
	if _, err := a.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	if is := a.Issuing(); is.Epoch != 2 || !slices.Equal(is.Standing, []uint64{1}) {
		t.Fatalf("during the overlap: %+v", is)
	}
	k1, _ := a.Verifier().Bundle().Key("registry-1")
	if !k1.NotAfter.Equal(t0.Add(10 * time.Minute)) {
		t.Fatalf("old key valid until %s", k1.NotAfter)
	}
	e.clock.Advance(10 * time.Minute)
	if is := a.Issuing(); len(is.Standing) != 0 {
		t.Fatalf("after the overlap: %+v", is)
	}
	if _, err := a.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	if got := epochsOf(a.Verifier().Bundle()); !slices.Equal(got, []uint64{2, 3}) {
		t.Fatalf("expired key kept: %v", got)
	}
}

func TestRetireRefusesEpochZeroAndUnissuedEpochsChangingNothing(t *testing.T) {
	e := newEnv(t, true)
	a := e.open()
	state, bundle := e.read("authority.json"), e.read("trust-bundle.json")
	for _, n := range []uint64{0, 2, 99} {
		_, err := a.RetireEpoch(ctx, n)
		wantCode(t, err, fencegate.CodeInvalidRequest)
	}
	if !bytes.Equal(state, e.read("authority.json")) || !bytes.Equal(bundle, e.read("trust-bundle.json")) ||
		a.CurrentEpoch() != 1 || a.EpochRevoked(2) {
		t.Fatal("a refused retirement changed state")
	}
}

func TestReplicaTakesRevocationsFromTheBundleAndRefusesOneThatLiftsThem(t *testing.T) {
	reg := newEnv(t, true)
	registry := reg.open()
	rep := newEnv(t, false)
	write := func(data []byte) {
		if err := os.WriteFile(rep.cfg.Files.Bundle, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v1, _ := registry.TrustBundle(ctx)
	write(v1)
	replica := rep.open()
	if _, err := replica.RotateKey(ctx); fencegate.ErrorCode(err) != fencegate.CodeUnsupported {
		t.Fatalf("rotation at a replica: %v", err)
	}
	if _, err := registry.RetireEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	v2, _ := registry.TrustBundle(ctx)
	write(v2)
	if ok, v, err := replica.ReloadBundle(); !ok || v != 2 || err != nil {
		t.Fatalf("reload: %v %d %v", ok, v, err)
	}
	rep.alarm.wantRefusals(t) // a bundle taken is no refusal
	if !replica.EpochRevoked(1) || replica.EpochRevoked(2) {
		t.Fatal("the replica did not take the bundle's revocation")
	}
	if !replica.EpochRevoked(1) || !rep.open().EpochRevoked(1) {
		t.Fatal("the revocation did not survive a restart")
	}
	// A later bundle that trusts epoch 1 again is refused, changing nothing.
	state := rep.read("authority.json")
	old, err := proofs.ParseBundle(v1)
	if err != nil {
		t.Fatal(err)
	}
	lifting, err := proofs.NewBundle(4, append(old.Keys(), registry.Verifier().Bundle().Keys()...)...)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := lifting.Marshal()
	_, err = replica.SetTrustBundle(ctx, data)
	wantCode(t, err, fencegate.CodeInvalidRequest)
	write(data)
	if ok, _, err := replica.ReloadBundle(); ok || err == nil {
		t.Fatalf("a lifting bundle file was installed: %v", err)
	}
	// So is one that drops the revocation and holds no key of epoch 1
	// (refused by the verifier at install, not by the authority's checks).
	dropping, err := proofs.NewBundle(5, registry.Verifier().Bundle().Keys()...)
	if err != nil {
		t.Fatal(err)
	}
	data, _ = dropping.Marshal()
	write(data)
	if ok, _, err := replica.ReloadBundle(); ok || fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
		t.Fatalf("a bundle file dropping a revocation: %v %v", ok, err)
	}
	// Each file refused is counted; the operator's upload is not (its
	// refusal is the admin API's answer).
	rep.alarm.wantRefusals(t, "file", "file")
	if replica.Verifier().Bundle().Version() != 2 || !bytes.Equal(state, rep.read("authority.json")) {
		t.Fatal("a refused bundle changed state")
	}
	// A lower version is refused too.
	_, err = replica.SetTrustBundle(ctx, v1)
	wantCode(t, err, fencegate.CodeInvalidRequest)
}

func TestSigningAuthorityRefusesABundleWithoutItsKey(t *testing.T) {
	e := newEnv(t, true)
	a := e.open()
	s, err := proofs.GenerateEd25519Signer("registry-1") // same kid, another key
	if err != nil {
		t.Fatal(err)
	}
	b, _ := proofs.NewBundle(9, s.BundleKey(1))
	data, _ := b.Marshal()
	before := e.read("trust-bundle.json")
	_, err = a.SetTrustBundle(ctx, data)
	wantCode(t, err, fencegate.CodeInvalidRequest)
	if a.Verifier().Bundle().Version() != 1 || !bytes.Equal(before, e.read("trust-bundle.json")) {
		t.Fatal("a refused bundle was installed")
	}
}

func TestPolicyGenerationIsPersistedAndNeverGoesDown(t *testing.T) {
	e := newEnv(t, false)
	s, _ := proofs.GenerateEd25519Signer("k")
	b, _ := proofs.NewBundle(1, s.BundleKey(1))
	data, _ := b.Marshal()
	if err := os.WriteFile(e.cfg.Files.Bundle, data, 0o644); err != nil {
		t.Fatal(err)
	}
	a := e.open()
	if st, err := a.BumpPolicy(ctx); err != nil || st.PolicyGeneration != 2 {
		t.Fatalf("bump: %+v %v", st, err)
	}
	if g := e.open().PolicyGeneration(); g != 2 {
		t.Fatalf("after restart with config generation 1: %d", g)
	}
	_, err := a.SetFloor(ctx, 10)
	wantCode(t, err, fencegate.CodeUnsupported)
}

func TestLegacyStateFileModesAreTheOperatorsModes(t *testing.T) {
	e := newEnv(t, true)
	legacy := `{"issuerEpoch":1,"keyId":"registry-1","policyGeneration":3,"revokedEpochs":[],"modes":[{"pattern":"x/*","mode":"enforce"}]}`
	if err := os.WriteFile(e.cfg.Files.State, []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	e.cfg.Modes = []gateway.ModeRule{{Pattern: "x/*", Mode: gateway.Shadow}}
	a := e.open()
	if a.Modes().For("x/a") != gateway.Enforce || a.PolicyGeneration() != 3 {
		t.Fatalf("legacy operator mode lost: %v", a.Modes().Rules())
	}
	if !strings.Contains(string(e.read("authority.json")), `"modesInForce"`) {
		t.Fatal("modes in force not recorded")
	}
}

func TestReplicaRevokesLocallyAtOnceAndKeepsItAcrossRestarts(t *testing.T) {
	reg := newEnv(t, true)
	v1, _ := reg.open().TrustBundle(ctx)
	rep := newEnv(t, false)
	if err := os.WriteFile(rep.cfg.Files.Bundle, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	a := rep.open()
	st, err := a.RetireEpoch(ctx, 1)
	if err != nil || !a.EpochRevoked(1) || !slices.Equal(st.RevokedEpochs, []uint64{1}) {
		t.Fatalf("local revocation: %+v %v", st, err)
	}
	if !bytes.Equal(v1, rep.read("trust-bundle.json")) {
		t.Fatal("a replica rewrote the registry's bundle")
	}
	if !rep.open().EpochRevoked(1) {
		t.Fatal("local revocation lost on restart")
	}
	// The registry's key for epoch 1 is now refused in any bundle given here.
	_, err = a.SetTrustBundle(ctx, v1)
	wantCode(t, err, fencegate.CodeInvalidRequest)
}

func TestReplicaOffersInstallOnlyNewerBundlesAndNeverOverwriteANewerFile(t *testing.T) {
	reg := newEnv(t, true)
	registry := reg.open()
	rep := newEnv(t, false)
	v1, _ := registry.TrustBundle(ctx)
	if err := os.WriteFile(rep.cfg.Files.Bundle, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	replica := rep.open()
	if ok, _, err := replica.OfferBundle(v1, ""); ok || err != nil {
		t.Fatalf("same version installed again: %v %v", ok, err)
	}
	if _, err := registry.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	v2, sig2, _ := registry.SignedTrustBundle(ctx)
	if _, err := registry.RetireEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	v3, sig3, _ := registry.SignedTrustBundle(ctx)
	// Someone already put v3 in the (shared) file; offering v2 must not replace it.
	if err := os.WriteFile(rep.cfg.Files.Bundle, v3, 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, v, err := replica.OfferBundle(v2, sig2); !ok || v != 2 || err != nil {
		t.Fatalf("offer v2: %v %d %v", ok, v, err)
	}
	if !bytes.Equal(v3, rep.read("trust-bundle.json")) {
		t.Fatal("an older fetched bundle overwrote a newer file")
	}
	if ok, v, err := replica.OfferBundle(v3, sig3); !ok || v != 3 || err != nil || !replica.EpochRevoked(1) {
		t.Fatalf("offer v3: %v %d %v", ok, v, err)
	}
	rep.alarm.wantRefusals(t) // not newer, or taken: no refusal
	_, _, err := replica.OfferBundle([]byte(`{"version":9}`), sig3)
	wantCode(t, err, fencegate.CodeInvalidRequest)
	if replica.Verifier().Bundle().Version() != 3 {
		t.Fatal("a refused offer changed the bundle")
	}
	rep.alarm.wantRefusals(t, "registry")
}

func TestARotationThatStoppedBeforeItsStateWasSavedIsResumedAtOpen(t *testing.T) {
	e := newEnv(t, true)
	a := e.open()
	state := e.read("authority.json")
	if _, err := a.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	// The crash: bundle and key written, the state file still names epoch 1.
	if err := os.WriteFile(e.cfg.Files.State, state, 0o600); err != nil {
		t.Fatal(err)
	}
	b := e.open()
	if b.CurrentEpoch() != 2 || b.Signer().KeyID() != "registry-2" {
		t.Fatalf("after the interrupted rotation: epoch %d key %s", b.CurrentEpoch(), b.Signer().KeyID())
	}
	if !strings.Contains(e.logs.String(), "resuming a key rotation") {
		t.Fatalf("resumption not logged:\n%s", e.logs.String())
	}
	// The next rotation goes above every epoch the bundle names.
	if st, err := b.RotateKey(ctx); err != nil || st.IssuerEpoch != 3 {
		t.Fatalf("next rotation: %+v %v", st, err)
	}
}

func TestAnotherKeyUnderTheSigningKeyIDStillRefusesTheStart(t *testing.T) {
	e := newEnv(t, true)
	e.open()
	if err := os.WriteFile(e.cfg.Files.Key, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := authority.Open(e.cfg); err == nil || !strings.Contains(err.Error(), "another key") {
		t.Fatalf("a foreign key file was accepted: %v", err)
	}
}
