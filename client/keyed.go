package client

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate/domain"
)

// ledger is what a lease knows of its operation's receipts by effect key:
// loaded from the receipt ledger (GET /v1/receipts?operationId=) on the
// first keyed commit, or the first commit or delegation of a lease a
// restarted worker may have written under (resume), then kept up to date by the lease's own commits, the
// listings that settle a doubt, a key's earlier unsettled receipt read again,
// and, until a segment of this lease is known admitted, a listing before a
// key it does not know is sent (commitKeyed).
type ledger struct {
	loaded bool
	// byKey is the best receipt of each effect key under the operation, of
	// any owner (COMMITTED over unsettled over not applied).
	byKey map[string]domain.Receipt
	// seg maps an effect key to its segment under this lease's grant.
	seg map[string]uint64
	// accepted is set once the gateway is known to have admitted a segment
	// under this lease's grant: from then on no earlier owner's write can be
	// admitted (STALE_OWNER), so byKey misses none of theirs. Until then an
	// earlier owner's write may still land after the ledger was read (its
	// status proof still fresh), and a key byKey does not know is looked up
	// again before it is sent.
	accepted bool
}

// doubtKey is the inDoubt key of a keyed effect (generic effects use
// "METHOD target digest", which never starts with "key ").
func doubtKey(key string) string { return "key " + key }

// commitKeyed is commit for an effect the worker names with key (an SDK's
// idempotency key): one key is one segment. A key this lease already used is
// sent again under its segment (a replay: the gateway answers the stored
// answer, settles the segment, or admits it if it was never admitted); a key
// an earlier process or owner committed answers that receipt's stored answer
// without sending; one still unsettled under another grant is
// MUTATION_UNKNOWN (resending it under this grant would be a new effect under
// a new upstream key); otherwise the key takes the next segment.
func (l *Lease) commitKeyed(ctx context.Context, key string, e *effect) (outcome, error) {
	l.lockCommit()
	defer l.unlockCommit()
	if err := l.live(); err != nil {
		return outcome{}, err
	}
	list, err := l.loadLedger(ctx)
	if err != nil {
		return outcome{}, err
	}
	listed := list != nil // the ledger is read by this commit
	if seg, ok := l.led.seg[key]; ok {
		return l.sendKeyed(ctx, key, seg, e.send)
	}
	if r, ok := l.led.byKey[key]; ok && r.State != domain.ReceiptCommitted && !r.State.NotApplied() {
		// An earlier owner's receipt of key, unsettled when last read: the
		// reconciler may have settled it since.
		cur, err := l.c.Receipt(ctx, r.ID)
		switch {
		case err == nil:
			l.led.byKey[key] = cur
		case domain.ErrorCode(err) != domain.CodeNotFound:
			return outcome{}, err
		}
		// NOT_FOUND: compacted once settled, its state unknown here; it
		// stays unsettled in the ledger (MUTATION_UNKNOWN, never resent).
	}
	if o, done, err := l.fromLedger(key, e); done {
		return o, err
	}
	if d := l.doubt; d != nil {
		o, done, err := l.settleDoubt(ctx, list, doubtKey(key), nil) // its listing goes into the ledger
		if err != nil || done {
			return o, err
		}
		listed = true // not applied: settleDoubt forgot the segment's key
	}
	if !listed && !l.led.accepted {
		// No segment of this lease is known admitted, so an earlier
		// owner's write of key may have landed since the ledger was read
		// (its status proof still fresh): sending key under this grant
		// would be a second effect under a new upstream key.
		list, err := l.c.Receipts(ctx, l.Info().OperationID)
		if err != nil {
			return outcome{}, err
		}
		l.noteReceipts(list)
	}
	if o, done, err := l.fromLedger(key, e); done {
		return o, err
	}
	return l.sendKeyed(ctx, key, l.nextSeg, e.send)
}

// fromLedger answers key from an earlier process's or owner's receipt of
// it, if any: COMMITTED is its stored answer, sent nothing (done); one still
// unsettled is MUTATION_UNKNOWN (done). Not applied, or none: not done. A
// receipt of the key for another request (another method or body) is
// INVALID_REQUEST (done), as the APIs that key requests answer a key
// reused with other parameters (Stripe: "Keys for idempotent requests can
// only be used with the same parameters they were first used with"),
// never that other request's answer.
func (l *Lease) fromLedger(key string, e *effect) (outcome, bool, error) {
	r, ok := l.led.byKey[key]
	switch {
	case !ok || r.State.NotApplied():
		return outcome{}, false, nil
	case e.contradicts(r):
		return outcome{}, true, &domain.Error{Code: domain.CodeInvalidRequest, ReceiptID: r.ID,
			Message: fmt.Sprintf("effect key %q was used for another request (receipt %s: %s %s); a key names one request", key, r.ID, r.Method, r.Target)}
	case r.State == domain.ReceiptCommitted:
		return outcome{receipt: r, api: responseOf(r), reused: true}, true, nil
	}
	return outcome{}, true, &domain.Error{Code: domain.CodeMutationUnknown, ReceiptID: r.ID,
		Message: fmt.Sprintf("effect %q was sent under fence %d and is %s; it is not sent again under fence %d until it settles", key, r.FenceToken, r.State, l.Fence())}
}

// noteReceipts adds what list (the operation's receipts) says to a loaded
// ledger: each effect key's best receipt, and whether a segment of this
// lease's grant was admitted.
func (l *Lease) noteReceipts(list []domain.Receipt) {
	if !l.led.loaded {
		return
	}
	info := l.Info()
	for _, r := range list {
		if r.EffectKey != "" {
			// The same receipt read again is its newer state; of two
			// receipts of one key the best one counts.
			if b, ok := l.led.byKey[r.EffectKey]; !ok || b.ID == r.ID || rank(r.State) > rank(b.State) || rank(r.State) == rank(b.State) && r.CreatedAt.After(b.CreatedAt) {
				l.led.byKey[r.EffectKey] = r
			}
		}
		if r.Lease == info.Lease && r.FenceToken == info.FenceToken && !r.State.NotApplied() {
			l.led.accepted = true
		}
	}
}

// sendKeyed sends key's effect as segment seg and records what the answer
// says about the segment.
func (l *Lease) sendKeyed(ctx context.Context, key string, seg uint64, send func(ctx context.Context, f Fence) (outcome, error)) (outcome, error) {
	for attempt := 0; ; attempt++ {
		grant, proof, err := l.ready(ctx)
		if err != nil {
			return outcome{}, err
		}
		o, err := send(ctx, Fence{Grant: grant, Status: proof, Segment: seg})
		code := domain.ErrorCode(err)
		switch {
		case err == nil && o.shadowed():
			return o, nil // forwarded by shadow mode, not admitted: seg stays free
		case err == nil:
			l.led.seg[key] = seg
			l.led.accepted = true
			if seg >= l.nextSeg {
				l.nextSeg = seg + 1
			}
			if l.doubt != nil && l.doubt.seg == seg {
				l.doubt = nil
			}
			return o, nil
		case InDoubtAfter(err):
			l.led.seg[key] = seg
			if seg >= l.nextSeg {
				l.doubt = &inDoubt{seg: seg, key: doubtKey(key), receipt: ReceiptIDOf(err)}
			}
			return o, err
		default:
			if l.afterRefusal(err, attempt) {
				continue
			}
			if code == domain.CodeBackendUnavailable && seg >= l.nextSeg {
				// Nothing was applied and the segment is free again.
				delete(l.led.seg, key)
				if l.doubt != nil && l.doubt.seg == seg {
					l.doubt = nil
				}
			}
			if code == domain.CodeQuarantined && l.led.seg[key] != seg {
				l.afterQuarantine(err, seg) // a new key met a segment another effect holds
			}
			return o, err
		}
	}
}

// resume loads the ledger (loadLedger) for a lease a restarted worker may
// have written under (mayResume), and returns what it read; nil otherwise.
func (l *Lease) resume(ctx context.Context) ([]domain.Receipt, error) {
	if !l.mayResume {
		return nil, nil
	}
	return l.loadLedger(ctx)
}

// loadLedger reads the operation's receipts once (and returns them; nil
// when they were read before): every effect key's best
// receipt, and for this lease's grant the keys' segments, the next segment
// number and a segment still in doubt. So a worker restarted under the same
// lease (the same request ID) continues its numbering and its keys.
func (l *Lease) loadLedger(ctx context.Context) ([]domain.Receipt, error) {
	if l.led.loaded {
		return nil, nil
	}
	info := l.Info()
	list, err := l.c.Receipts(ctx, info.OperationID)
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []domain.Receipt{} // read, and empty: only nil says "not read"
	}
	l.led = ledger{loaded: true, byKey: map[string]domain.Receipt{}, seg: map[string]uint64{}, accepted: l.led.accepted}
	l.noteReceipts(list) // every key's best receipt; whether this grant has an admitted segment
	next := l.nextSeg
	var doubt *inDoubt
	for _, r := range list {
		if r.Lease != info.Lease || r.FenceToken != info.FenceToken || r.State.NotApplied() {
			continue
		}
		if r.EffectKey != "" {
			l.led.seg[r.EffectKey] = r.Segment
		}
		if r.State == domain.ReceiptCommitted {
			next = max(next, r.Segment+1)
		} else {
			doubt = &inDoubt{seg: r.Segment, key: doubtKey(r.EffectKey), receipt: r.ID}
		}
	}
	l.nextSeg = next
	if doubt != nil && doubt.seg >= next && l.doubt == nil {
		l.doubt = doubt
	}
	return list, nil
}
