package postgres

import (
	"sync"

	"github.com/fencegate/fencegate"
)

// known is what this process last committed (or read under the row lock):
// resource rows and PENDING receipts (its admissions', and those a locked
// batch read). It only ever decides
// whether a batch may try the one-round-trip path (fast.go): every statement
// of that path compares the rows it changes with the values kept here and
// rolls the transaction back if any differs, so a stale or missing entry
// costs a retry under the locks, never a wrong answer.
type known struct {
	mu       sync.Mutex
	rows     map[string]fencegate.ResourceState
	receipts map[string]fencegate.Receipt
	// bodies is the request bytes the kept receipts hold, at most
	// maxKnownBodies: receipts settled by another replica stay until
	// evicted, so a count bound alone would let them hold gigabytes.
	bodies int
}

const (
	// maxKnown bounds each map; beyond it arbitrary entries are dropped.
	maxKnown = 1 << 16
	// maxKnownBody: a receipt keeping a larger request body is not kept
	// (its settle takes the locked path).
	maxKnownBody = 64 << 10
	// maxKnownBodies bounds the request bytes of all kept receipts.
	maxKnownBodies = 16 << 20
)

func (k *known) row(res string) (fencegate.ResourceState, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.rows[res]
	return r, ok
}

func (k *known) receipt(id string) (fencegate.Receipt, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.receipts[id]
	return r, ok
}

// learn records rows and receipts as committed. A receipt that is no longer
// PENDING is dropped: only a pending one is settled on the fast path.
func (k *known) learn(rows []fencegate.ResourceState, receipts []fencegate.Receipt) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rows == nil {
		k.rows = map[string]fencegate.ResourceState{}
		k.receipts = map[string]fencegate.Receipt{}
	}
	for _, r := range rows {
		if len(k.rows) >= maxKnown {
			evictOne(k.rows)
		}
		k.rows[r.Resource] = r
	}
	for _, r := range receipts {
		k.dropReceipt(r.ID)
		if r.State != fencegate.ReceiptPending || (r.Request != nil && len(r.Request.Body) > maxKnownBody) {
			continue
		}
		n := bodyLen(r)
		for len(k.receipts) > 0 && (len(k.receipts) >= maxKnown || k.bodies+n > maxKnownBodies) {
			for id := range k.receipts {
				k.dropReceipt(id)
				break
			}
		}
		r.Request = cloneRequest(r.Request)
		k.receipts[r.ID] = r
		k.bodies += n
	}
}

// dropReceipt forgets receipt id, if kept. k.mu is held.
func (k *known) dropReceipt(id string) {
	if r, ok := k.receipts[id]; ok {
		k.bodies -= bodyLen(r)
		delete(k.receipts, id)
	}
}

func bodyLen(r fencegate.Receipt) int {
	if r.Request == nil {
		return 0
	}
	return len(r.Request.Body)
}

// forget drops what a failed or uncertain batch may have changed.
func (k *known) forget(resources, receipts []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range resources {
		delete(k.rows, r)
	}
	for _, id := range receipts {
		k.dropReceipt(id)
	}
}

func evictOne[V any](m map[string]V) {
	for k := range m {
		delete(m, k)
		return
	}
}

// cloneRequest copies r, so that the kept receipt shares no slice with the
// caller's, and normalises it as a read from the database would (an empty
// body or header is nil).
func cloneRequest(r *fencegate.EffectRequest) *fencegate.EffectRequest {
	if r == nil {
		return nil
	}
	cp := *r
	cp.Body = append([]byte(nil), r.Body...)
	cp.Header = nil
	if len(r.Header) > 0 {
		cp.Header = make(map[string][]string, len(r.Header))
		for h, v := range r.Header {
			cp.Header[h] = append([]string(nil), v...)
		}
	}
	return &cp
}
