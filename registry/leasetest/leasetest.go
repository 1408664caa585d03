// Package leasetest is the contract suite every fencegate.LeaseBackend must
// pass. It drives the backend with an injected clock (times passed as now), so
// nothing sleeps and no assertion depends on timing.
package leasetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// T0 is the suite's starting instant; tests move time by adding to it.
var T0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// Open returns a fresh, empty backend; the suite closes it when the test ends.
type Open func(t *testing.T) fencegate.LeaseBackend

// Run runs the whole contract against backends made by open, which keep
// lease records for Retention (the backends' default). Every subtest gets
// its own backend.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(*testing.T, *harness)
	}{
		{"FirstFenceIsOneThenStrictlyIncreasingPerResource", testFencesIncreasePerResource},
		{"SameRequestIDReturnsSameLeaseAndFence", testSameRequestID},
		{"SameRequestIDAfterExpiryReturnsExpiredLease", testSameRequestIDAfterExpiry},
		{"SameRequestIDWithOtherParametersIsConflictAndChangesNothing", testSameRequestIDOtherParameters},
		{"OtherOwnerWhileLiveGetsLeaseHeldAndBurnsNoFence", testLeaseHeld},
		{"AcquireAfterExpiryGetsHigherFenceAndOldLeaseReadsExpired", testAcquireAfterExpiry},
		{"RenewExtendsExpiryFromNow", testRenewExtends},
		{"RenewOfExpiredOrReleasedLeaseIsNotHeld", testRenewNotHeld},
		{"RenewWithStaleClockAfterTakeoverIsNotHeld", testStaleRenewAfterTakeover},
		{"RenewOrReleaseByOtherOwnerIsOwnerMismatch", testOwnerMismatch},
		{"ReleaseLetsAnotherOwnerAcquire", testReleaseThenAcquire},
		{"ReleaseTwiceIsFine", testReleaseTwice},
		{"UnknownLeaseIsNotFound", testNotFound},
		{"FloorRaisesNextFenceAndNeverGoesDown", testFloor},
		{"RevisionIncreasesWithEveryMutation", testRevision},
		{"EmptyBackendHasNoIncarnation", testEmptyBackendHasNoIncarnation},
		{"ClaimWritesMarkerAndRaisesFloor", testClaimWritesMarkerAndRaisesFloor},
		{"ClaimOverAnotherMarkerIsStateLost", testClaimOverAnotherMarkerIsStateLost},
		{"AcquireUnderAnotherIncarnationIsStateLost", testAcquireUnderAnotherIncarnationIsStateLost},
		{"RenewReleaseAndFloorUnderAnotherIncarnationAreStateLost", testRenewReleaseAndFloorUnderAnotherIncarnationAreStateLost},
		{"RepeatAndHeldAcquireUnderAnotherIncarnationAreStateLost", testRepeatAndHeldAcquireUnderAnotherIncarnationAreStateLost},
		{"FloorNearTheEndOfTheSequenceIsRefused", testFloorNearTheEndIsRefused},
		{"InvalidAcquireIsRejected", testInvalidAcquire},
		{"ConcurrentAcquiresHaveOneWinnerPerLivePeriod", testConcurrentAcquire},
		{"ConcurrentReleasesReportOneRelease", testConcurrentRelease},
		{"HolderNamesTheLiveLeaseOnly", testHolder},
		{"LeaseRecordAndRequestIDAreForgottenAfterExpiryPlusRetentionButFencesKeepRising", testRetention},
		{"ForgottenRecordsArePrunedWithoutAnAcquisition", testPruneWithoutAcquisition},
		{"ConcurrentRepeatsOfOneRequestIDOnTwoResourcesMakeOneLeaseElseRequestIDConflict", testConcurrentSameRequestIDTwoResources},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := open(t)
			t.Cleanup(func() {
				if err := b.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			tc.fn(t, &harness{t: t, b: b, ctx: context.Background()})
		})
	}
}

// harness keeps the per-test backend and hands out unique lease and request IDs.
type harness struct {
	t   *testing.T
	b   fencegate.LeaseBackend
	ctx context.Context
	seq atomic.Uint64
}

func (h *harness) id(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, h.seq.Add(1))
}

// req builds an acquire request with fresh lease and request IDs.
func (h *harness) req(resource, owner string, ttl time.Duration, now time.Time) fencegate.AcquireRequest {
	return fencegate.AcquireRequest{
		LeaseID:           h.id("lease"),
		Resource:          resource,
		Owner:             owner,
		RequestID:         h.id("req"),
		OperationID:       "op-" + resource,
		OperationRoot:     "sha256:" + resource,
		OperationCategory: "write",
		TTL:               ttl,
		Now:               now,
	}
}

func (h *harness) acquire(req fencegate.AcquireRequest) fencegate.Lease {
	h.t.Helper()
	l, err := h.b.Acquire(h.ctx, req)
	if err != nil {
		h.t.Fatalf("acquire %s by %s: %v", req.Resource, req.Owner, err)
	}
	return l
}

func (h *harness) lease(id string, now time.Time) fencegate.Lease {
	h.t.Helper()
	l, err := h.b.Lease(h.ctx, id, now)
	if err != nil {
		h.t.Fatalf("lease %s: %v", id, err)
	}
	return l
}

func (h *harness) release(l fencegate.Lease, now time.Time) fencegate.Lease {
	h.t.Helper()
	out, _ := h.releaseReport(l, now)
	return out
}

// releaseReport releases l at now and returns the lease answered and whether
// the backend reports that this call released it.
func (h *harness) releaseReport(l fencegate.Lease, now time.Time) (fencegate.Lease, bool) {
	h.t.Helper()
	out, released, err := h.b.Release(h.ctx, l.ID, l.Owner, now, fencegate.Guard{})
	if err != nil {
		h.t.Fatalf("release %s: %v", l.ID, err)
	}
	return out, released
}

// wantCode fails unless err carries code.
func wantCode(t *testing.T, err error, code fencegate.Code) {
	t.Helper()
	if got := fencegate.ErrorCode(err); got != code {
		t.Fatalf("want %s, got %v", code, err)
	}
}

func wantState(t *testing.T, l fencegate.Lease, s fencegate.StatusState) {
	t.Helper()
	if l.State != s {
		t.Fatalf("lease %s: want state %s, got %s", l.ID, s, l.State)
	}
}
