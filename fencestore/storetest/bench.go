package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// BenchAdmitSettle measures one Admit plus one Settle (COMMITTED) on one
// resource, segments in sequence under one grant: the cost of one fenced write
// in the store. s must be empty.
func BenchAdmitSettle(b *testing.B, s fencegate.FenceStore) { benchAdmitSettle(b, s, nil) }

// BenchAdmitSettleKeptRequest is BenchAdmitSettle for API effects: each
// admission keeps a request of a 1 KiB body and three headers, and each
// settle records an attempt, as an API call does.
func BenchAdmitSettleKeptRequest(b *testing.B, s fencegate.FenceStore) {
	body := make([]byte, 1024)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	benchAdmitSettle(b, s, &fencegate.EffectRequest{Method: "POST", Path: "/v1/accounts/acc_1/payouts",
		Header: map[string][]string{"Content-Type": {"application/json"}, "Idempotency-Key": {"fg-0123456789abcdef0123456789abcdef0123456789"},
			"Accept": {"application/json"}}, Body: body, Key: "fg-0123456789abcdef0123456789abcdef0123456789"})
}

func benchAdmitSettle(b *testing.B, s fencegate.FenceStore, kept *fencegate.EffectRequest) {
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
			Request: kept,
		})
		if err != nil {
			b.Fatalf("admit segment %d: %v", seg, err)
		}
		if _, err := s.Settle(ctx, adm.Receipt.ID, fencegate.Outcome{
			State: fencegate.ReceiptCommitted, Version: fmt.Sprintf("v%d", seg), Now: now, Attempts: 1,
		}); err != nil {
			b.Fatalf("settle segment %d: %v", seg, err)
		}
	}
}

// BenchAdmitSettleParallel is BenchAdmitSettle from b's parallel goroutines
// (b.SetParallelism sets how many per CPU), each on a resource of its own:
// what a store's group commit, if it has one, can share.
func BenchAdmitSettleParallel(b *testing.B, s fencegate.FenceStore) {
	ctx := context.Background()
	var workers atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		w := workers.Add(1)
		res := fmt.Sprintf("bench/res-%d", w)
		g := fencegate.VerifiedGrant{
			Grant: fencegate.Grant{
				Schema: fencegate.GrantSchema, Resource: res, Owner: "bench", Lease: "lease-1",
				FenceToken: 1, OperationID: "op-bench", OperationRoot: "root-1",
				IssuedAt: baseMs, ExpiresAt: baseMs + 30_000,
			},
			Digest: "sha256:grant",
		}
		now := time.UnixMilli(baseMs).UTC()
		var seg uint64
		for pb.Next() {
			seg++
			now = now.Add(time.Millisecond)
			adm, err := s.Admit(ctx, fencegate.AdmitRequest{
				Grant: g, Segment: seg, Target: res, Method: "PUT",
				PayloadDigest: fmt.Sprintf("sha256:%d", seg), ReceiptID: fmt.Sprintf("bench-%d-%d", w, seg), Now: now,
			})
			if err != nil {
				b.Errorf("admit segment %d: %v", seg, err)
				return
			}
			if _, err := s.Settle(ctx, adm.Receipt.ID, fencegate.Outcome{
				State: fencegate.ReceiptCommitted, Version: fmt.Sprintf("v%d", seg), Now: now, Attempts: 1,
			}); err != nil {
				b.Errorf("settle segment %d: %v", seg, err)
				return
			}
		}
	})
}
