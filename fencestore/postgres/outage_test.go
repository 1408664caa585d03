package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestServerDownIsBackendUnavailable: with the server stopped (and again after
// a crash and restart of it, while the pool still holds connections that the
// server dropped), every call of the store answers BACKEND_UNAVAILABLE, never
// INTERNAL, and once the server is back the store works again and holds what
// it held: nothing was half-written.
func TestServerDownIsBackendUnavailable(t *testing.T) {
	pg := testenv.OwnPostgres(t)
	s := open(t, pg.URL())
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	g := fencegate.VerifiedGrant{Grant: fencegate.Grant{
		Resource: "res/a", Owner: "o", Lease: "l", FenceToken: 7, OperationID: "op", OperationRoot: "r", IssuedAt: 1,
	}, Digest: "sha256:g"}
	now := time.UnixMilli(1_700_000_000_000).UTC()
	admit := func(seg uint64, id string) error {
		_, err := s.Admit(ctx, fencegate.AdmitRequest{Grant: g, Segment: seg, Target: "res/a", Method: "PUT",
			PayloadDigest: "sha256:p" + id, ReceiptID: id, Now: now})
		return err
	}
	if err := admit(1, "r1"); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"Admit": func() error { return admit(2, "r2") },
		"Settle": func() error {
			_, err := s.Settle(ctx, "r1", fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v", Now: now})
			return err
		},
		"Resource":            func() error { _, err := s.Resource(ctx, "res/a"); return err },
		"Receipt":             func() error { _, err := s.Receipt(ctx, "r1"); return err },
		"ReceiptAt":           func() error { _, err := s.ReceiptAt(ctx, "res/a", 7, 1); return err },
		"ReceiptsByOperation": func() error { _, err := s.ReceiptsByOperation(ctx, "op", fencegate.Page{}); return err },
		"ReceiptsByState": func() error {
			_, err := s.ReceiptsByState(ctx, fencegate.ReceiptPending, fencegate.Page{Limit: 10})
			return err
		},
		"ReceiptsByResource": func() error { _, err := s.ReceiptsByResource(ctx, "res/a", fencegate.Page{}); return err },
		"Quarantined":        func() error { _, err := s.Quarantined(ctx, "", fencegate.Page{}); return err },
		"Version":            func() error { _, err := s.Version(ctx, "res/a"); return err },
		"SwapVersion":        func() error { return s.SwapVersion(ctx, "res/b", "", "v") },
	}
	check := func(when string) {
		t.Helper()
		for name, call := range calls {
			if code := fencegate.ErrorCode(call()); code != fencegate.CodeBackendUnavailable {
				t.Errorf("%s %s: code %s, want BACKEND_UNAVAILABLE", when, name, code)
			}
		}
	}
	pg.Stop()
	check("server stopped:")
	pg.Start()
	pg.Kill()
	check("server crashed:")
	pg.Start()

	r, err := s.Receipt(ctx, "r1")
	if err != nil || r.State != fencegate.ReceiptPending {
		t.Fatalf("after the outage receipt r1 = %+v, %v; want it PENDING as admitted", r, err)
	}
	if _, err := s.Receipt(ctx, "r2"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("the refused Admit left receipt r2: %v", err)
	}
	if err := calls["Settle"](); err != nil {
		t.Fatalf("Settle after the outage: %v", err)
	}
	if err := admit(2, "r2"); err != nil {
		t.Fatalf("Admit after the outage: %v", err)
	}
}
