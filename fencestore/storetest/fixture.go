package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// baseMs is the fixture clock's start, in Unix milliseconds.
const baseMs = 1_700_000_000_000

// fx is one subtest's store plus the bookkeeping the assertions need.
type fx struct {
	t   *testing.T
	s   fencegate.FenceStore
	ctx context.Context
	// open makes another empty store of the same kind (a twin to compare with).
	open func(t *testing.T) fencegate.FenceStore

	clock     time.Time
	n         int
	resources map[string]bool
	targets   map[string]bool
}

func newFixture(t *testing.T, s fencegate.FenceStore, open func(t *testing.T) fencegate.FenceStore) *fx {
	return &fx{
		t: t, s: s, ctx: context.Background(), open: open,
		clock:     time.UnixMilli(baseMs).UTC(),
		resources: map[string]bool{},
		targets:   map[string]bool{},
	}
}

// tick advances the fixture clock by a millisecond and returns it.
func (f *fx) tick() time.Time {
	f.clock = f.clock.Add(time.Millisecond)
	return f.clock
}

// writer holds one grant and makes admit requests under it.
type writer struct {
	f      *fx
	g      fencegate.VerifiedGrant
	target string
	method string
}

// writer returns a writer for resource at fence, under lease "lease-<fence>",
// root "root-<fence>", issued fence seconds after the base time: grants of
// higher fences are issued later.
func (f *fx) writer(resource string, fence uint64) *writer {
	f.resources[resource] = true
	return &writer{f: f, g: grantFor(resource, fence), target: resource, method: "PUT"}
}

// grantFor is the grant of writer(resource, fence).
func grantFor(resource string, fence uint64) fencegate.VerifiedGrant {
	issued := int64(baseMs) + int64(fence%1_000_000)*1000
	return fencegate.VerifiedGrant{
		Grant: fencegate.Grant{
			Schema:            fencegate.GrantSchema,
			Resource:          resource,
			Owner:             fmt.Sprintf("owner-%d", fence),
			RequestID:         fmt.Sprintf("req-%d", fence),
			Lease:             fmt.Sprintf("lease-%d", fence),
			FenceToken:        fence,
			OperationID:       "op-" + resource,
			OperationRoot:     fmt.Sprintf("root-%d", fence),
			OperationCategory: "object",
			IssuerEpoch:       1,
			TTLMs:             30_000,
			IssuedAt:          issued,
			ExpiresAt:         issued + 30_000,
		},
		Digest: fmt.Sprintf("sha256:grant-%s-%d", resource, fence),
		KeyID:  "k1",
	}
}

// req is an admit request for segment seg with payload digest "sha256:"+payload
// and a fresh receipt ID.
func (w *writer) req(seg uint64, payload string) fencegate.AdmitRequest {
	f := w.f
	f.n++
	f.targets[w.target] = true
	f.resources[w.g.Resource] = true
	return fencegate.AdmitRequest{
		Grant:         w.g,
		Segment:       seg,
		Target:        w.target,
		Method:        w.method,
		PayloadDigest: "sha256:" + payload,
		PayloadSize:   int64(len(payload)),
		// A store calls this only to quarantine the segment.
		QuarantinePayload: func() ([]byte, error) { return []byte(payload), nil },
		ReceiptID:         fmt.Sprintf("rcpt-%04d", f.n),
		Now:               f.tick(),
	}
}

// --- successful calls, checked against the contract ---------------------------

// admit admits req, which must be accepted (not replayed), and checks the new
// receipt, the resource state and the indexes.
func (f *fx) admit(req fencegate.AdmitRequest) fencegate.Admission {
	f.t.Helper()
	g := req.Grant
	prev := f.version(req.Target)
	adm, err := f.s.Admit(f.ctx, req)
	if err != nil {
		f.t.Fatalf("admit fence %d segment %d of %s: %v", g.FenceToken, req.Segment, g.Resource, err)
	}
	if adm.Replay {
		f.t.Fatalf("admit fence %d segment %d: got a replay, want a new admission", g.FenceToken, req.Segment)
	}
	if adm.PreviousVersion != prev {
		f.t.Fatalf("PreviousVersion = %q, want %q (the target's committed version)", adm.PreviousVersion, prev)
	}
	f.admitted(req, adm)
	return adm
}

// admitted checks that req's admission adm wrote the new PENDING receipt,
// its live index entry and the resource's new state.
func (f *fx) admitted(req fencegate.AdmitRequest, adm fencegate.Admission) {
	f.t.Helper()
	g := req.Grant
	want := fencegate.Receipt{
		ID: req.ReceiptID, Resource: g.Resource, Target: req.Target, Method: req.Method,
		FenceToken: g.FenceToken, Segment: req.Segment, OperationID: g.OperationID,
		OperationRoot: g.OperationRoot, Lease: g.Lease, Owner: g.Owner, Delegate: req.Delegate,
		DelegationID: req.DelegationID, GrantDigest: g.Digest, PayloadDigest: req.PayloadDigest, EffectKey: req.EffectKey, Request: req.Request, State: fencegate.ReceiptPending, CreatedAt: req.Now,
	}
	if req.EffectTimeout > 0 {
		want.LandBy = req.Now.Add(req.EffectTimeout)
	}
	f.sameJSON("admitted receipt", adm.Receipt, want)
	f.sameJSON("stored receipt", f.receipt(req.ReceiptID), want)
	live, err := f.s.ReceiptAt(f.ctx, g.Resource, g.FenceToken, req.Segment)
	if err != nil {
		f.t.Fatalf("ReceiptAt after admit: %v", err)
	}
	f.sameJSON("live receipt", live, want)
	f.sameJSON("resource after admit", f.resource(g.Resource), fencegate.ResourceState{
		Resource: g.Resource, HighestFence: g.FenceToken, Root: g.OperationRoot, Lease: g.Lease,
		LastSegmentSeq: req.Segment, GrantIssuedAt: g.IssuedAt, PendingReceipt: req.ReceiptID,
		UpdatedAt: req.Now,
	})
}

// settle settles receipt id with o (Now filled in from the clock when zero),
// which must succeed, and checks the receipt, the resource, the version and
// the live index against the settle rules.
func (f *fx) settle(id string, o fencegate.Outcome) fencegate.Receipt {
	f.t.Helper()
	if o.Now.IsZero() {
		o.Now = f.tick()
	}
	before := f.receipt(id)
	rowBefore := f.resource(before.Resource)
	versionBefore := f.version(before.Target)

	got, err := f.s.Settle(f.ctx, id, o)
	if err != nil {
		f.t.Fatalf("settle %s %s -> %s: %v", id, before.State, o.State, err)
	}
	want := settledAs(before, o)
	f.sameJSON("settled receipt", got, want)
	f.sameJSON("stored settled receipt", f.receipt(id), want)
	f.sameJSON("resource after settle", f.resource(before.Resource), rowSettled(rowBefore, before, o))

	wantVersion := versionBefore
	if o.State == fencegate.ReceiptCommitted {
		wantVersion = o.Version
	}
	if v := f.version(before.Target); v != wantVersion {
		f.t.Fatalf("Version(%s) after settling to %s = %q, want %q", before.Target, o.State, v, wantVersion)
	}

	live, err := f.s.ReceiptAt(f.ctx, before.Resource, before.FenceToken, before.Segment)
	if o.State.NotApplied() {
		wantCode(f.t, err, fencegate.CodeNotFound, "")
	} else if err != nil {
		f.t.Fatalf("ReceiptAt after settling to %s: %v", o.State, err)
	} else {
		f.sameJSON("live receipt after settle", live, want)
	}
	return got
}

// settledAs is the receipt before becomes when settled with o, by the
// contract's settle rules (an allowed move, not a repeat).
func settledAs(before fencegate.Receipt, o fencegate.Outcome) fencegate.Receipt {
	want := before
	want.State, want.Version, want.Response, want.Error = o.State, o.Version, o.Response, o.Error
	want.Attempts += o.Attempts
	want.Resend = o.Resend && o.State == fencegate.ReceiptUnknown
	at := o.Now
	want.SettledAt = &at
	want.RetryAt = nil
	if o.State == fencegate.ReceiptUnknown && o.RetryAfter > 0 {
		t := at.Add(min(o.RetryAfter, fencegate.MaxRetryAfter))
		want.RetryAt = &t
	}
	return want
}

// rowSettled is the resource row after its receipt before was settled with
// o: FAILED and NOT_APPLIED give the last segment back, anything but UNKNOWN
// clears the pending mark.
func rowSettled(row fencegate.ResourceState, before fencegate.Receipt, o fencegate.Outcome) fencegate.ResourceState {
	want := row
	if o.State.NotApplied() && row.HighestFence == before.FenceToken && row.LastSegmentSeq == before.Segment {
		want.LastSegmentSeq--
	}
	if row.PendingReceipt == before.ID && o.State != fencegate.ReceiptUnknown {
		want.PendingReceipt = ""
	}
	if want != row {
		want.UpdatedAt = o.Now
	}
	return want
}

// commit settles id COMMITTED with version.
func (f *fx) commit(id, version string) fencegate.Receipt {
	f.t.Helper()
	return f.settle(id, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: version})
}

// --- rejections --------------------------------------------------------------

// reject runs req, which must fail with code (and, if receiptID is not "", name
// that receipt), and checks that the store did not change at all.
func (f *fx) reject(req fencegate.AdmitRequest, code fencegate.Code, receiptID string) {
	f.t.Helper()
	before := f.snapshot(true)
	_, idErr := f.s.Receipt(f.ctx, req.ReceiptID)
	adm, err := f.s.Admit(f.ctx, req)
	if err == nil {
		f.t.Fatalf("admit fence %d segment %d: admitted (replay=%v), want %s", req.Grant.FenceToken, req.Segment, adm.Replay, code)
	}
	wantCode(f.t, err, code, receiptID)
	f.sameJSON("store after rejected admit ("+string(code)+")", f.snapshot(true), before)
	if idErr != nil { // the receipt ID was not in use before
		f.noReceipt(req.ReceiptID)
	}
}

// quarantine runs req, which must be QUARANTINED against original, and checks
// that exactly its record changed: a new one (the payload kept as
// QuarantinePayload gave it, within bounds; req's delegate and delegation
// named) at the end of the resource's list, or, for the same refused request
// again, one more attempt on the old one and nothing else.
func (f *fx) quarantine(req fencegate.AdmitRequest, original string) fencegate.Quarantine {
	f.t.Helper()
	before := f.snapshot(false)
	qBefore := f.quarantined(req.Grant.Resource)
	_, err := f.s.Admit(f.ctx, req)
	wantCode(f.t, err, fencegate.CodeQuarantined, original)
	f.sameJSON("store after quarantine", f.snapshot(false), before)
	f.noReceipt(req.ReceiptID)
	g := &req.Grant
	id := fencegate.QuarantineID(g.Resource, g.FenceToken, req.Segment, req.Target, req.Method, req.EffectKey, req.PayloadDigest)
	want := slices.Clone(qBefore)
	i := slices.IndexFunc(want, func(q fencegate.Quarantine) bool { return q.ID == id })
	if i >= 0 {
		want[i].Attempts++
		want[i].LastAt = req.Now
	} else {
		q := fencegate.Quarantine{
			ID: id, Resource: g.Resource, FenceToken: g.FenceToken, Segment: req.Segment,
			Target: req.Target, Method: req.Method, EffectKey: req.EffectKey,
			ReceiptID: original, PayloadDigest: req.PayloadDigest, PayloadSize: req.PayloadSize,
			Owner: g.Owner, Delegate: req.Delegate, DelegationID: req.DelegationID,
			At: req.Now, LastAt: req.Now, Attempts: 1,
		}
		if req.QuarantinePayload != nil {
			if p, err := req.QuarantinePayload(); err == nil && p != nil && len(p) <= fencegate.MaxQuarantinePayload {
				q.Payload, q.PayloadKept = p, true
			}
		}
		want, i = append(want, q), len(want)
	}
	f.sameJSON("quarantine list", f.quarantined(req.Grant.Resource), want)
	got, err := f.s.QuarantineRecord(f.ctx, id)
	if err != nil {
		f.t.Fatalf("QuarantineRecord(%s): %v", id, err)
	}
	f.sameJSON("quarantine record", got, want[i])
	return got
}

// replay runs req, which must be a replay of original.
func (f *fx) replay(req fencegate.AdmitRequest, original string) fencegate.Admission {
	f.t.Helper()
	before := f.snapshot(true)
	adm, err := f.s.Admit(f.ctx, req)
	if err != nil {
		f.t.Fatalf("replay of %s: %v", original, err)
	}
	if !adm.Replay {
		f.t.Fatalf("replay of %s: Replay = false", original)
	}
	f.sameJSON("replayed receipt", adm.Receipt, f.receipt(original))
	if v := f.version(req.Target); adm.PreviousVersion != v {
		f.t.Fatalf("replay PreviousVersion = %q, want the target's current version %q", adm.PreviousVersion, v)
	}
	f.sameJSON("store after replay", f.snapshot(true), before)
	f.noReceipt(req.ReceiptID)
	return adm
}

// settleFails settles id with o, which must fail with code and change nothing.
func (f *fx) settleFails(id string, o fencegate.Outcome, code fencegate.Code) {
	f.t.Helper()
	if o.Now.IsZero() {
		o.Now = f.tick()
	}
	before := f.snapshot(true)
	if _, err := f.s.Settle(f.ctx, id, o); err == nil {
		f.t.Fatalf("settle %s -> %s succeeded, want %s", id, o.State, code)
	} else {
		wantCode(f.t, err, code, "")
	}
	f.sameJSON("store after rejected settle", f.snapshot(true), before)
}

// --- reads -------------------------------------------------------------------

func (f *fx) receipt(id string) fencegate.Receipt {
	f.t.Helper()
	r, err := f.s.Receipt(f.ctx, id)
	if err != nil {
		f.t.Fatalf("Receipt(%s): %v", id, err)
	}
	return r
}

func (f *fx) noReceipt(id string) {
	f.t.Helper()
	_, err := f.s.Receipt(f.ctx, id)
	wantCode(f.t, err, fencegate.CodeNotFound, "")
}

func (f *fx) resource(res string) fencegate.ResourceState {
	f.t.Helper()
	row, err := f.s.Resource(f.ctx, res)
	if err != nil {
		f.t.Fatalf("Resource(%s): %v", res, err)
	}
	return row
}

func (f *fx) version(target string) string {
	f.t.Helper()
	v, err := f.s.Version(f.ctx, target)
	if err != nil {
		f.t.Fatalf("Version(%s): %v", target, err)
	}
	return v
}

// quarantined is every quarantine record of res ("" all), read in pages of
// limit (0: the default).
func (f *fx) quarantined(res string) []fencegate.Quarantine { return f.quarantinedBy(res, 0) }

func (f *fx) quarantinedBy(res string, limit int) []fencegate.Quarantine {
	f.t.Helper()
	out := []fencegate.Quarantine{}
	page := fencegate.Page{Limit: limit}
	for n := 0; ; n++ {
		p, err := f.s.Quarantined(f.ctx, res, page)
		if err != nil {
			f.t.Fatalf("Quarantined(%q) page %d: %v", res, n, err)
		}
		if len(p.Records) > page.Size() || (p.Next != "" && len(p.Records) == 0) || n > 10_000 {
			f.t.Fatalf("Quarantined(%q) page %d: %d records, next %q", res, n, len(p.Records), p.Next)
		}
		out = append(out, p.Records...)
		if p.Next == "" {
			return out
		}
		page.Cursor = p.Next
	}
}
