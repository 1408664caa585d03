package storetest

import (
	"fmt"
	"math"
	"time"

	"github.com/fencegate/fencegate"
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
		"negative timeout":   func(r *fencegate.AdmitRequest) { r.EffectTimeout = -time.Second },
		// A kept request is stored as text: bytes that are not UTF-8 would
		// come back changed and a resend would send other headers.
		"kept header not UTF-8": func(r *fencegate.AdmitRequest) {
			r.Request = &fencegate.EffectRequest{Method: "POST", Path: "/v1/payouts", Header: map[string][]string{"X-Note": {"caf\xe9"}}}
		},
		"kept path not UTF-8": func(r *fencegate.AdmitRequest) {
			r.Request = &fencegate.EffectRequest{Method: "POST", Path: "/v1/payouts/\xff"}
		},
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
	skew := fencegate.MaxClockSkew.Milliseconds()
	w4.g.IssuedAt = w5.g.IssuedAt + skew + 1
	f.reject(w4.req(1, "x"), fencegate.CodeFenceRegression, "")
	f.reject(w4.req(2, "x"), fencegate.CodeFenceRegression, "")
	// Within the clocks' skew of each other (a registry's clock stepped
	// back, a replica behind another), a lower fence issued "later" is a
	// stale owner's, not a rollback to page about.
	for _, at := range []int64{w5.g.IssuedAt + skew, w5.g.IssuedAt + 1, w5.g.IssuedAt, w5.g.IssuedAt - 1} {
		w4.g.IssuedAt = at
		f.reject(w4.req(1, "x"), fencegate.CodeStaleOwner, "")
	}
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

// receiptKeepsItsLandBy: an admission with an effect timeout keeps Now plus
// that timeout as the receipt's LandBy (the deadline its effect is sent
// with), in the answer, in every read and after its settle; without one
// the receipt has none.
func receiptKeepsItsLandBy(f *fx) {
	w := f.writer("res/landby", 5)
	req := w.req(1, "a")
	req.EffectTimeout = 90 * time.Second
	want := req.Now.UTC().Truncate(time.Microsecond).Add(90 * time.Second)
	adm := f.admit(req)
	if !adm.Receipt.LandBy.Equal(want) {
		f.t.Fatalf("admission's LandBy %v, want %v", adm.Receipt.LandBy, want)
	}
	if r := f.receipt(adm.Receipt.ID); !r.LandBy.Equal(want) {
		f.t.Fatalf("read LandBy %v, want %v", r.LandBy, want)
	}
	if r := f.commit(adm.Receipt.ID, "v1"); !r.LandBy.Equal(want) {
		f.t.Fatalf("settled receipt's LandBy %v, want %v", r.LandBy, want)
	}
	if r := f.admit(w.req(2, "b")).Receipt; !r.LandBy.IsZero() || !f.receipt(r.ID).LandBy.IsZero() {
		f.t.Fatalf("an admission without an effect timeout has LandBy %v", r.LandBy)
	}
}
