package storetest

import (
	"strings"

	"github.com/fencegate/fencegate"
)

// effectKeyIsKeptAndPartOfTheSegment: the worker's effect key comes back
// from every read (by ID and by operation); a replay of the segment under the
// same key is a replay, under another key QUARANTINED; a key over
// MaxEffectKey or with spaces is INVALID_REQUEST and admits nothing.
func effectKeyIsKeptAndPartOfTheSegment(f *fx) {
	w := f.writer("res/a", 5)
	req := w.req(1, "a")
	req.EffectKey = "sdk-key-1"
	id := f.admit(req).Receipt.ID
	if got := f.receipt(id).EffectKey; got != "sdk-key-1" {
		f.t.Fatalf("receipt effect key = %q", got)
	}
	if ops := f.byOperation("op-res/a"); len(ops) != 1 || ops[0].EffectKey != "sdk-key-1" {
		f.t.Fatalf("ReceiptsByOperation lost the effect key: %+v", ops)
	}
	same := w.req(1, "a")
	same.EffectKey = "sdk-key-1"
	f.replay(same, id)
	other := w.req(1, "a")
	other.EffectKey = "sdk-key-2"
	f.quarantine(other, id)
	f.commit(id, "v1")
	for _, bad := range []string{strings.Repeat("k", fencegate.MaxEffectKey+1), "has space", "tab\tkey"} {
		r := w.req(2, "b")
		r.EffectKey = bad
		f.reject(r, fencegate.CodeInvalidRequest, "")
	}
	long := w.req(2, "b")
	long.EffectKey = strings.Repeat("k", fencegate.MaxEffectKey)
	if got := f.receipt(f.admit(long).Receipt.ID).EffectKey; got != long.EffectKey {
		f.t.Fatalf("a key of %d characters came back as %d", len(long.EffectKey), len(got))
	}
}
