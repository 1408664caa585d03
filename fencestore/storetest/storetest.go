// Package storetest is the contract test suite of fencegate.FenceStore. Every
// store runs it from its own tests:
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) fencegate.FenceStore { return openEmptyStore(t) })
//	}
//
// Each rule of the FenceStore doc comment is a named subtest. After every
// rejected call the suite reads back everything a client can see (resource
// state, live receipts, receipts by state and by operation, versions and, but
// for QUARANTINED, the quarantine list) and requires it unchanged.
package storetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// Run runs the contract against stores made by open. open must return a new,
// empty store for each call; Run closes it when the subtest ends.
func Run(t *testing.T, open func(t *testing.T) fencegate.FenceStore) {
	tests := []struct {
		name string
		fn   func(f *fx)
	}{
		{"UnknownNamesAreNotFound", unknownNamesAreNotFound},
		{"AdmitRecordsReceiptAndState", admitRecordsReceiptAndState},
		{"InvalidRequestIsRejected", invalidRequestIsRejected},
		{"LowerFenceIsRejectedWithoutStateChange", lowerFenceIsRejected},
		{"HigherFenceNeedsSegmentOne", higherFenceNeedsSegmentOne},
		{"EqualFenceNeedsNextSegment", equalFenceNeedsNextSegment},
		{"SkippedSegmentIsRejected", skippedSegmentIsRejected},
		{"ReplayReturnsOriginalReceipt", replayReturnsOriginalReceipt},
		{"DifferentPayloadIsQuarantinedWithoutStateChange", differentPayloadIsQuarantined},
		{"EqualFenceUnderOtherLeaseIsRegression", equalFenceUnderOtherLeaseIsRegression},
		{"LowerFenceIssuedLaterIsRegression", lowerFenceIssuedLaterIsRegression},
		{"PendingEffectMakesResourceBusy", pendingEffectMakesResourceBusy},
		{"UnknownKeepsResourceBusyUntilSettled", unknownKeepsResourceBusyUntilSettled},
		{"FailedSegmentCanBeRetried", failedSegmentCanBeRetried},
		{"CommittedVersionIsRecorded", committedVersionIsRecorded},
		{"VersionSwapIsCompareAndSet", versionSwapIsCompareAndSet},
		{"DeleteForgetsVersion", deleteForgetsVersion},
		{"ReceiptsByOperationAreOrdered", receiptsByOperationAreOrdered},
		{"ReceiptsByState", receiptsByState},
		{"SettleRejectsIllegalTransitions", settleRejectsIllegalTransitions},
		{"HighestFenceNeverDecreases", highestFenceNeverDecreases},
		{"FencesAboveInt64Survive", fencesAboveInt64Survive},
		{"DuplicateReceiptIDIsRejected", duplicateReceiptIDIsRejected},
		{"ConcurrentAdmissionsOnOneResource", concurrentAdmissions},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(newFixture(t, s))
		})
	}
}

var (
	committed  = fencegate.Outcome{State: fencegate.ReceiptCommitted}
	failed     = fencegate.Outcome{State: fencegate.ReceiptFailed, Error: "backend refused"}
	unknown    = fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: "timeout"}
	notApplied = fencegate.Outcome{State: fencegate.ReceiptNotApplied, Error: "reconciled: not applied"}
)

func unknownNamesAreNotFound(f *fx) {
	_, err := f.s.Resource(f.ctx, "res/none")
	wantCode(f.t, err, fencegate.CodeNotFound, "")
	_, err = f.s.Receipt(f.ctx, "rcpt-none")
	wantCode(f.t, err, fencegate.CodeNotFound, "")
	_, err = f.s.ReceiptAt(f.ctx, "res/none", 1, 1)
	wantCode(f.t, err, fencegate.CodeNotFound, "")
	_, err = f.s.Settle(f.ctx, "rcpt-none", fencegate.Outcome{State: fencegate.ReceiptCommitted, Now: f.tick()})
	wantCode(f.t, err, fencegate.CodeNotFound, "")
	if v := f.version("res/none"); v != "" {
		f.t.Fatalf("Version of an unknown target = %q, want \"\"", v)
	}
	if rs := f.byOperation("op-none"); len(rs) != 0 {
		f.t.Fatalf("ReceiptsByOperation(op-none) = %v, want none", ids(rs))
	}
	for _, st := range allStates {
		if rs := f.byState(st, 10); len(rs) != 0 {
			f.t.Fatalf("ReceiptsByState(%s) on an empty store = %v", st, ids(rs))
		}
	}
	if q := f.quarantined(""); len(q) != 0 {
		f.t.Fatalf("Quarantined(\"\") on an empty store = %v", q)
	}
}

func admitRecordsReceiptAndState(f *fx) {
	w := f.writer("res/a", 7)
	a := f.admit(w.req(1, "a"))
	if a.PreviousVersion != "" {
		f.t.Fatalf("PreviousVersion of a fresh target = %q", a.PreviousVersion)
	}
	f.settle(a.Receipt.ID, fencegate.Outcome{
		State: fencegate.ReceiptCommitted, Version: "v1",
		Response: &fencegate.EffectResponse{Status: 201, Header: map[string]string{"Etag": `"v1"`}, Body: []byte(`{"ok":true}`)},
	})
	b := f.admit(w.req(2, "b"))
	if b.PreviousVersion != "v1" {
		f.t.Fatalf("PreviousVersion = %q, want v1", b.PreviousVersion)
	}
}

func invalidRequestIsRejected(f *fx) {
	w := f.writer("res/a", 5)
	f.commit(f.admit(w.req(1, "a")).Receipt.ID, "v1")
	mutations := map[string]func(r *fencegate.AdmitRequest){
		"segment 0":          func(r *fencegate.AdmitRequest) { r.Segment = 0 },
		"fence 0":            func(r *fencegate.AdmitRequest) { r.Grant.FenceToken = 0 },
		"no resource":        func(r *fencegate.AdmitRequest) { r.Grant.Resource = "" },
		"no target":          func(r *fencegate.AdmitRequest) { r.Target = "" },
		"no method":          func(r *fencegate.AdmitRequest) { r.Method = "" },
		"no receipt ID":      func(r *fencegate.AdmitRequest) { r.ReceiptID = "" },
		"no payload digest":  func(r *fencegate.AdmitRequest) { r.PayloadDigest = "" },
		"segment 0 on fresh": func(r *fencegate.AdmitRequest) { r.Segment = 0; r.Grant.Resource = "res/fresh" },
	}
	for _, name := range sortedKeys(mutations) {
		req := w.req(2, "b")
		mutations[name](&req)
		f.t.Logf("case %s", name)
		f.reject(req, fencegate.CodeInvalidRequest, "")
	}
}

func lowerFenceIsRejected(f *fx) {
	w5, w3 := f.writer("res/a", 5), f.writer("res/a", 3)
	f.commit(f.admit(w5.req(1, "a")).Receipt.ID, "v1")
	f.reject(w3.req(1, "x"), fencegate.CodeStaleOwner, "")
	f.reject(w3.req(2, "x"), fencegate.CodeStaleOwner, "")
	f.reject(w3.req(7, "x"), fencegate.CodeStaleOwner, "")
	// Still answered while an effect is in flight.
	f.admit(w5.req(2, "b"))
	f.reject(w3.req(1, "x"), fencegate.CodeStaleOwner, "")
	f.reject(f.writer("res/a", 4).req(1, "x"), fencegate.CodeStaleOwner, "")
}

func higherFenceNeedsSegmentOne(f *fx) {
	w5, w6 := f.writer("res/a", 5), f.writer("res/a", 6)
	// A fresh resource has highest fence 0: its first fence starts at segment 1.
	f.reject(w5.req(2, "a"), fencegate.CodeSegmentOutOfOrder, "")
	if _, err := f.s.Resource(f.ctx, "res/a"); err == nil {
		f.t.Fatal("a rejected first admit left a resource row")
	} else {
		wantCode(f.t, err, fencegate.CodeNotFound, "")
	}
	f.commit(f.admit(w5.req(1, "a")).Receipt.ID, "v1")
	f.commit(f.admit(w5.req(2, "b")).Receipt.ID, "v2")
	f.reject(w6.req(2, "c"), fencegate.CodeSegmentOutOfOrder, "")
	f.reject(w6.req(3, "c"), fencegate.CodeSegmentOutOfOrder, "")
	f.admit(w6.req(1, "c"))
}

func equalFenceNeedsNextSegment(f *fx) {
	w := f.writer("res/a", 5)
	for seg := uint64(1); seg <= 4; seg++ {
		f.commit(f.admit(w.req(seg, fmt.Sprint("p", seg))).Receipt.ID, fmt.Sprint("v", seg))
	}
	if row := f.resource("res/a"); row.LastSegmentSeq != 4 || row.HighestFence != 5 {
		f.t.Fatalf("state after 4 segments: %+v", row)
	}
}

func skippedSegmentIsRejected(f *fx) {
	w := f.writer("res/a", 5)
	f.commit(f.admit(w.req(1, "a")).Receipt.ID, "v1")
	f.reject(w.req(3, "c"), fencegate.CodeSegmentOutOfOrder, "")
	f.reject(w.req(5, "c"), fencegate.CodeSegmentOutOfOrder, "")
	f.reject(w.req(math.MaxUint64, "c"), fencegate.CodeSegmentOutOfOrder, "")
	f.commit(f.admit(w.req(2, "b")).Receipt.ID, "v2")
	f.reject(w.req(4, "d"), fencegate.CodeSegmentOutOfOrder, "")
	f.admit(w.req(3, "c"))
}

func replayReturnsOriginalReceipt(f *fx) {
	w := f.writer("res/a", 5)
	a := f.admit(w.req(1, "a"))
	// While PENDING: the resource is busy, but a replay is still answered.
	f.replay(w.req(1, "a"), a.Receipt.ID)
	f.settle(a.Receipt.ID, fencegate.Outcome{
		State: fencegate.ReceiptCommitted, Version: "v1",
		Response: &fencegate.EffectResponse{Status: 200, Header: map[string]string{"Etag": "v1"}, Body: []byte("done")},
	})
	r := f.replay(w.req(1, "a"), a.Receipt.ID)
	if r.Receipt.Response == nil || string(r.Receipt.Response.Body) != "done" || r.PreviousVersion != "v1" {
		f.t.Fatalf("replay after commit: %+v", r)
	}
	// PreviousVersion is the target's current version, not the one of the time.
	b := f.admit(w.req(2, "b"))
	f.commit(b.Receipt.ID, "v2")
	if r := f.replay(w.req(1, "a"), a.Receipt.ID); r.PreviousVersion != "v2" {
		f.t.Fatalf("replay PreviousVersion = %q, want v2", r.PreviousVersion)
	}
	// A replay from another owner under the same lease and root is a replay too.
	other := *w
	other.g.Owner = "someone-else"
	f.replay(other.req(2, "b"), b.Receipt.ID)
}

func differentPayloadIsQuarantined(f *fx) {
	w := f.writer("res/a", 5)
	a := f.admit(w.req(1, "a"))
	f.commit(a.Receipt.ID, "v1")
	f.quarantine(w.req(1, "other"), a.Receipt.ID)

	otherTarget := *w
	otherTarget.target = "res/a/child"
	f.quarantine(otherTarget.req(1, "a"), a.Receipt.ID)

	otherMethod := *w
	otherMethod.method = "DELETE"
	f.quarantine(otherMethod.req(1, "a"), a.Receipt.ID)

	// While the segment is still PENDING: QUARANTINED, not RESOURCE_BUSY.
	b := f.admit(w.req(2, "b"))
	f.quarantine(w.req(2, "not-b"), b.Receipt.ID)

	// Another resource's quarantine is listed apart.
	x := f.writer("res/x", 1)
	xa := f.admit(x.req(1, "xa"))
	f.quarantine(x.req(1, "xb"), xa.Receipt.ID)
	if q := f.quarantined("res/a"); len(q) != 4 {
		f.t.Fatalf("Quarantined(res/a) has %d records, want 4", len(q))
	}
	// All of them: by resource (in byte order), then time.
	f.sameJSON("Quarantined(\"\")", f.quarantined(""), append(f.quarantined("res/a"), f.quarantined("res/x")...))
	if q := f.quarantined("res/none"); len(q) != 0 {
		f.t.Fatalf("Quarantined(res/none) = %v", q)
	}
}

func equalFenceUnderOtherLeaseIsRegression(f *fx) {
	w := f.writer("res/a", 5)
	a := f.admit(w.req(1, "a"))
	f.commit(a.Receipt.ID, "v1")

	otherLease := *w
	otherLease.g.Lease = "lease-other"
	f.reject(otherLease.req(2, "b"), fencegate.CodeFenceRegression, "")
	// Even the accepted segment with its own payload: the lease check comes first.
	f.reject(otherLease.req(1, "a"), fencegate.CodeFenceRegression, "")

	otherRoot := *w
	otherRoot.g.OperationRoot = "root-other"
	f.reject(otherRoot.req(2, "b"), fencegate.CodeFenceRegression, "")
	f.reject(otherRoot.req(1, "a"), fencegate.CodeFenceRegression, "")
	f.admit(w.req(2, "b"))
}

func lowerFenceIssuedLaterIsRegression(f *fx) {
	w5 := f.writer("res/a", 5)
	f.commit(f.admit(w5.req(1, "a")).Receipt.ID, "v1")
	w4 := f.writer("res/a", 4)
	w4.g.IssuedAt = w5.g.IssuedAt + 1
	f.reject(w4.req(1, "x"), fencegate.CodeFenceRegression, "")
	f.reject(w4.req(2, "x"), fencegate.CodeFenceRegression, "")
	w4.g.IssuedAt = w5.g.IssuedAt
	f.reject(w4.req(1, "x"), fencegate.CodeStaleOwner, "")
	w4.g.IssuedAt = w5.g.IssuedAt - 1
	f.reject(w4.req(1, "x"), fencegate.CodeStaleOwner, "")
}

func pendingEffectMakesResourceBusy(f *fx) {
	w5, w6 := f.writer("res/a", 5), f.writer("res/a", 6)
	a := f.admit(w5.req(1, "a"))
	if row := f.resource("res/a"); row.PendingReceipt != a.Receipt.ID {
		f.t.Fatalf("PendingReceipt = %q, want %q", row.PendingReceipt, a.Receipt.ID)
	}
	f.reject(w5.req(2, "b"), fencegate.CodeResourceBusy, a.Receipt.ID)
	f.reject(w6.req(1, "c"), fencegate.CodeResourceBusy, a.Receipt.ID)
	f.reject(w5.req(3, "d"), fencegate.CodeResourceBusy, a.Receipt.ID)
	// Rejections and replays are still answered.
	f.reject(f.writer("res/a", 4).req(1, "x"), fencegate.CodeStaleOwner, "")
	f.replay(w5.req(1, "a"), a.Receipt.ID)
	// Another resource is not affected.
	f.admit(f.writer("res/b", 5).req(1, "a"))
	f.commit(a.Receipt.ID, "v1")
	f.admit(w5.req(2, "b"))
}

func unknownKeepsResourceBusyUntilSettled(f *fx) {
	w5, w6 := f.writer("res/a", 5), f.writer("res/a", 6)
	a := f.admit(w5.req(1, "a"))
	f.settle(a.Receipt.ID, unknown)
	f.reject(w5.req(2, "b"), fencegate.CodeResourceBusy, a.Receipt.ID)
	f.reject(w6.req(1, "c"), fencegate.CodeResourceBusy, a.Receipt.ID)
	f.replay(w5.req(1, "a"), a.Receipt.ID)
	f.settle(a.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1"})

	b := f.admit(w5.req(2, "b"))
	f.settle(b.Receipt.ID, unknown)
	f.reject(w5.req(3, "c"), fencegate.CodeResourceBusy, b.Receipt.ID)
	f.settle(b.Receipt.ID, notApplied) // gives segment 2 back
	if row := f.resource("res/a"); row.LastSegmentSeq != 1 || row.PendingReceipt != "" {
		f.t.Fatalf("after NOT_APPLIED: %+v", row)
	}
	f.reject(w5.req(3, "c"), fencegate.CodeSegmentOutOfOrder, "")
	c := f.admit(w5.req(2, "b-again"))
	f.settle(c.Receipt.ID, unknown)
	f.settle(c.Receipt.ID, failed)
	f.commit(f.admit(w5.req(2, "b-third")).Receipt.ID, "v2")
}

func failedSegmentCanBeRetried(f *fx) {
	w5, w6 := f.writer("res/a", 5), f.writer("res/a", 6)
	f.commit(f.admit(w5.req(1, "a")).Receipt.ID, "v1")
	b := f.admit(w5.req(2, "b"))
	f.settle(b.Receipt.ID, failed)
	if got := f.receipt(b.Receipt.ID); got.State != fencegate.ReceiptFailed || got.Error != failed.Error {
		f.t.Fatalf("failed receipt: %+v", got)
	}
	// The retry may carry another payload: the failed segment is not live.
	retry := f.admit(w5.req(2, "b2"))
	if retry.PreviousVersion != "v1" {
		f.t.Fatalf("PreviousVersion after a failed segment = %q, want v1", retry.PreviousVersion)
	}
	f.commit(retry.Receipt.ID, "v2")

	// A failed first segment of a new fence keeps the fence but frees segment 1.
	c := f.admit(w6.req(1, "c"))
	f.settle(c.Receipt.ID, failed)
	if row := f.resource("res/a"); row.HighestFence != 6 || row.LastSegmentSeq != 0 || row.Lease != "lease-6" {
		f.t.Fatalf("after failing segment 1 of fence 6: %+v", row)
	}
	f.reject(w5.req(3, "x"), fencegate.CodeStaleOwner, "")
	f.reject(w6.req(2, "x"), fencegate.CodeSegmentOutOfOrder, "")
	f.commit(f.admit(w6.req(1, "c")).Receipt.ID, "v3")
}

func committedVersionIsRecorded(f *fx) {
	w := f.writer("res/a", 5)
	a := f.admit(w.req(1, "a"))
	f.commit(a.Receipt.ID, "v1")
	b := f.admit(w.req(2, "b"))
	if b.PreviousVersion != "v1" {
		f.t.Fatalf("PreviousVersion = %q, want v1", b.PreviousVersion)
	}
	f.commit(b.Receipt.ID, "v2")

	child := *w
	child.target = "res/a/child"
	c := f.admit(child.req(3, "c"))
	if c.PreviousVersion != "" {
		f.t.Fatalf("PreviousVersion of another target = %q, want \"\"", c.PreviousVersion)
	}
	f.commit(c.Receipt.ID, "c1")
	if v := f.version("res/a"); v != "v2" {
		f.t.Fatalf("Version(res/a) = %q after a commit to another target", v)
	}
	// UNKNOWN and FAILED record no version, even when one is given.
	d := f.admit(w.req(4, "d"))
	f.settle(d.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptUnknown, Version: "maybe"})
	f.settle(d.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptFailed})
	e := f.admit(w.req(4, "e"))
	f.settle(e.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptFailed, Version: "nope"})
	if v := f.version("res/a"); v != "v2" {
		f.t.Fatalf("Version(res/a) = %q after UNKNOWN/FAILED, want v2", v)
	}
	g := f.admit(w.req(4, "g"))
	if g.PreviousVersion != "v2" {
		f.t.Fatalf("PreviousVersion = %q, want v2", g.PreviousVersion)
	}
	f.settle(g.Receipt.ID, unknown)
	f.commit(g.Receipt.ID, "v4")
}

func deleteForgetsVersion(f *fx) {
	w := f.writer("res/a", 5)
	f.commit(f.admit(w.req(1, "a")).Receipt.ID, "v1")
	del := *w
	del.method = "DELETE"
	d := f.admit(del.req(2, "delete"))
	if d.PreviousVersion != "v1" {
		f.t.Fatalf("PreviousVersion of the delete = %q, want v1", d.PreviousVersion)
	}
	f.commit(d.Receipt.ID, "")
	if v := f.version("res/a"); v != "" {
		f.t.Fatalf("Version after a delete = %q, want \"\"", v)
	}
	if c := f.admit(w.req(3, "c")); c.PreviousVersion != "" {
		f.t.Fatalf("PreviousVersion after a delete = %q, want \"\"", c.PreviousVersion)
	}
}

func receiptsByOperationAreOrdered(f *fx) {
	// Receipt IDs run against creation order, so that an ID order would show.
	name := 100
	id := func(req fencegate.AdmitRequest) fencegate.AdmitRequest {
		name--
		req.ReceiptID = fmt.Sprintf("op-rcpt-%03d", name)
		return req
	}
	w5, w6, y := f.writer("res/a", 5), f.writer("res/a", 6), f.writer("res/y", 1)
	w5.g.OperationID, w6.g.OperationID, y.g.OperationID = "op-X", "op-X", "op-Y"
	var want []string
	admit := func(w *writer, seg uint64, payload string, o fencegate.Outcome) {
		a := f.admit(id(w.req(seg, payload)))
		f.settle(a.Receipt.ID, o)
		if w.g.OperationID == "op-X" {
			want = append(want, a.Receipt.ID)
		}
	}
	admit(w5, 1, "a", committed)
	admit(y, 1, "y1", committed)
	admit(w5, 2, "b", failed)
	admit(w5, 2, "b2", committed)
	admit(y, 2, "y2", committed)
	admit(w6, 1, "c", unknown)
	f.settle(want[len(want)-1], committed)

	got := f.byOperation("op-X")
	if !slices.Equal(ids(got), want) {
		f.t.Fatalf("ReceiptsByOperation(op-X) = %v, want %v (oldest first)", ids(got), want)
	}
	for _, r := range got {
		f.sameJSON("listed receipt", r, f.receipt(r.ID))
	}
	if got := f.byOperation("op-Y"); len(got) != 2 || got[0].Segment != 1 || got[1].Segment != 2 {
		f.t.Fatalf("ReceiptsByOperation(op-Y) = %v", ids(got))
	}

	// Order is by creation time even when a receipt is stored after a newer one.
	early := id(y.req(3, "y3"))
	early.Now = time.UnixMilli(baseMs - 1000).UTC()
	f.admit(early)
	if got := f.byOperation("op-Y"); len(got) != 3 || got[0].ID != early.ReceiptID {
		f.t.Fatalf("ReceiptsByOperation(op-Y) = %v, want %s first", ids(got), early.ReceiptID)
	}
}

func receiptsByState(f *fx) {
	admit := func(res string) string { return f.admit(f.writer(res, 1).req(1, "a")).Receipt.ID }
	r1 := admit("res/1")
	r2 := admit("res/2")
	r3 := admit("res/3")
	r4 := admit("res/4")
	r5 := admit("res/5")
	f.settle(r2, unknown)
	f.commit(r3, "v3")
	f.settle(r4, failed)

	check := func(st fencegate.ReceiptState, limit int, want ...string) {
		f.t.Helper()
		if got := ids(f.byState(st, limit)); !slices.Equal(got, want) {
			f.t.Fatalf("ReceiptsByState(%s, %d) = %v, want %v", st, limit, got, want)
		}
	}
	check(fencegate.ReceiptPending, 10, r1, r5)
	check(fencegate.ReceiptPending, 1, r1)
	check(fencegate.ReceiptPending, 0, r1, r5)
	check(fencegate.ReceiptUnknown, 10, r2)
	check(fencegate.ReceiptCommitted, 10, r3)
	check(fencegate.ReceiptFailed, 10, r4)
	check(fencegate.ReceiptNotApplied, 10)

	f.commit(r1, "v1")
	f.settle(r2, notApplied)
	check(fencegate.ReceiptPending, 10, r5)
	check(fencegate.ReceiptCommitted, 10, r1, r3)
	check(fencegate.ReceiptCommitted, 1, r1)
	check(fencegate.ReceiptUnknown, 10)
	check(fencegate.ReceiptNotApplied, 10, r2)
}

func settleRejectsIllegalTransitions(f *fx) {
	w := f.writer("res/a", 5)
	a := f.admit(w.req(1, "a")).Receipt.ID
	for _, to := range []fencegate.ReceiptState{fencegate.ReceiptPending, "BOGUS", ""} {
		f.settleFails(a, fencegate.Outcome{State: to}, fencegate.CodeInvalidRequest)
	}
	done := f.commit(a, "v1")
	// The same terminal state with the same version is an idempotent repeat.
	again, err := f.s.Settle(f.ctx, a, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1", Now: f.tick()})
	if err != nil {
		f.t.Fatalf("repeating COMMITTED v1: %v", err)
	}
	f.sameJSON("repeated settle", again, done)
	f.sameJSON("receipt after repeated settle", f.receipt(a), done)
	for _, o := range []fencegate.Outcome{
		{State: fencegate.ReceiptCommitted, Version: "v2"},
		{State: fencegate.ReceiptFailed}, {State: fencegate.ReceiptUnknown},
		{State: fencegate.ReceiptNotApplied}, {State: fencegate.ReceiptPending},
	} {
		f.settleFails(a, o, fencegate.CodeInvalidRequest)
	}

	b := f.admit(w.req(2, "b")).Receipt.ID
	f.settle(b, unknown)
	f.settleFails(b, unknown, fencegate.CodeInvalidRequest)
	f.settleFails(b, fencegate.Outcome{State: fencegate.ReceiptPending}, fencegate.CodeInvalidRequest)
	f.settle(b, notApplied)
	if _, err := f.s.Settle(f.ctx, b, fencegate.Outcome{State: fencegate.ReceiptNotApplied, Now: f.tick()}); err != nil {
		f.t.Fatalf("repeating NOT_APPLIED: %v", err)
	}
	f.settleFails(b, committed, fencegate.CodeInvalidRequest)
	f.settleFails(b, failed, fencegate.CodeInvalidRequest)

	c := f.admit(w.req(2, "c")).Receipt.ID
	f.settle(c, failed)
	if _, err := f.s.Settle(f.ctx, c, fencegate.Outcome{State: fencegate.ReceiptFailed, Now: f.tick()}); err != nil {
		f.t.Fatalf("repeating FAILED: %v", err)
	}
	f.settleFails(c, committed, fencegate.CodeInvalidRequest)
	f.settleFails(c, unknown, fencegate.CodeInvalidRequest)
	f.settleFails("rcpt-none", committed, fencegate.CodeNotFound)
}

func highestFenceNeverDecreases(f *fx) {
	var highest uint64
	step := func(fence, seg uint64, o fencegate.Outcome) {
		f.t.Helper()
		w := f.writer("res/a", fence)
		req := w.req(seg, fmt.Sprintf("p-%d-%d", fence, seg))
		if fence < highest {
			f.reject(req, fencegate.CodeStaleOwner, "")
		} else {
			a := f.admit(req)
			f.settle(a.Receipt.ID, o)
			highest = fence
		}
		if row := f.resource("res/a"); row.HighestFence != highest {
			f.t.Fatalf("HighestFence = %d, want %d", row.HighestFence, highest)
		}
	}
	step(3, 1, committed)
	step(2, 1, committed)
	step(3, 2, failed)
	step(9, 1, failed) // a failed new fence still raises the highest fence
	step(3, 2, committed)
	step(8, 1, committed)
	step(9, 1, committed)
	step(10, 1, notApplied)
	step(9, 2, committed)
	step(10, 1, committed)
}

func fencesAboveInt64Survive(f *fx) {
	fences := []uint64{math.MaxInt64, math.MaxInt64 + 1, math.MaxInt64 + 2, math.MaxUint64 - 1, math.MaxUint64}
	var ws []*writer
	for i, fence := range fences {
		w := f.writer("res/big", fence)
		w.g.IssuedAt = baseMs + int64(i)*1000
		ws = append(ws, w)
		f.commit(f.admit(w.req(1, fmt.Sprint("p", i))).Receipt.ID, fmt.Sprint("v", i))
	}
	// The highest fence compares above every lower one, however close.
	f.reject(ws[3].req(2, "x"), fencegate.CodeStaleOwner, "")
	f.reject(ws[1].req(2, "x"), fencegate.CodeStaleOwner, "")
	f.reject(ws[4].req(3, "x"), fencegate.CodeSegmentOutOfOrder, "")
	f.commit(f.admit(ws[4].req(2, "q")).Receipt.ID, "v-last")
	for _, fence := range fences {
		r, err := f.s.ReceiptAt(f.ctx, "res/big", fence, 1)
		if err != nil || r.FenceToken != fence || r.Segment != 1 {
			f.t.Fatalf("ReceiptAt(fence %d) = fence %d segment %d, %v", fence, r.FenceToken, r.Segment, err)
		}
	}
}

func duplicateReceiptIDIsRejected(f *fx) {
	a := f.admit(f.writer("res/a", 1).req(1, "a"))
	req := f.writer("res/b", 1).req(1, "b")
	req.ReceiptID = a.Receipt.ID
	f.reject(req, fencegate.CodeInvalidRequest, "")
	_, err := f.s.Resource(f.ctx, "res/b")
	wantCode(f.t, err, fencegate.CodeNotFound, "")
}

// concurrentAdmissions races workers on one resource with mixed fences and
// segments. Every admitted attempt is committed at once with version
// "v-<receipt ID>", so each admission's PreviousVersion names the admission
// before it: the admissions must form one chain (no two writers admitted on
// the same predecessor), and along it fences never decrease and the segments
// of each fence run 1..n without gaps.
func concurrentAdmissions(f *fx) {
	const (
		workers  = 16
		attempts = 6
		res      = "res/race"
		op       = "op-race"
	)
	f.resources[res], f.targets[res] = true, true
	type win struct {
		id         string
		fence, seg uint64
		prev       string
	}
	var (
		mu       sync.Mutex
		wins     []win
		problems []string
		codes    = map[fencegate.Code]int{}
		wg       sync.WaitGroup
	)
	problem := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// Rounds: every worker picks its attempt, then all fire together.
	ready := make([]sync.WaitGroup, attempts)
	fire := make([]chan struct{}, attempts)
	for a := range attempts {
		ready[a].Add(workers)
		fire[a] = make(chan struct{})
	}
	for wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(wk), 7))
			for a := range attempts {
				var fence, seg uint64
				if rng.IntN(3) > 0 {
					// Informed: aim at what the store would accept right now.
					row, err := f.s.Resource(f.ctx, res)
					if err != nil && fencegate.ErrorCode(err) != fencegate.CodeNotFound {
						problem("Resource: %v", err)
					}
					switch {
					case row.HighestFence == 0 || rng.IntN(4) == 0:
						fence, seg = row.HighestFence+1, 1
					default:
						fence, seg = row.HighestFence, row.LastSegmentSeq+1
					}
				} else {
					fence = 1 + uint64(rng.IntN(3)) + uint64(a/2)
					seg = 1 + uint64(rng.IntN(3))
				}
				ready[a].Done()
				<-fire[a]
				g := grantFor(res, fence)
				g.OperationID = op
				req := fencegate.AdmitRequest{
					Grant: g, Segment: seg, Target: res, Method: "PUT",
					PayloadDigest: fmt.Sprintf("sha256:w%d-a%d", wk, a),
					ReceiptID:     fmt.Sprintf("race-%02d-%02d", wk, a),
					Now:           time.UnixMilli(baseMs + int64(wk*attempts+a)).UTC(),
				}
				adm, err := f.s.Admit(f.ctx, req)
				if err != nil {
					code := fencegate.ErrorCode(err)
					switch code {
					case fencegate.CodeStaleOwner, fencegate.CodeSegmentOutOfOrder,
						fencegate.CodeQuarantined, fencegate.CodeResourceBusy:
						mu.Lock()
						codes[code]++
						mu.Unlock()
					default:
						problem("admit fence %d segment %d: %v", fence, seg, err)
					}
					continue
				}
				if adm.Replay {
					problem("admit fence %d segment %d with a unique payload was a replay", fence, seg)
					continue
				}
				mu.Lock()
				wins = append(wins, win{adm.Receipt.ID, fence, seg, adm.PreviousVersion})
				mu.Unlock()
				if _, err := f.s.Settle(f.ctx, adm.Receipt.ID, fencegate.Outcome{
					State: fencegate.ReceiptCommitted, Version: "v-" + adm.Receipt.ID, Now: req.Now,
				}); err != nil {
					problem("settle %s: %v", adm.Receipt.ID, err)
				}
			}
		}()
	}
	for a := range attempts {
		ready[a].Wait()
		close(fire[a])
	}
	wg.Wait()
	for _, p := range problems {
		f.t.Error(p)
	}
	if f.t.Failed() {
		f.t.FailNow()
	}
	f.t.Logf("%d of %d attempts admitted; rejections: %v", len(wins), workers*attempts, codes)
	if len(wins) == 0 {
		f.t.Fatal("no attempt was admitted")
	}

	// Rebuild the admission order from the PreviousVersion chain.
	byPrev := map[string]win{}
	for _, w := range wins {
		if other, dup := byPrev[w.prev]; dup {
			f.t.Fatalf("%s and %s were both admitted after version %q", other.id, w.id, w.prev)
		}
		byPrev[w.prev] = w
	}
	var chain []win
	for prev := ""; ; {
		w, ok := byPrev[prev]
		if !ok {
			break
		}
		chain = append(chain, w)
		prev = "v-" + w.id
	}
	if len(chain) != len(wins) {
		f.t.Fatalf("admissions do not form one chain: %d linked of %d", len(chain), len(wins))
	}
	for i, w := range chain {
		switch {
		case i == 0 || w.fence > chain[i-1].fence:
			if w.seg != 1 {
				f.t.Fatalf("admission %d: fence %d started at segment %d", i, w.fence, w.seg)
			}
		case w.fence == chain[i-1].fence:
			if w.seg != chain[i-1].seg+1 {
				f.t.Fatalf("admission %d: fence %d segment %d after segment %d", i, w.fence, w.seg, chain[i-1].seg)
			}
		default:
			f.t.Fatalf("admission %d: fence %d accepted after fence %d", i, w.fence, chain[i-1].fence)
		}
		r, err := f.s.ReceiptAt(f.ctx, res, w.fence, w.seg)
		if err != nil || r.ID != w.id || r.State != fencegate.ReceiptCommitted {
			f.t.Fatalf("ReceiptAt(fence %d, segment %d) = %s %s, %v; want %s COMMITTED", w.fence, w.seg, r.ID, r.State, err, w.id)
		}
	}
	last := chain[len(chain)-1]
	row := f.resource(res)
	if row.HighestFence != last.fence || row.LastSegmentSeq != last.seg || row.PendingReceipt != "" ||
		row.Lease != fmt.Sprintf("lease-%d", last.fence) {
		f.t.Fatalf("final state %+v, want fence %d segment %d of the last admission %s", row, last.fence, last.seg, last.id)
	}
	if v := f.version(res); v != "v-"+last.id {
		f.t.Fatalf("final version %q, want v-%s", v, last.id)
	}
	if got := f.byOperation(op); len(got) != len(wins) {
		f.t.Fatalf("ReceiptsByOperation has %d receipts, want %d", len(got), len(wins))
	}
	for _, st := range []fencegate.ReceiptState{fencegate.ReceiptPending, fencegate.ReceiptUnknown} {
		if rs := f.byState(st, 0); len(rs) != 0 {
			f.t.Fatalf("%d receipts left %s", len(rs), st)
		}
	}
}
