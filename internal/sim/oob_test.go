package sim

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
)

// The out-of-band writer (DESIGN §4): something that is not a gateway
// changes an object straight in the object store the gateways write to,
// between gateway writes, with no receipt. The gateway writes each object
// conditionally on the version it last wrote (the If-Match chain), so every
// gateway write of that key from then on must fail its condition and be
// answered BACKEND_CONFLICT, nothing overwritten. Nothing in the code
// re-establishes the chain of a key changed behind the gateway's back (its
// recorded version stays the older one; README, "Writes"), so the object
// keeps the out-of-band content for the rest of the run.
//
// Gates: `out-of-band write overwritten` (a gateway write landing on a key
// whose object is an out-of-band write, checked at each landing through the
// object proxy and once more at the end against what the writer recorded)
// and `committed over an out-of-band write` (a receipt admitted after its
// key was changed out of band answered COMMITTED to its client or settled
// COMMITTED by anyone).

// outOfBand reports whether the world has an out-of-band writer: seeds 3
// mod 5, so the other seeds (and the mutants' known killers) keep their
// course. Its draws come from a stream of its own (oob.rng).
func (w *world) outOfBand() bool { return w.cfg.faults && w.seed%5 == 3 }

// oobWrite is one out-of-band write: when, what, at which ETag.
type oobWrite struct {
	at         time.Time
	body, etag string
}

// oobState is what the out-of-band writer did and what followed.
type oobState struct {
	rng    *rand.Rand
	writes map[string][]oobWrite // by object key, in order
	// held: keys whose object is, as far as the simulation saw, the last
	// out-of-band write (a gateway write landing clears it).
	held map[string]bool
	// after: receipts admitted (in the store's commit order) while their
	// key was already changed out of band, with that key. Written inside
	// the store call (committedAdmit, under unsettledMu).
	after map[string]string
}

func newOOB(seed uint64) *oobState {
	return &oobState{rng: rand.New(rand.NewPCG(seed^0x6f6f62, seed+0x9e3779b97f4a7c15)),
		writes: map[string][]oobWrite{}, held: map[string]bool{}, after: map[string]string{}}
}

// oobMaxWrites bounds a world's out-of-band writes: a key changed behind
// the gateway's back is lost to fenced writes for good, so the first ones
// come well into the run.
const oobMaxWrites = 3

// oobWriter is the out-of-band writer's task. It waits 2 to 12 simulated
// seconds (then 1 to 7 between its writes), picks an object key and writes it as soon as no receipt of
// its resource is unsettled in the fence store: between gateway writes. A
// write inside a deferred settle's window would erase the only proof of an
// answered COMMITTED, a documented limitation (README, Known limitations),
// not a conflict. It reads the object and writes it conditionally on what it
// read (the local store takes no unconditional write; nothing runs between).
func (w *world) oobWriter(ctx context.Context) {
	o := w.oob
	var keys []string
	for _, r := range w.res {
		if !r.api {
			keys = append(keys, r.key(1), r.key(2))
		}
	}
	w.s.sleep(ctx, time.Duration(2_000+o.rng.IntN(10_000))*time.Millisecond)
	for n := 0; n < oobMaxWrites && !w.stopping; n++ {
		if n > 0 {
			w.s.sleep(ctx, time.Duration(1_000+o.rng.IntN(6_000))*time.Millisecond)
		}
		key := keys[o.rng.IntN(len(keys))]
		for !w.stopping && w.unsettledOn(key) {
			w.s.sleep(ctx, 20*time.Millisecond)
		}
		if w.stopping {
			return
		}
		body := fmt.Sprintf("out-of-band:%d:%d:%s", w.seed, n, key)
		req := fencegate.PutRequest{Key: key, Body: strings.NewReader(body), Size: int64(len(body)), IfNoneMatch: true}
		if info, err := w.objects.Head(ctx, key); err == nil {
			req.IfMatch, req.IfNoneMatch = info.ETag, false
		}
		etag, err := w.objects.Put(ctx, req)
		if err != nil {
			w.fail("out-of-band write of %s: %v", key, err)
			return
		}
		w.stats.inject("out-of-band object write")
		o.writes[key] = append(o.writes[key], oobWrite{at: w.clock.Now(), body: body, etag: etag})
		o.held[key] = true
		w.tracef("out-of-band write of %s: %q at %s", key, body, etag)
	}
}

// unsettledOn reports whether a receipt whose target is key (of the grant's
// resource or the key's own) is admitted and not settled final.
func (w *world) unsettledOn(key string) bool {
	w.unsettledMu.Lock()
	defer w.unsettledMu.Unlock()
	for _, r := range w.res {
		if !r.api && (r.key(1) == key || r.key(2) == key) && len(w.unsettled[r.name]) > 0 {
			return true
		}
	}
	return len(w.unsettled[fencegate.ObjectResource("local", key)]) > 0
}

// oobAdmitted marks a receipt admitted while its key holds an out-of-band
// change (called inside the store call, under unsettledMu; the writer's
// task does not run meanwhile).
func (w *world) oobAdmitted(r fencegate.Receipt) {
	if w.oob == nil {
		return
	}
	if _, key, ok := fencegate.SplitObjectTarget(r.Target); ok && len(w.oob.writes[key]) > 0 {
		w.oob.after[r.ID] = key
	}
}

// oobLanded checks a gateway write that landed on key: the object must not
// have been an out-of-band write.
func (w *world) oobLanded(req fencegate.PutRequest) {
	if w.oob == nil || !w.oob.held[req.Key] {
		return
	}
	last := w.oob.writes[req.Key][len(w.oob.writes[req.Key])-1]
	w.stats.gate("out-of-band write overwritten")
	w.fail("write of receipt %s (fence %d seg %d) landed on %s over the out-of-band write %q made at %s",
		req.Meta.ReceiptID, req.Meta.FenceToken, req.Meta.Segment, req.Key, last.body, last.at.Format("15:04:05.000"))
	w.oob.held[req.Key] = false
}

// oobSettled fails a receipt admitted after its key was changed out of band
// that is settled COMMITTED (by its gateway, a reconciler or a proof).
func (w *world) oobSettled(r fencegate.Receipt) {
	if w.oob == nil || r.State != fencegate.ReceiptCommitted {
		return
	}
	w.unsettledMu.Lock()
	key, ok := w.oob.after[r.ID]
	w.unsettledMu.Unlock()
	if ok {
		w.stats.gate("committed over an out-of-band write")
		w.fail("receipt %s (fence %d seg %d) settled COMMITTED at %q, admitted after %s was changed out of band", r.ID, r.FenceToken, r.Segment, r.Version, key)
	}
}

// oobAnswered checks a write's answer on key: admitted after the key was
// changed out of band, it must not be answered accepted (err nil, not a
// replay); it counts the conflicts answered on such keys.
func (w *world) oobAnswered(key string, r fencegate.Receipt, replay bool, err error) {
	if w.oob == nil || len(w.oob.writes[key]) == 0 {
		return
	}
	if fencegate.ErrorCode(err) == fencegate.CodeBackendConflict {
		w.stats.inject("conflict answered after an out-of-band write")
	}
	w.unsettledMu.Lock()
	_, after := w.oob.after[r.ID]
	w.unsettledMu.Unlock()
	if err == nil && !replay && after {
		w.stats.gate("committed over an out-of-band write")
		w.fail("write of receipt %s (fence %d seg %d) on %s answered accepted after %s was changed out of band", r.ID, r.FenceToken, r.Segment, key, key)
	}
}

// oobCheckEnd reads every key the writer changed once the run is over
// (late deliveries included): it must still hold the last out-of-band
// write, byte for byte and at its ETag.
func (w *world) oobCheckEnd() {
	if w.oob == nil {
		return
	}
	var keys []string
	for k := range w.oob.writes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		last := w.oob.writes[key][len(w.oob.writes[key])-1]
		rc, info, err := w.objects.Get(context.Background(), key)
		got := ""
		if err == nil {
			b, _ := io.ReadAll(rc)
			_ = rc.Close()
			got = string(b)
		}
		if err != nil || got != last.body || info.ETag != last.etag {
			w.stats.gate("out-of-band write overwritten")
			w.fail("at the end %s holds %q at %q (%v), not the out-of-band write %q at %q made at %s",
				key, got, info.ETag, err, last.body, last.etag, last.at.Format("15:04:05.000"))
		}
	}
}
