package storetest

import (
	"bytes"
	"strings"

	"github.com/fencegate/fencegate"
)

// apiRequest is a kept upstream request with a body that is not valid UTF-8
// nor JSON, repeated header values and a key, so that a store that
// normalises anything is caught.
func apiRequest() *fencegate.EffectRequest {
	return &fencegate.EffectRequest{
		Method: "POST",
		Path:   "/v1/accounts/acc_1/payouts?expand=fees",
		Header: map[string][]string{
			"Content-Type":    {"application/json"},
			"Idempotency-Key": {"fg-0123456789abcdef"},
			"X-Trace":         {"a", "b"},
		},
		Body: []byte("{\"amount\":100, \"x\":\"\xff\x00\"}\n"),
		Key:  "fg-0123456789abcdef",
	}
}

// requestIsKeptVerbatim: the request an admission carries comes back
// byte for byte from every read, through replays and settles.
func requestIsKeptVerbatim(f *fx) {
	w := f.writer("res/a", 5)
	req := w.req(1, "a")
	req.Request = apiRequest()
	id := f.admit(req).Receipt.ID
	f.sameJSON("receipt request", f.receipt(id).Request, apiRequest())
	again := w.req(1, "a")
	again.Request = apiRequest()
	if adm := f.replay(again, id); !bytes.Equal(adm.Receipt.Request.Body, apiRequest().Body) {
		f.t.Fatalf("replayed receipt body = %q", adm.Receipt.Request.Body)
	}
	f.settle(id, fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: "no answer", Attempts: 1, Resend: true})
	if got := f.byState(fencegate.ReceiptUnknown, 10); len(got) != 1 || !bytes.Equal(got[0].Request.Body, apiRequest().Body) {
		f.t.Fatalf("ReceiptsByState(UNKNOWN) lost the kept request: %+v", got)
	}
	f.settle(id, fencegate.Outcome{State: fencegate.ReceiptCommitted, Attempts: 1,
		Response: &fencegate.EffectResponse{Status: 201, Body: []byte(`{"id":"po_1"}`)}})
	f.sameJSON("request after commit", f.receipt(id).Request, apiRequest())
	if ops := f.byOperation("op-res/a"); len(ops) != 1 || ops[0].Attempts != 2 {
		f.t.Fatalf("ReceiptsByOperation: %+v, want one receipt with 2 attempts", ops)
	}
}

// oversizedRequestIsRejectedWithoutStateChange: a request over the kept
// bounds (body or headers) or without method and path is INVALID_REQUEST
// and admits nothing.
func oversizedRequestIsRejected(f *fx) {
	w := f.writer("res/a", 5)
	f.commit(f.admit(w.req(1, "a")).Receipt.ID, "v1")
	mutations := map[string]func(r *fencegate.EffectRequest){
		"body too big": func(r *fencegate.EffectRequest) { r.Body = make([]byte, fencegate.MaxEffectRequestBody+1) },
		"headers too big": func(r *fencegate.EffectRequest) {
			r.Header["X-Big"] = []string{strings.Repeat("x", fencegate.MaxEffectRequestHeader)}
		},
		"no method":     func(r *fencegate.EffectRequest) { r.Method = "" },
		"relative path": func(r *fencegate.EffectRequest) { r.Path = "v1/x" },
	}
	for _, name := range sortedKeys(mutations) {
		req := w.req(2, "b")
		req.Request = apiRequest()
		mutations[name](req.Request)
		f.t.Logf("case %s", name)
		f.reject(req, fencegate.CodeInvalidRequest, "")
	}
}

// unknownRecordsAnotherAttempt: UNKNOWN may be settled UNKNOWN again to
// record a resend that settled nothing; attempts add up, the resend mark
// follows the latest attempt, and the resource stays busy.
func unknownRecordsAnotherAttempt(f *fx) {
	w := f.writer("res/a", 5)
	req := w.req(1, "a")
	req.Request = apiRequest()
	id := f.admit(req).Receipt.ID
	f.settle(id, fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: "no answer", Attempts: 1, Resend: true})
	f.settle(id, fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: "409 in progress", Attempts: 1, Resend: true})
	r := f.settle(id, fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: "saved 500", Attempts: 1})
	if r.Attempts != 3 || r.Resend || r.Error != "saved 500" {
		f.t.Fatalf("after three attempts: attempts %d resend %v error %q", r.Attempts, r.Resend, r.Error)
	}
	if row := f.resource("res/a"); row.PendingReceipt != id {
		f.t.Fatalf("pending receipt = %q, want %q: an UNKNOWN effect keeps the resource busy", row.PendingReceipt, id)
	}
	f.reject(w.req(2, "b"), fencegate.CodeResourceBusy, id)
	// A terminal outcome never carries the resend mark.
	if r := f.settle(id, fencegate.Outcome{State: fencegate.ReceiptNotApplied, Resend: true}); r.Resend {
		f.t.Fatal("a NOT_APPLIED receipt keeps the resend mark")
	}
}
