package sim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/history"
	"github.com/fencegate/fencegate/proofs/prooftest"
	"github.com/fencegate/fencegate/registry"
)

// sent is one fenced request as it travelled, kept for delayed replays.
type sent struct {
	client   int
	caller   string
	grant    string
	status   string
	grantRes string // the resource the grant names
	fence    uint64
	res      simRes // the resource targeted
	seg      uint64
	body     string
	kind     int // forgery kind, for diagnostics
	// delegation is the Fence-Delegation of a delegate's write ("" for
	// the owner's own).
	delegation string
	// viaQuery sends it through a gateway in query mode.
	viaQuery bool
}

// worker is one workload: it takes leases and writes segments, well or badly.
type worker struct {
	w      *world
	id     int
	name   string
	has    bool
	res    simRes
	iss    registry.Issued
	seg    uint64
	bodies map[uint64]string
	reqs   int
}

// key is the register a segment writes: object segments alternate between
// two keys of the resource, so fences overwrite each other's objects.
func (r simRes) key(seg uint64) string {
	if r.api {
		return "payout"
	}
	return fmt.Sprintf("%s/part-%d", strings.TrimPrefix(r.name, "local/"), (seg+1)%2+1)
}

func digest(body string) string {
	sum := sha256.Sum256([]byte(body))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// observe records what the registry stated about a lease: the gate on
// expired owners compares admissions with the latest expiry it granted.
func (w *world) observe(l fencegate.Lease) {
	if l.State == fencegate.StateHeld && l.ExpiresAt.After(w.leaseExp[l.ID]) {
		w.leaseExp[l.ID] = l.ExpiresAt
	}
	// With the registry's loss check on (even seeds), no restore makes it
	// hand a resource's fence to a second lease, whether the registry runs
	// on (the guard of its next mutation) or restarts on the restored
	// backend (its memory covers every acquisition it answered): the loss
	// is found before any fence is issued (DESIGN §6). Odd seeds run
	// without the check: there the gateway's FENCE_REGRESSION is the
	// defence.
	key := fmt.Sprint(l.Resource, "/", l.FenceToken)
	if prev, ok := w.issuedTo[key]; ok && prev != l.ID && w.seed%2 == 0 {
		w.stats.gate("fence issued twice")
		w.fail("fence %d of %s issued to leases %s and %s with the loss check on", l.FenceToken, l.Resource, prev, l.ID)
	}
	w.issuedTo[key] = l.ID
	// One holder at a time: with the loss check on, a resource is never
	// granted HELD while an earlier lease that was not released holds it
	// (by the expiry the registry itself stated last), whatever restore
	// happened behind the running registry. The record is the world's, kept
	// from every answer; a registry restarted on a restored copy forgets
	// lost renewals (documented), so such worlds stop checking then.
	if l.State != fencegate.StateHeld {
		return
	}
	if prev := w.holder[l.Resource]; prev != "" && prev != l.ID && w.seed%2 == 0 && !w.restartedOnRestore &&
		!w.released[prev] && w.clock.Now().Before(w.leaseExp[prev]) {
		w.stats.gate("resource held by two leases")
		w.fail("%s granted to %s at %s while %s held it until %s", l.Resource, l.ID,
			w.clock.Now().Format("15:04:05.000"), prev, w.leaseExp[prev].Format("15:04:05.000"))
	}
	w.holder[l.Resource] = l.ID
}

func (wk *worker) run(ctx context.Context) {
	w := wk.w
	for i := 0; i < w.cfg.actions; i++ {
		if !wk.has {
			wk.acquire(ctx)
			continue
		}
		switch r := w.rng.IntN(100); {
		case r < 42:
			wk.writeNext(ctx)
		case r < 48:
			wk.renew(ctx)
		case r < 53:
			w.stats.inject("owner pause past the TTL")
			w.s.sleep(ctx, wk.iss.Lease.TTL+time.Duration(w.rng.IntN(3000))*time.Millisecond)
			wk.send(ctx, wk.msg(wk.seg, wk.body(wk.seg)), false)
		case r < 58:
			w.s.sleep(ctx, time.Duration(w.rng.IntN(1500))*time.Millisecond)
		case r < 62:
			w.stats.inject("interleaved release and reacquire")
			wk.release(ctx)
			wk.acquireRes(ctx, wk.res)
		case r < 66:
			if wk.seg > 1 {
				w.stats.inject("duplicate segment")
				s := 1 + uint64(w.rng.IntN(int(wk.seg-1)))
				wk.send(ctx, wk.msg(s, wk.body(s)), false)
			}
		case r < 69:
			if wk.seg > 1 {
				w.stats.inject("different-payload segment")
				s := 1 + uint64(w.rng.IntN(int(wk.seg-1)))
				wk.send(ctx, wk.msg(s, wk.body(s)+"-changed"), false)
			}
		case r < 72:
			w.stats.inject("out-of-order segment")
			s := wk.seg + 1 + uint64(w.rng.IntN(3))
			wk.send(ctx, wk.msg(s, wk.newBody(s)), false)
		case r < 77:
			if len(w.archive) > 0 {
				w.stats.inject("delayed old message")
				m := w.archive[w.rng.IntN(len(w.archive))]
				wk.send(ctx, m, false)
			}
		case r < 90:
			wk.forge(ctx)
		case r < 92: // walk away: the lease expires on its own
			wk.has = false
		case w.delegating():
			wk.delegate(ctx)
		default:
			wk.writeNext(ctx)
		}
	}
	if wk.has && w.rng.IntN(2) == 0 {
		wk.release(ctx)
	}
}

func (wk *worker) body(seg uint64) string {
	if b, ok := wk.bodies[seg]; ok {
		return b
	}
	return wk.newBody(seg)
}

func (wk *worker) newBody(seg uint64) string {
	wk.reqs++
	b := fmt.Sprintf("%s:f%d:s%d:%d", wk.name, wk.iss.Lease.FenceToken, seg, wk.reqs)
	wk.bodies[seg] = b
	return b
}

func (wk *worker) msg(seg uint64, body string) sent {
	return sent{client: wk.id, caller: wk.name, grant: wk.iss.Grant, status: wk.iss.StatusProof, grantRes: wk.res.name,
		fence: wk.iss.Lease.FenceToken, res: wk.res, seg: seg, body: body}
}

func (wk *worker) acquire(ctx context.Context) {
	w := wk.w
	wk.acquireRes(ctx, w.res[w.rng.IntN(len(w.res))])
}

func (wk *worker) acquireRes(ctx context.Context, res simRes) {
	w := wk.w
	wk.reqs++
	p := registry.AcquireParams{Resource: res.name, RequestID: fmt.Sprintf("%s-q%d", wk.name, wk.reqs),
		OperationID: "op-" + res.name, TTL: time.Duration(1000+w.rng.IntN(3000)) * time.Millisecond}
	for try := 0; try < 3; try++ {
		w.point(ctx, "registry")
		failover := w.failoverArmed && w.snapshot == ""
		if failover {
			w.takeSnapshot()
		}
		iss, err := w.reg.Acquire(ctx, wk.name, p)
		if err == nil {
			w.observe(iss.Lease)
		}
		if failover {
			// The replica the backend fails over to (at the next
			// renewal, worker.renew) never got this acquisition.
			w.failoverArmed, w.failoverDue = false, true
		}
		if err == nil && w.chance(0.05) {
			w.stats.inject("lost acquisition response")
			continue // asked again under the same request ID
		}
		if err != nil {
			w.s.sleep(ctx, time.Duration(300+w.rng.IntN(2000))*time.Millisecond)
			return
		}
		if iss.Lease.State != fencegate.StateHeld {
			return
		}
		wk.has, wk.res, wk.iss, wk.seg, wk.bodies = true, res, iss, 1, map[uint64]string{}
		return
	}
}

func (wk *worker) renew(ctx context.Context) {
	w := wk.w
	w.point(ctx, "registry")
	if w.failoverDue {
		// The failover armed by world.operate happens now: this renewal
		// is the first mutation on the replica, which lacks the armed
		// acquisition and what followed it; the registry runs on.
		w.failoverDue = false
		w.stats.inject("failover losing the last acquisition")
		if err := w.restore(true); err != nil {
			w.fail("failover: %v", err)
		}
	}
	iss, err := w.reg.Renew(ctx, wk.name, wk.iss.Lease.ID, wk.iss.Lease.TTL)
	if err != nil {
		wk.has = fencegate.ErrorCode(err) != fencegate.CodeLeaseNotHeld && fencegate.ErrorCode(err) != fencegate.CodeNotFound
		return
	}
	w.observe(iss.Lease)
	if w.chance(0.3) {
		w.stats.inject("lost renewal response")
		return // the worker keeps its old proof and does not know it was renewed
	}
	wk.iss.StatusProof, wk.iss.StatusExpiresAt, wk.iss.Lease = iss.StatusProof, iss.StatusExpiresAt, iss.Lease
	wk.iss.Grant = iss.Grant
}

// refresh asks the registry for the lease's status: a fresh proof, and the
// grant re-issued under the current epoch and policy generation.
func (wk *worker) refresh(ctx context.Context) {
	w := wk.w
	w.point(ctx, "registry")
	iss, err := w.reg.Status(ctx, wk.iss.Lease.ID)
	if err != nil || iss.Lease.State != fencegate.StateHeld || iss.Lease.Owner != wk.name {
		wk.has = false
		return
	}
	w.observe(iss.Lease)
	wk.iss = iss
}

func (wk *worker) release(ctx context.Context) {
	w := wk.w
	w.point(ctx, "registry")
	w.released[wk.iss.Lease.ID] = true // asked: it may have ended, answered or not
	_, _ = w.reg.Release(ctx, wk.name, wk.iss.Lease.ID)
	wk.has = false
	if w.chance(0.3) {
		// A genuine, fresh status proof that states RELEASED: it must not
		// authorize a write.
		w.point(ctx, "registry")
		if iss, err := w.reg.Status(ctx, wk.iss.Lease.ID); err == nil && iss.Lease.State != fencegate.StateHeld {
			w.stats.inject("status proof not HELD")
			m := wk.msg(wk.seg, wk.newBody(wk.seg))
			m.grant, m.status, m.kind = iss.Grant, iss.StatusProof, 2
			wk.send(ctx, m, true)
		}
	}
}

// writeNext writes the next segment as a careful worker does: a fresh proof,
// the same body when it retries a segment whose outcome it does not know.
func (wk *worker) writeNext(ctx context.Context) {
	w := wk.w
	if !wk.iss.StatusExpiresAt.After(w.clock.Now().Add(time.Second)) {
		if wk.refresh(ctx); !wk.has {
			return
		}
	}
	err := wk.send(ctx, wk.msg(wk.seg, wk.body(wk.seg)), false)
	if err == nil {
		wk.seg++
		return
	}
	wk.afterWrite(ctx, err)
}

// forge sends one of the forgeries of the failure matrix.
func (wk *worker) forge(ctx context.Context) {
	w := wk.w
	m := wk.msg(wk.seg, wk.newBody(wk.seg))
	kind := w.rng.IntN(7)
	m.kind = kind
	switch kind {
	case 0:
		w.stats.inject("forged oversized token")
		m.grant = m.grant + strings.Repeat("A", 9<<10)
	case 1:
		w.stats.inject("tampered grant digest")
		m.grant = tamper(m.grant, "fenceToken", fmt.Sprint(m.fence+1000))
	case 2:
		w.stats.inject("tampered grant digest")
		// a genuine status proof of another grant of this resource
		if other := w.otherGrant(m.res.name, m.grant); other.status != "" {
			m.status = other.status
		} else {
			m.status = tamper(m.status, "grantDigest", `"sha256:`+strings.Repeat("0", 64)+`"`)
		}
	case 3:
		other := w.res[w.rng.IntN(len(w.res))]
		if other.name == m.res.name {
			return // nothing sent: not counted
		}
		w.stats.inject("cross-resource replay")
		m.res = other // this grant, this proof, another resource's target
	case 4:
		w.stats.inject("forged grant")
		claims, _ := prooftest.DecodeGrant(wk.iss.Grant) // the issued claims with another fence
		claims.FenceToken = m.fence + 1000
		tok, _, _ := w.forger.SignGrant(claims)
		m.grant = tok
	case 5:
		w.stats.inject("forged grant")
		parts := strings.Split(m.grant, ".")
		m.grant = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"sim-1"}`)) + "." + parts[1] + "."
	case 6:
		w.stats.inject("impostor caller")
		m.caller = wk.name + "-impostor"
	}
	if wk.seg > 1 && wk.reqs%2 == 0 && m.res.name == m.grantRes {
		// Every other forgery presents the last segment the worker wrote,
		// with another payload (decided without a draw, so the seeds keep
		// their course): let through to the store, it would be refused
		// QUARANTINED there and leave a quarantine record, which only the
		// gate comparing the store around a forged request sees.
		w.stats.inject("forged request at a written segment")
		m.seg, m.body = wk.seg-1, fmt.Sprintf("%s:f%d:s%d:forged-%d", wk.name, m.fence, wk.seg-1, wk.reqs)
	}
	wk.send(ctx, m, true)
}

// otherGrant finds an archived request of resource res with another grant.
func (w *world) otherGrant(res, grant string) sent {
	for i := len(w.archive) - 1; i >= 0; i-- {
		if m := w.archive[i]; m.grantRes == res && m.grant != grant {
			return m
		}
	}
	return sent{}
}

// send passes m through a randomly chosen gateway process, records the
// invocation and answer in the history, and checks the answer's gates.
func (wk *worker) send(ctx context.Context, m sent, forged bool) error {
	w := wk.w
	gi := w.gws[w.rng.IntN(len(w.gws))]
	if forged && m.kind == 2 { // a status-proof forgery needs a gateway that reads proofs
		gi = w.gws[2*w.rng.IntN((len(w.gws)+1)/2)]
	}
	if m.viaQuery {
		gi = w.gws[1+2*w.rng.IntN(len(w.gws)/2)]
	}
	// One request per resource inside a process at a time, as the gateway's
	// per-resource lock has it; waiting here keeps the wait in the scheduler.
	for gi.busy[m.grantRes] {
		w.s.sleep(ctx, 5*time.Millisecond)
		gi = w.gws[gi.idx]
	}
	gi.busy[m.grantRes] = true
	defer delete(gi.busy, m.grantRes)
	ri := &reqInfo{gw: gi, gen: gi.gen, resource: m.grantRes, forged: forged}
	rctx := context.WithValue(ctx, reqKey{}, ri)

	key := m.res.key(m.seg)
	req := gateway.Request{Caller: m.caller, GrantToken: m.grant, StatusToken: m.status, Segment: m.seg,
		PayloadDigest: digest(m.body), DelegationToken: m.delegation}
	body := bytes.NewReader([]byte(m.body))
	if m.res.api {
		path := "/v1/accounts/" + m.res.acct + "/payouts"
		_, res, _ := w.api.Match("POST", path)
		req.Resource, req.Target, req.Method = res, "apis/payouts"+path, "POST"
		req.Effect = w.wrap(w.api.Call("POST", path, http.Header{}, body, int64(len(m.body))))
	} else {
		req.Resource, req.Target, req.Method = fencegate.ObjectResource("local", key), fencegate.ObjectTarget("local", key), "PUT"
		req.Effect = w.wrap(gateway.ObjectPut{Store: w.op, Key: key, Body: body, Size: int64(len(m.body))})
	}
	// A cross-resource replay is no write of the targeted resource's fence
	// line (its refusal may speak of the grant's resource): the gates check
	// it, the history does not record it.
	record := m.res.name == m.grantRes
	var call history.Call
	if record {
		call = w.hist.Invoke(m.client, history.Input{Kind: history.Write, Resource: m.res.name, Key: key,
			Fence: m.fence, Segment: m.seg, Value: m.body})
	}
	t0 := w.clock.Now()
	res, err := apply(rctx, gi.g, req)
	w.tracef("%s via gw%d/%d (query %v) %s fence %d seg %d lease %s sent %s -> %v", m.caller, gi.idx, gi.gen, gi.query,
		key, m.fence, m.seg, leaseOf(m.grant), t0.Format("15:04:05.000"), err)
	switch _, crash := err.(crashedErr); {
	case !record:
	case crash:
		call.Return(history.Output{Outcome: history.Unknown})
	default:
		call.Return(history.OutcomeOf(err, res.Replay))
	}
	code := fencegate.ErrorCode(err)
	if _, ok := err.(crashedErr); ok {
		code = "CONNECTION_RESET"
	}
	w.stats.code(string(code))
	if authCode(code) && ri.admitted {
		w.stats.gate("auth failure touched state")
		w.fail("request refused %s was admitted first", code)
	}
	if err == nil && res.Replay {
		if d := w.payloadOf[fmt.Sprint(m.grantRes, "/", m.fence, "/", m.seg)]; d != "" && d != digest(m.body) {
			w.stats.gate("replay of another payload")
			w.fail("a different payload for %s fence %d seg %d was answered as a replay", m.grantRes, m.fence, m.seg)
		}
	}
	if err == nil && !res.Replay && record {
		w.onAnswered(gi, ri.gen, res.Receipt)
	}
	if record && !m.res.api {
		w.oobAnswered(key, res.Receipt, res.Replay, err)
	}
	if forged && err == nil {
		w.stats.gate("forged accepted")
		w.fail("forged request (kind %d) accepted: %s seg %d", m.kind, m.res.name, m.seg)
	}
	if !forged {
		w.archive = append(w.archive, m)
	}
	return err
}

type crashedErr struct{}

func (crashedErr) Error() string { return "gateway crashed: connection reset" }

// apply calls the acceptance point; a crash of its process is a reset connection.
func apply(ctx context.Context, g *gateway.Gateway, req gateway.Request) (res gateway.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(crashed); !ok {
				panic(v)
			}
			res, err = gateway.Result{}, crashedErr{}
		}
	}()
	return g.Apply(ctx, req)
}

// authCode: the refusals of steps 1 and 2, which must touch no state.
func authCode(c fencegate.Code) bool {
	switch c {
	case fencegate.CodeUnauthenticated, fencegate.CodeGrantInvalid, fencegate.CodeStatusInvalid, fencegate.CodeEpochRevoked,
		fencegate.CodeOwnerMismatch, fencegate.CodeResourceMismatch, fencegate.CodePolicyStale, fencegate.CodeDelegationInvalid:
		return true
	}
	return false
}

// leaseOf reads a grant's lease claim, for the trace ("?" for a token that
// does not decode).
func leaseOf(token string) string {
	g, err := prooftest.DecodeGrant(token)
	if err != nil {
		return "?"
	}
	return g.Lease
}
