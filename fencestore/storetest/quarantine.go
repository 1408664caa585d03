package storetest

import (
	"errors"
	"slices"

	"github.com/fencegate/fencegate"
)

// quarantineKeepsOneRecordPerDistinctPayload: the same refused request again
// only counts another attempt on its record (and moves LastAt); another
// payload gets a record of its own. Each record keeps the refused payload and
// names the accepted receipt; lists page them and find them by ID.
func quarantineKeepsOneRecordPerDistinctPayload(f *fx) {
	w := f.writer("res/a", 5)
	a := f.admit(w.req(1, "accepted"))
	f.commit(a.Receipt.ID, "v1")
	var first fencegate.Quarantine
	for range 3 {
		first = f.quarantine(w.req(1, "refused"), a.Receipt.ID)
	}
	if first.Attempts != 3 || !first.LastAt.After(first.At) || string(first.Payload) != "refused" || !first.PayloadKept ||
		first.PayloadSize != int64(len("refused")) || first.ReceiptID != a.Receipt.ID {
		f.t.Fatalf("record after three identical refusals: %+v", first)
	}
	other := f.quarantine(w.req(1, "another"), a.Receipt.ID)
	if other.ID == first.ID || other.Attempts != 1 {
		f.t.Fatalf("a second payload shares or counts on the first record: %+v", other)
	}
	if got := f.quarantined("res/a"); len(got) != 2 || got[0].ID != first.ID || got[1].ID != other.ID {
		f.t.Fatalf("Quarantined(res/a) = %+v, want the two records, oldest first", got)
	}
	if got := f.quarantinedBy("res/a", 1); len(got) != 2 || got[0].ID != first.ID || got[1].ID != other.ID {
		f.t.Fatalf("Quarantined(res/a) in pages of 1 = %+v", got)
	}
	if _, err := f.s.QuarantineRecord(f.ctx, "q_none"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		f.t.Fatalf("QuarantineRecord(q_none): %v, want NOT_FOUND", err)
	}
}

// quarantinePayloadOverTheBoundKeepsDigestAndSize: a payload the gateway did
// not hand over (over its bound), one over MaxQuarantinePayload, and one that
// could not be read keep only digest and size; an empty payload is kept.
func quarantinePayloadOverTheBoundKeepsDigestAndSize(f *fx) {
	w := f.writer("res/a", 5)
	a := f.admit(w.req(1, "accepted"))
	f.commit(a.Receipt.ID, "v1")
	for name, payload := range map[string]func() ([]byte, error){
		"over the gateway's bound": func() ([]byte, error) { return nil, nil },
		"over the hard maximum":    func() ([]byte, error) { return make([]byte, fencegate.MaxQuarantinePayload+1), nil },
		"unreadable":               func() ([]byte, error) { return nil, errors.New("spool file gone") },
		"not offered":              nil,
	} {
		req := w.req(1, "big-"+name)
		req.PayloadSize, req.QuarantinePayload = 5<<30, payload
		q := f.quarantine(req, a.Receipt.ID)
		if q.PayloadKept || q.Payload != nil || q.PayloadSize != 5<<30 || q.PayloadDigest != req.PayloadDigest {
			f.t.Fatalf("%s: %+v, want digest and size only", name, q)
		}
	}
	empty := w.req(1, "")
	if q := f.quarantine(empty, a.Receipt.ID); !q.PayloadKept || len(q.Payload) != 0 || q.PayloadSize != 0 {
		f.t.Fatalf("empty payload: %+v, want kept (and empty)", q)
	}
}

// quarantinePagesAreRefusedWithoutStateChange: a receipt list's cursor, a
// foreign resource's cursor and a bad limit are INVALID_REQUEST for the
// quarantine list, and change nothing.
func quarantinePagesAreRefusedWithoutStateChange(f *fx) {
	w := f.writer("res/a", 5)
	a := f.admit(w.req(1, "accepted"))
	f.quarantine(w.req(1, "x"), a.Receipt.ID)
	f.quarantine(w.req(1, "y"), a.Receipt.ID)
	qp, err := f.s.Quarantined(f.ctx, "res/a", fencegate.Page{Limit: 1})
	if err != nil || qp.Next == "" {
		f.t.Fatalf("first quarantine page: %v next %q", err, qp.Next)
	}
	w2 := f.writer("res/b", 5)
	w2.g.OperationID = w.g.OperationID
	f.admit(w2.req(1, "b"))
	rp, err := f.s.ReceiptsByOperation(f.ctx, w.g.OperationID, fencegate.Page{Limit: 1})
	if err != nil || rp.Next == "" {
		f.t.Fatalf("first receipt page: %v next %q", err, rp.Next)
	}
	before := f.snapshot(true)
	for _, tc := range []struct {
		name, resource string
		page           fencegate.Page
	}{
		{"receipt cursor", "res/a", fencegate.Page{Cursor: rp.Next}},
		{"other resource's cursor", "res/b", fencegate.Page{Cursor: qp.Next}},
		{"all resources with one resource's cursor", "", fencegate.Page{Cursor: qp.Next}},
		{"limit over max", "res/a", fencegate.Page{Limit: fencegate.MaxPageLimit + 1}},
	} {
		if _, err := f.s.Quarantined(f.ctx, tc.resource, tc.page); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
			f.t.Fatalf("%s: %v, want INVALID_REQUEST", tc.name, err)
		}
	}
	f.sameJSON("store after refused quarantine pages", f.snapshot(true), before)
	if got := f.quarantined("res/a"); !slices.EqualFunc(got, before.Quarantine, func(a, b fencegate.Quarantine) bool { return a.ID == b.ID }) {
		f.t.Fatalf("quarantine of res/a = %+v", got)
	}
}
