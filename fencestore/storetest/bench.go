package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// BenchAdmitSettle measures one Admit plus one Settle (COMMITTED) on one
// resource, segments in sequence under one grant: the cost of one fenced write
// in the store. s must be empty.
func BenchAdmitSettle(b *testing.B, s fencegate.FenceStore) {
	ctx := context.Background()
	g := fencegate.VerifiedGrant{
		Grant: fencegate.Grant{
			Schema: fencegate.GrantSchema, Resource: "bench/res", Owner: "bench", Lease: "lease-1",
			FenceToken: 1, OperationID: "op-bench", OperationRoot: "root-1",
			IssuedAt: baseMs, ExpiresAt: baseMs + 30_000,
		},
		Digest: "sha256:grant",
	}
	now := time.UnixMilli(baseMs).UTC()
	var seg uint64
	for b.Loop() {
		seg++
		now = now.Add(time.Millisecond)
		adm, err := s.Admit(ctx, fencegate.AdmitRequest{
			Grant: g, Segment: seg, Target: "bench/res", Method: "PUT",
			PayloadDigest: fmt.Sprintf("sha256:%d", seg), ReceiptID: fmt.Sprintf("bench-%d", seg), Now: now,
		})
		if err != nil {
			b.Fatalf("admit segment %d: %v", seg, err)
		}
		if _, err := s.Settle(ctx, adm.Receipt.ID, fencegate.Outcome{
			State: fencegate.ReceiptCommitted, Version: fmt.Sprintf("v%d", seg), Now: now,
		}); err != nil {
			b.Fatalf("settle segment %d: %v", seg, err)
		}
	}
}
