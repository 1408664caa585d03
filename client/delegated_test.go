package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/domain"
)

// delegationToken is a compact-JWS-shaped delegation of the fake's lease
// for segments 2..9 (the client reads its claims, the gateway verifies it).
func delegationToken(t *testing.T) string {
	t.Helper()
	b, err := json.Marshal(domain.Delegation{Schema: domain.DelegationSchema, ID: "dlg-1", GrantDigest: "sha256:g7",
		Resource: "bucket/jobs", Lease: "L1", Owner: "worker", Delegate: "consumer", FenceToken: 7, OperationRoot: "root",
		SegmentFrom: 2, SegmentTo: 9, IssuerEpoch: 1, IssuedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	return "h." + base64.RawURLEncoding.EncodeToString(b) + ".s"
}

func delegatedWriter(t *testing.T) (*fakeGateway, *DelegatedWriter) {
	t.Helper()
	f, c := newFake(t)
	w, err := c.DelegatedWriter("grant-7", delegationToken(t))
	if err != nil {
		t.Fatal(err)
	}
	return f, w
}

// The delegate sends the owner's grant, the delegation, the segment it was
// given and a status proof issued for the delegation, refreshed before it
// lapses and not before.
func TestDelegatedWriterSendsTheDelegationWithAProofIssuedForIt(t *testing.T) {
	f, w := delegatedWriter(t)
	ctx := context.Background()
	for seg := uint64(2); seg <= 3; seg++ {
		if _, err := w.Put(ctx, "bucket", "jobs/a", seg, strings.NewReader("x"), ""); err != nil {
			t.Fatal(err)
		}
	}
	h := f.writes[1]
	if h.Get("Fence-Grant") != "grant-7" || h.Get("Fence-Delegation") != delegationToken(t) || h.Get("Fence-Segment") != "3" || h.Get("Fence-Status") != "dproof-1" {
		t.Fatalf("headers %v", h)
	}
	if f.count("dstatus") != 1 {
		t.Fatalf("%d status requests for two writes within one proof life", f.count("dstatus"))
	}
	f.clock.Advance(statusLife * 4 / 5)
	if _, err := w.Put(ctx, "bucket", "jobs/a", 4, strings.NewReader("x"), ""); err != nil {
		t.Fatal(err)
	}
	if f.count("dstatus") != 2 || f.writes[2].Get("Fence-Status") != "dproof-2" {
		t.Fatalf("the aging proof was not refreshed: %d requests", f.count("dstatus"))
	}
}

// STALE_OWNER stops the writer for good: later tasks are answered with it
// and nothing more is sent.
func TestDelegatedWriterStopsForGoodOnStaleOwner(t *testing.T) {
	f, w := delegatedWriter(t)
	ctx := context.Background()
	f.refuseNext("write", domain.CodeStaleOwner)
	_, err := w.Put(ctx, "bucket", "jobs/a", 4, strings.NewReader("x"), "")
	wantCode(t, err, domain.CodeStaleOwner)
	_, err = w.Put(ctx, "bucket", "jobs/a", 5, strings.NewReader("x"), "")
	wantCode(t, err, domain.CodeStaleOwner)
	if f.count("write") != 1 || domain.ErrorCode(w.Err()) != domain.CodeStaleOwner {
		t.Fatalf("%d writes sent; Err %v", f.count("write"), w.Err())
	}
}

// A delegation the registry no longer states (revoked, forgotten) stops the
// writer before any write is sent.
func TestDelegatedWriterStopsWhenTheRegistryRefusesTheDelegation(t *testing.T) {
	f, w := delegatedWriter(t)
	f.refuseNext("dstatus", domain.CodeDelegationInvalid)
	_, err := w.Put(context.Background(), "bucket", "jobs/a", 2, strings.NewReader("x"), "")
	wantCode(t, err, domain.CodeDelegationInvalid)
	_, err = w.Delete(context.Background(), "bucket", "jobs/a", 3)
	wantCode(t, err, domain.CodeDelegationInvalid)
	if f.count("write") != 0 || f.count("dstatus") != 1 {
		t.Fatalf("%d writes, %d status requests", f.count("write"), f.count("dstatus"))
	}
}

// Rule (DESIGN §8, the delegate is refused exactly as the owner would be):
// once the registry states the lease not HELD, the delegate's writer sends
// nothing — it answers LEASE_NOT_HELD locally, as the owner's writers do,
// and stops for good — so a gateway in shadow mode, which forwards the
// writes it refuses, never sees one.
func TestDelegatedWriterSendsNothingOnceTheRegistryStatesTheLeaseNotHeld(t *testing.T) {
	f, w := delegatedWriter(t)
	ctx := context.Background()
	if _, err := w.Put(ctx, "bucket", "jobs/a", 2, strings.NewReader("x"), ""); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.state = domain.StateExpired
	f.mu.Unlock()
	f.refuseNext("write", shadowCode+domain.CodeStatusInvalid) // shadow mode would forward it
	f.clock.Advance(statusLife)                                // the proof stating HELD has aged
	_, err := w.Put(ctx, "bucket", "jobs/a", 3, strings.NewReader("x"), "")
	wantCode(t, err, domain.CodeLeaseNotHeld)
	_, err = w.Delete(ctx, "bucket", "jobs/a", 4)
	wantCode(t, err, domain.CodeLeaseNotHeld)
	if f.count("write") != 1 || f.count("dstatus") != 2 || domain.ErrorCode(w.Err()) != domain.CodeLeaseNotHeld {
		t.Fatalf("%d writes (want the first only), %d status requests (want 2); Err %v", f.count("write"), f.count("dstatus"), w.Err())
	}
}

func TestUnreadableDelegationIsRefusedWithoutSending(t *testing.T) {
	f, c := newFake(t)
	for _, tok := range []string{"", "a.b", "a.!!.c", "a." + base64.RawURLEncoding.EncodeToString([]byte(`{"schema":"x"}`)) + ".c"} {
		if _, err := c.DelegatedWriter("grant-7", tok); domain.ErrorCode(err) != domain.CodeDelegationInvalid {
			t.Fatalf("%q: %v", tok, err)
		}
	}
	if len(f.calls) != 0 {
		t.Fatal("requests were sent")
	}
}
