package authority_test

import (
	"os"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/proofs"
)

// Rule: the trust bundle's version never goes down across a restart: a
// replica whose bundle file was replaced, while it was down, by an older
// copy (which would trust again, with no end, keys a rotation had given an
// end) refuses to start, naming both versions; the state is unchanged.
func TestARestartOnAnOlderBundleFileIsRefused(t *testing.T) {
	reg := newEnv(t, true)
	registry := reg.open()
	vs := bundles(t, registry, 1)
	v1, v2 := vs[0], vs[1]
	rep := newEnv(t, false)
	if err := os.WriteFile(rep.cfg.Files.Bundle, v2, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := rep.open().Verifier().Bundle().Version(); got != 2 {
		t.Fatalf("replica bundle version %d, want 2", got)
	}
	state := rep.read("authority.json")
	if err := os.WriteFile(rep.cfg.Files.Bundle, v1, 0o644); err != nil { // a stale copy while it is down
		t.Fatal(err)
	}
	_, err := authority.Open(rep.cfg)
	if err == nil || !strings.Contains(err.Error(), "version 1, below version 2") {
		t.Fatalf("a restart on an older bundle file: %v, want a refusal naming versions 1 and 2", err)
	}
	if string(rep.read("authority.json")) != string(state) {
		t.Fatal("the refused start changed the state file")
	}
	if err := os.WriteFile(rep.cfg.Files.Bundle, v2, 0o644); err != nil {
		t.Fatal(err)
	}
	rep.open() // the current bundle back: it starts
}

// Rule: a key revoked at the registry (its epoch retired) is never trusted
// again, under another key ID and epoch, by a bundle offered after a
// restart either: the revoked key's thumbprint is kept in the state file.
func TestARevokedKeyStaysRevokedAcrossARestart(t *testing.T) {
	reg := newEnv(t, true)
	registry := reg.open()
	v1, _ := registry.TrustBundle(ctx)
	if _, err := registry.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.RetireEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	registry = reg.open() // restarted
	cur := registry.Verifier().Bundle()
	old, err := proofs.ParseBundle(v1)
	if err != nil {
		t.Fatal(err)
	}
	k1, _ := old.Key("registry-1")
	k1.Epoch = 7
	if err := k1.Key.Set("kid", "registry-7"); err != nil {
		t.Fatal(err)
	}
	nb, err := proofs.NewRevokingBundle(cur.Version()+1, cur.Revocations(), append(cur.Keys(), k1)...)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := nb.Marshal()
	state := reg.read("authority.json")
	_, err = registry.SetTrustBundle(ctx, data)
	wantCode(t, err, fencegate.CodeInvalidRequest)
	if registry.Verifier().Bundle().Version() != cur.Version() || string(reg.read("authority.json")) != string(state) {
		t.Fatal("a bundle trusting the revoked key again changed state")
	}
}
