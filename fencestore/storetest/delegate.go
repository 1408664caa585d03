package storetest

import (
	"slices"

	"github.com/fencegate/fencegate"
)

// delegatedReceiptNamesItsDelegate: a delegated admission's receipt keeps
// its delegate and delegation ID (beside the grant's owner) in the answer,
// through an UNKNOWN and a COMMITTED settle, and in every read: by ID, by
// segment, by operation, by resource and by state; the owner's own receipt
// has neither. They are not part of the segment: the owner's replay of the
// delegate's segment, and a delegate's replay of the owner's, answer the
// original receipt as it was written, and change nothing. A delegate
// without a delegation ID (or the reverse) is INVALID_REQUEST.
func delegatedReceiptNamesItsDelegate(f *fx) {
	w := f.writer("res/dlg", 5)
	names := func(what string, r fencegate.Receipt, delegate, delegation string) {
		f.t.Helper()
		if r.Delegate != delegate || r.DelegationID != delegation || r.Owner != w.g.Owner {
			f.t.Fatalf("%s %s: owner %q, delegate %q, delegation %q; want %q, %q, %q",
				what, r.ID, r.Owner, r.Delegate, r.DelegationID, w.g.Owner, delegate, delegation)
		}
	}
	// inLists checks the receipts' delegates in every list that holds them.
	inLists := func(state fencegate.ReceiptState, want map[string][2]string) {
		f.t.Helper()
		for what, list := range map[string][]fencegate.Receipt{
			"ReceiptsByOperation": f.byOperation(w.g.OperationID),
			"ReceiptsByResource":  f.byResource(w.g.Resource),
			"ReceiptsByState":     f.byState(state, 0),
		} {
			seen := 0
			for _, r := range list {
				if d, ok := want[r.ID]; ok {
					names(what, r, d[0], d[1])
					seen++
				}
			}
			if seen != len(want) {
				f.t.Fatalf("%s holds %d of the receipts %v", what, seen, want)
			}
		}
	}

	owner := w.req(1, "a")
	own := f.admit(owner).Receipt
	names("owner's admission", own, "", "")
	f.commit(own.ID, "v1")

	bad := w.req(2, "b")
	bad.Delegate = "consumer-1"
	f.reject(bad, fencegate.CodeInvalidRequest, "")
	bad = w.req(2, "b")
	bad.DelegationID = "dlg-1"
	f.reject(bad, fencegate.CodeInvalidRequest, "")
	// Text no store keeps as it came (Postgres's text refuses NUL): refused
	// by every store alike, nothing stored.
	for _, d := range [][2]string{{"consumer\x00", "dlg-1"}, {"consumer-1", "dlg-\xff"}} {
		bad = w.req(2, "b")
		bad.Delegate, bad.DelegationID = d[0], d[1]
		f.reject(bad, fencegate.CodeInvalidRequest, "")
	}

	req := w.req(2, "b")
	req.Delegate, req.DelegationID = "consumer-1", "dlg-1"
	adm := f.admit(req)
	names("delegated admission", adm.Receipt, "consumer-1", "dlg-1")
	id := adm.Receipt.ID
	names("Receipt", f.receipt(id), "consumer-1", "dlg-1")
	live, err := f.s.ReceiptAt(f.ctx, w.g.Resource, w.g.FenceToken, 2)
	if err != nil {
		f.t.Fatalf("ReceiptAt: %v", err)
	}
	names("ReceiptAt", live, "consumer-1", "dlg-1")
	inLists(fencegate.ReceiptPending, map[string][2]string{id: {"consumer-1", "dlg-1"}})

	names("UNKNOWN settle", f.settle(id, unknown), "consumer-1", "dlg-1")
	inLists(fencegate.ReceiptUnknown, map[string][2]string{id: {"consumer-1", "dlg-1"}})
	names("COMMITTED settle", f.commit(id, "v2"), "consumer-1", "dlg-1")
	names("Receipt after the settle", f.receipt(id), "consumer-1", "dlg-1")
	inLists(fencegate.ReceiptCommitted, map[string][2]string{own.ID: {"", ""}, id: {"consumer-1", "dlg-1"}})

	// The owner replays the delegate's segment, a delegate the owner's, and
	// another delegate the delegate's: each is the original receipt.
	names("owner's replay of the delegate's segment", f.replay(w.req(2, "b"), id).Receipt, "consumer-1", "dlg-1")
	again := w.req(1, "a")
	again.Delegate, again.DelegationID = "consumer-1", "dlg-1"
	names("delegate's replay of the owner's segment", f.replay(again, own.ID).Receipt, "", "")
	again = w.req(2, "b")
	again.Delegate, again.DelegationID = "consumer-2", "dlg-2"
	names("another delegate's replay", f.replay(again, id).Receipt, "consumer-1", "dlg-1")

	// The owner's next segment after the delegate's: no delegate.
	next := f.admit(w.req(3, "c")).Receipt
	names("owner's admission after the delegate's", next, "", "")
	names("Receipt of the owner's", f.receipt(next.ID), "", "")
}

// delegatedQuarantineRecordNamesItsDelegate: a delegated write refused
// QUARANTINED is recorded naming its delegate and delegation ID beside the
// grant's owner, in the record and in both lists (the resource's and all);
// the owner's refused write names neither. Who sends a refused request is
// not part of its record: the same request again from the owner or another
// delegate counts another attempt on the one record, which keeps naming the
// first sender. A delegate without a delegation ID (or the reverse), or
// either with text no store keeps as it came, is INVALID_REQUEST, no record
// written.
func delegatedQuarantineRecordNamesItsDelegate(f *fx) {
	w := f.writer("res/dlgq", 5)
	names := func(what string, q fencegate.Quarantine, delegate, delegation string) {
		f.t.Helper()
		if q.Delegate != delegate || q.DelegationID != delegation || q.Owner != w.g.Owner {
			f.t.Fatalf("%s %s: owner %q, delegate %q, delegation %q; want %q, %q, %q",
				what, q.ID, q.Owner, q.Delegate, q.DelegationID, w.g.Owner, delegate, delegation)
		}
	}
	delegated := func(req fencegate.AdmitRequest, delegate, delegation string) fencegate.AdmitRequest {
		req.Delegate, req.DelegationID = delegate, delegation
		return req
	}
	own := f.admit(w.req(1, "a")).Receipt
	f.commit(own.ID, "v1")
	theirs := f.admit(delegated(w.req(2, "b"), "consumer-1", "dlg-1")).Receipt
	f.commit(theirs.ID, "v2")

	// A delegate rewrites the owner's segment, then the owner and another
	// delegate send the same refused request: one record, its first sender.
	q := f.quarantine(delegated(w.req(1, "x"), "consumer-1", "dlg-1"), own.ID)
	names("the delegate's refused write", q, "consumer-1", "dlg-1")
	if q = f.quarantine(w.req(1, "x"), own.ID); q.Attempts != 2 {
		f.t.Fatalf("the owner's repeat of the refused request: %d attempts, want 2", q.Attempts)
	}
	names("the owner's repeat", q, "consumer-1", "dlg-1")
	if q = f.quarantine(delegated(w.req(1, "x"), "consumer-2", "dlg-2"), own.ID); q.Attempts != 3 {
		f.t.Fatalf("another delegate's repeat of the refused request: %d attempts, want 3", q.Attempts)
	}
	names("another delegate's repeat", q, "consumer-1", "dlg-1")

	// The owner rewrites the delegate's segment: a record of its own, no
	// delegate.
	mine := f.quarantine(w.req(2, "y"), theirs.ID)
	names("the owner's refused write", mine, "", "")
	all := f.quarantined("")
	for _, want := range []fencegate.Quarantine{q, mine} {
		i := slices.IndexFunc(all, func(r fencegate.Quarantine) bool { return r.ID == want.ID })
		if i < 0 {
			f.t.Fatalf("Quarantined(\"\") lacks %s", want.ID)
		}
		names("Quarantined(\"\")", all[i], want.Delegate, want.DelegationID)
	}

	// Refused before any ruling: nothing recorded, not even an attempt.
	for _, d := range [][2]string{{"consumer-1", ""}, {"", "dlg-1"}, {"consumer\x00", "dlg-1"}, {"consumer-1", "dlg-\xff"}} {
		f.reject(delegated(w.req(1, "x"), d[0], d[1]), fencegate.CodeInvalidRequest, "")
		f.reject(delegated(w.req(1, "z"), d[0], d[1]), fencegate.CodeInvalidRequest, "")
	}
}
