package client

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/domain"
)

// inDoubt is a segment whose outcome is unknown (MUTATION_UNKNOWN, INTERNAL
// or an uncertain answer: InDoubtAfter). Nothing new is sent until receipts
// settle it.
type inDoubt struct {
	seg    uint64
	key    string // the effect's local identity: kind, method, target, body digest
	target string // the effect's target ("" for a keyed effect)
	// eff is the effect in doubt (nil for a keyed one or one loaded from
	// receipts): a receipt found at the segment is its only if it records it.
	eff     *effect
	receipt string
}

// maxSettledForOthers bounds Lease.settledForOthers.
const maxSettledForOthers = 16

// settledForOther is a doubt another effect's commit found COMMITTED: the
// effect in doubt was applied, and its own retry must get that receipt
// rather than go out again as a new segment (a second charge).
type settledForOther struct {
	key, target string
	o           outcome
}

// effect is one commit a writer wants to make: its method, target (as the
// gateway records it in receipts: objects/STORE/KEY, apis/API/PATH) and
// body digest (hex; "" for a delete), and the key they make (newEffect).
type effect struct {
	key                    string
	method, target, digest string
	send                   func(ctx context.Context, f Fence) (outcome, error)
}

// newEffect is the effect of method on target with a body of the given hex
// digest ("" for none).
func newEffect(method, target, digest string, send func(ctx context.Context, f Fence) (outcome, error)) effect {
	key := method + " " + target
	if digest != "" {
		key += " " + digest
	}
	return effect{key: key, method: method, target: target, digest: digest, send: send}
}

// records reports whether receipt r is e's (RecordsWrite).
func (e *effect) records(r domain.Receipt) bool {
	return e != nil && RecordsWrite(r, e.method, e.target, "sha256:"+e.digest, e.digest != "")
}

// contradicts reports whether receipt r, of e's effect key, names another
// request: a method or payload digest it records differs from e's.
func (e *effect) contradicts(r domain.Receipt) bool {
	return r.Method != "" && r.Method != e.method || r.PayloadDigest != "" && e.digest != "" && r.PayloadDigest != "sha256:"+e.digest
}

// outcome is an accepted (or reused) commit.
type outcome struct {
	receipt domain.Receipt
	api     *APIResponse
	reused  bool
}

// IsShadowReceipt reports whether receiptID is one a gateway in shadow mode
// answers for a write it refused and forwarded anyway (an unstored receipt
// whose ID begins "shadow_", with Fence-Mode: shadow and Fence-Verdict:
// CODE): the effect happened, no segment was admitted, so the segment is
// still the lease's next. openapi.yaml documents it under "Enforcement
// modes": an object write's answer names it in its ShadowReceipt body (and
// sends no Fence-Receipt), an API call's answer in the Fence-Receipt header
// of UpstreamAnswer.
func IsShadowReceipt(receiptID string) bool { return domain.IsShadowReceipt(receiptID) }

// shadowed reports whether o is shadow mode's answer (IsShadowReceipt).
func (o outcome) shadowed() bool {
	return IsShadowReceipt(o.receipt.ID) || o.api != nil && IsShadowReceipt(o.api.Receipt)
}

// commit sends e as the next segment under the lease's grant, after settling
// any segment in doubt. It refuses without sending while the lease is not
// HELD, and ends the lease on STALE_OWNER, FENCE_REGRESSION or EPOCH_REVOKED.
func (l *Lease) commit(ctx context.Context, e effect) (outcome, error) {
	l.lockCommit()
	defer l.unlockCommit()
	if err := l.live(); err != nil {
		return outcome{}, err
	}
	list, err := l.resume(ctx)
	if err != nil {
		return outcome{}, err
	}
	if l.doubt != nil {
		o, done, err := l.settleDoubt(ctx, list, e.key, &e)
		if err != nil || done {
			return o, err
		}
	}
	if o, ok := l.takeSettled(&e); ok {
		return o, nil
	}
	for attempt := 0; ; attempt++ {
		grant, proof, err := l.ready(ctx)
		if err != nil {
			return outcome{}, err
		}
		seg := l.nextSeg
		o, err := e.send(ctx, Fence{Grant: grant, Status: proof, Segment: seg})
		switch {
		case err == nil && o.shadowed():
			// Shadow mode forwarded a write it refused: nothing was
			// admitted, so the segment is still the lease's next.
			return o, nil
		case err == nil:
			l.nextSeg = seg + 1
			l.led.accepted = true // a segment of this grant is admitted (keyed.go)
			l.forgetSettled(e.target)
			return o, nil
		case InDoubtAfter(err):
			eff := e
			l.doubt = &inDoubt{seg: seg, key: e.key, target: e.target, eff: &eff, receipt: ReceiptIDOf(err)}
			return o, err
		default:
			if l.afterRefusal(err, attempt) {
				continue
			}
			l.afterQuarantine(err, seg)
			return o, err
		}
	}
}

// quarantinedSeg is the inDoubt key of a segment another effect holds: it
// matches no effect's key.
const quarantinedSeg = "\x00quarantined"

// afterQuarantine: a QUARANTINED answer at a segment this lease has not
// seen taken (seg >= nextSeg) means another effect of the grant holds it (a
// send answered late, after its doubt was settled as not admitted): the
// segment is put in doubt, so that the next commit reads the receipts and
// numbers past it instead of sending every later effect at it again.
func (l *Lease) afterQuarantine(err error, seg uint64) {
	if domain.ErrorCode(err) == domain.CodeQuarantined && seg >= l.nextSeg && l.doubt == nil {
		l.doubt = &inDoubt{seg: seg, key: quarantinedSeg, receipt: ReceiptIDOf(err)}
	}
}

// InDoubtAfter reports whether a fenced write answered err may have been
// admitted (and its effect forwarded), so that its segment is in doubt until
// receipts settle it (SegmentReceipt): no intact answer (IsUncertain),
// MUTATION_UNKNOWN, or INTERNAL, which implies nothing about the request
// (the gateway answers it for a fault anywhere, also after forwarding). Any
// other error is a refusal: nothing was admitted. It is false for nil.
func InDoubtAfter(err error) bool {
	code := domain.ErrorCode(err)
	return IsUncertain(err) || code == domain.CodeMutationUnknown || code == domain.CodeInternal
}

// afterRefusal applies what a refused call (neither applied nor in doubt)
// says about the lease, and reports whether to send again. STALE_OWNER and
// FENCE_REGRESSION lose the lease. A first STATUS_INVALID, EPOCH_REVOKED or
// POLICY_STALE expires the proof and asks for one more try: the proof may
// have lapsed on the way, or the registry rotated its key or policy; nothing
// was admitted, and the refresh adopts the lease's re-issued grant. An
// EPOCH_REVOKED after that loses the lease. Anything else changes nothing.
func (l *Lease) afterRefusal(err error, attempt int) (retry bool) {
	code := domain.ErrorCode(err)
	switch {
	case code == domain.CodeStaleOwner || code == domain.CodeFenceRegression:
		l.lose(err)
	case (code == domain.CodeStatusInvalid || code == domain.CodeEpochRevoked || code == domain.CodePolicyStale) && attempt == 0:
		l.expireProof()
		return true
	case code == domain.CodeEpochRevoked:
		l.lose(err)
	}
	return false
}

// live refuses early on a terminal or unconfirmed lease.
func (l *Lease) live() error {
	l.mu.Lock()
	defer l.unlock()
	return l.notHeldLocked()
}

// settleDoubt settles the segment in doubt from the receipt that decides it
// (decidingReceipt, over the operation's receipts: list, when the caller has
// just read them). A COMMITTED receipt advances the numbering and, if key is
// the same effect, is reused (done). A receipt still PENDING/UNKNOWN refuses
// every commit, the effect in doubt's own included (MUTATION_UNKNOWN naming
// it, nothing sent). A segment never admitted, FAILED or NOT_APPLIED is free
// again.
func (l *Lease) settleDoubt(ctx context.Context, list []domain.Receipt, key string, e *effect) (outcome, bool, error) {
	d := l.doubt
	info := l.Info()
	if list == nil { // else just read by loadLedger, which noted it
		var err error
		if list, err = l.c.Receipts(ctx, info.OperationID); err != nil {
			return outcome{}, false, err
		}
		l.noteReceipts(list)
	}
	best, found, err := l.c.decidingReceipt(ctx, list, info, d.seg, d.receipt)
	if err != nil {
		return outcome{}, false, err
	}
	switch {
	case found && best.State == domain.ReceiptCommitted:
		l.doubt = nil
		l.nextSeg = max(l.nextSeg, d.seg+1) // never back below segments delegated or resumed since
		o := outcome{receipt: best, api: responseOf(best), reused: true}
		owner := d.key // whose receipt it is
		if d.eff != nil && !d.eff.records(best) {
			// Not the effect in doubt's: another effect of the grant holds
			// the segment (admitted late, after its own doubt was settled
			// as not admitted); the one in doubt was not applied there.
			owner = quarantinedSeg
		}
		target := cmp.Or(best.Target, d.target)
		l.forgetSettled(target) // this write replaced what kept ones wrote there
		if owner == key && owner != quarantinedSeg || owner == quarantinedSeg && e.records(best) {
			// Its own retry; or, for a segment another effect held, that
			// effect retried.
			return o, true, nil
		}
		// Another effect found it: the one it records keeps it for its own
		// retry (oldest forgotten past maxSettledForOthers, and once another
		// write to its object commits), by its key or, for a segment
		// another effect held (whose key is not known here), by the
		// receipt itself (takeSettled).
		k := owner
		if k == quarantinedSeg {
			k = ""
		}
		l.settledForOthers = append(l.settledForOthers, settledForOther{key: k, target: target, o: o})
		if len(l.settledForOthers) > maxSettledForOthers {
			l.settledForOthers = l.settledForOthers[1:]
		}
	case found && !best.State.NotApplied():
		// Refused whoever asks, the retry of the effect in doubt included
		// (fencectl sends that one again at the segment instead): the
		// caller retries once the reconciler has settled it.
		return outcome{}, false, &domain.Error{Code: domain.CodeMutationUnknown, ReceiptID: best.ID,
			Message: fmt.Sprintf("segment %d of lease %s is %s; nothing new is sent until it settles", d.seg, info.Lease, best.State)}
	default:
		// Not applied: the segment number is free again, and no effect key
		// keeps it, whichever commit (keyed, unkeyed, a delegation)
		// settled the doubt.
		l.doubt = nil
		for k, seg := range l.led.seg {
			if seg == d.seg {
				delete(l.led.seg, k)
			}
		}
	}
	return outcome{}, false, nil
}

// takeSettled returns (and forgets) the receipt another effect's commit
// found COMMITTED for an earlier doubt of e (by e's key, or, kept without a
// key, by the receipt recording e), if any: a retry of an effect whose
// answer was lost is answered with the receipt it got, once; the same
// effect committed again after that is a new segment.
func (l *Lease) takeSettled(e *effect) (outcome, bool) {
	for i, s := range l.settledForOthers {
		if s.key != "" && s.key == e.key || s.key == "" && e.records(s.o.receipt) {
			l.settledForOthers = append(l.settledForOthers[:i:i], l.settledForOthers[i+1:]...)
			return s.o, true
		}
	}
	return outcome{}, false
}

// forgetSettled drops the kept receipts of effects on an object target once
// another write to that object has committed: it replaced what they wrote,
// so the same effect sent after that is a new write, not the retry of the
// one whose answer was lost. API calls to one path do not replace each
// other, and their kept receipts stay until their own retry takes them.
func (l *Lease) forgetSettled(target string) {
	if !strings.HasPrefix(target, "objects/") {
		return
	}
	kept := l.settledForOthers[:0]
	for _, s := range l.settledForOthers {
		if s.target != target {
			kept = append(kept, s)
		}
	}
	l.settledForOthers = kept
}

// ready returns the grant and a fresh proof for a new effect, refreshing a
// proof near its expiry first; it refuses unless the lease is HELD/RENEWING
// and the local deadline has not passed.
func (l *Lease) ready(ctx context.Context) (grant, proof string, err error) {
	grant, proof, stale, err := l.snapshot()
	if err != nil || !stale {
		return grant, proof, err
	}
	if err := l.Refresh(ctx); err != nil {
		return "", "", err
	}
	grant, proof, _, err = l.snapshot()
	return grant, proof, err
}

func (l *Lease) snapshot() (grant, proof string, stale bool, err error) {
	l.mu.Lock()
	defer l.unlock()
	if err := l.notHeldLocked(); err != nil {
		return "", "", false, err
	}
	now := l.c.now()
	if !now.Before(l.deadline) {
		l.toUnknown(errDeadline)
		return "", "", false, l.notHeldLocked()
	}
	return l.info.Grant, l.info.StatusProof, !now.Before(l.proofRefreshAt), nil
}

// expireProof forces a status refresh before the next send.
func (l *Lease) expireProof() {
	l.mu.Lock()
	defer l.unlock()
	l.proofRefreshAt = l.c.now()
}
