package gateway_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/memory"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs"
)

// The release gate of DESIGN §9: across 100,000 seeded schedules of owners
// that acquire, pause past their TTL, write segments in and out of order,
// replay, change payloads, release, and forge tokens, the acceptance point
// accepts no stale write, no forged grant, no write of an expired owner, no
// skipped segment, and no authentication failure touches fence state.
const simSchedules = 100_000

type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *simClock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// simWorker is one owner as the registry and the worker itself see it.
type simWorker struct {
	name     string
	grant    string
	vg       fencegate.Grant
	digest   string
	expires  time.Time // lease expiry on the registry's clock
	released bool
	status   string    // the last status proof the worker holds
	heldTill time.Time // when that proof stops proving HELD (zero: it does not)
	nextSeg  uint64
	sentBody map[uint64]string
	hasLease bool
}

// simShard runs schedules sequentially on its own clock and keys.
type simShard struct {
	t      *testing.T
	clock  *simClock
	signer *proofs.Signer
	forger *proofs.Signer // same kid, another secret
	verif  *proofs.Verifier
	failed int
	stats  map[string]int
}

func newSimShard(t *testing.T, shard int) *simShard {
	clock := &simClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(shard) * time.Hour)}
	sign, err := proofs.NewSigner([]byte(strings.Repeat("k", 32)), "sim", jwa.HS256)
	if err != nil {
		t.Fatal(err)
	}
	forger, _ := proofs.NewSigner([]byte(strings.Repeat("f", 32)), "sim", jwa.HS256)
	b, err := proofs.NewBundle(1, sign.BundleKey(1))
	if err != nil {
		t.Fatal(err)
	}
	v, err := proofs.NewVerifier(b, proofs.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	return &simShard{t: t, clock: clock, signer: sign, forger: forger, verif: v, stats: map[string]int{}}
}

// schedule runs one seeded schedule and reports the first broken invariant.
func (s *simShard) schedule(seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ctx := context.Background()
	store := memory.New()
	const res = "sim/r"
	gw, err := gateway.New(gateway.Config{Verifier: s.verif, Store: store, Now: s.clock.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Log: discardLog})
	if err != nil {
		return err
	}
	var (
		fenceSeq     uint64 // the registry's sequence for res
		leaseHolder  *simWorker
		maxAccepted  uint64 // highest fence ever accepted
		lastSeg      uint64 // last accepted segment at maxAccepted
		maxForwarded uint64
	)
	workers := []*simWorker{{name: "w0"}, {name: "w1"}, {name: "w2"}}
	for _, w := range workers {
		w.sentBody = map[uint64]string{}
	}
	effect := gateway.EffectFunc(func(_ context.Context, r fencegate.Receipt, _ string) (fencegate.Outcome, error) {
		if r.FenceToken < maxForwarded {
			return fencegate.Outcome{State: fencegate.ReceiptCommitted}, fmt.Errorf("effect forwarded for fence %d after fence %d", r.FenceToken, maxForwarded)
		}
		maxForwarded = r.FenceToken
		return fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: r.ID}, nil
	})
	statusFor := func(w *simWorker) string {
		now := s.clock.Now()
		st := fencegate.Status{Schema: fencegate.StatusSchema, GrantDigest: w.digest, Resource: res, Lease: w.vg.Lease,
			FenceToken: w.vg.FenceToken, State: fencegate.StateHeld, Revision: w.vg.FenceToken, IssuerEpoch: 1,
			IssuedAtMs: now.UnixMilli(), ExpiresAtMs: now.Add(fencegate.DefaultStatusLife).UnixMilli()}
		if w.released || !now.Before(w.expires) {
			st.State = fencegate.StateExpired
			if w.released {
				st.State = fencegate.StateReleased
			}
		} else if w.expires.Before(now.Add(fencegate.DefaultStatusLife)) {
			st.ExpiresAtMs = w.expires.UnixMilli() // a HELD proof never outlives the lease
		}
		w.heldTill = time.Time{}
		if st.State == fencegate.StateHeld {
			w.heldTill = time.UnixMilli(st.ExpiresAtMs)
		}
		tok, _ := s.signer.SignStatus(st)
		return tok
	}
	// snapshot is the resource's row and receipts, and its quarantine
	// records by ID: a refusal changes none of them, but for QUARANTINED,
	// which writes (or counts another attempt of) the one record of the
	// refused request and nothing else.
	snapshot := func() (string, map[string]string) {
		rs, rerr := store.Resource(ctx, res)
		page, perr := store.ReceiptsByResource(ctx, res, fencegate.Page{Limit: fencegate.MaxPageLimit})
		qs, qerr := store.Quarantined(ctx, res, fencegate.Page{Limit: fencegate.MaxPageLimit})
		quarantine := map[string]string{"": fmt.Sprint(fencegate.ErrorCode(qerr), qs.Next)}
		for _, q := range qs.Records {
			quarantine[q.ID] = fmt.Sprintf("%+v", q)
		}
		return fmt.Sprintf("%+v %v %+v %v", rs, fencegate.ErrorCode(rerr), page.Receipts, perr), quarantine
	}
	write := func(w *simWorker, grant, status string, seg uint64, body string, forged bool) error {
		before, _ := store.Resource(ctx, res)
		beforeAll, beforeQ := snapshot() // the row, every receipt and quarantine record of the resource
		res0, err := gw.Apply(ctx, gateway.Request{Caller: w.name, GrantToken: grant, StatusToken: status, Segment: seg,
			Resource: res, Target: "objects/sim/r", Method: "PUT", PayloadDigest: "sha256:" + body, Effect: effect})
		after, _ := store.Resource(ctx, res)
		if after.HighestFence < before.HighestFence {
			return fmt.Errorf("highestFence decreased %d -> %d", before.HighestFence, after.HighestFence)
		}
		if err != nil {
			s.stats[string(fencegate.ErrorCode(err))]++
			if c := fencegate.ErrorCode(err); c == fencegate.CodeInternal {
				return fmt.Errorf("internal error: %v", err)
			}
			afterAll, afterQ := snapshot()
			if afterAll != beforeAll {
				return fmt.Errorf("refused write (%v) changed state %s -> %s", err, beforeAll, afterAll)
			}
			// QUARANTINED keeps the refused request's own record (new,
			// or another attempt counted); no other refusal writes one.
			own := ""
			if fencegate.ErrorCode(err) == fencegate.CodeQuarantined {
				own = fencegate.QuarantineID(res, w.vg.FenceToken, seg, "objects/sim/r", "PUT", "", "sha256:"+body)
				if a, ok := afterQ[own]; !ok || a == beforeQ[own] {
					return fmt.Errorf("refused write (%v) left its quarantine record %s unwritten", err, own)
				}
			}
			for id, b := range beforeQ {
				if a, ok := afterQ[id]; id != own && (!ok || a != b) {
					return fmt.Errorf("refused write (%v) changed quarantine record %q: %s -> %s", err, id, b, a)
				}
			}
			for id, a := range afterQ {
				if _, ok := beforeQ[id]; id != own && !ok {
					return fmt.Errorf("refused write (%v) wrote quarantine record %s", err, a)
				}
			}
			return nil
		}
		if forged {
			return fmt.Errorf("forged request accepted: %+v", res0.Receipt)
		}
		if res0.Replay {
			s.stats["replay"]++
			return nil
		}
		s.stats["accepted"]++
		r := res0.Receipt
		switch {
		case r.FenceToken < maxAccepted:
			return fmt.Errorf("stale write accepted: fence %d after %d", r.FenceToken, maxAccepted)
		case r.FenceToken == maxAccepted && r.Segment != lastSeg+1:
			return fmt.Errorf("segment %d accepted after %d", r.Segment, lastSeg)
		case r.FenceToken > maxAccepted && r.Segment != 1:
			return fmt.Errorf("higher fence %d started at segment %d", r.FenceToken, r.Segment)
		case !s.clock.Now().Before(w.expires):
			return fmt.Errorf("write of an expired owner accepted (fence %d)", r.FenceToken)
		}
		maxAccepted, lastSeg = r.FenceToken, r.Segment
		return nil
	}
	// acquire grants w the resource if the registry would (it is free).
	acquire := func(w *simWorker) error {
		now := s.clock.Now()
		if leaseHolder != nil && !leaseHolder.released && now.Before(leaseHolder.expires) {
			return nil
		}
		fenceSeq++
		ttl := time.Duration(1+rng.IntN(4)) * time.Second
		g := fencegate.Grant{Schema: fencegate.GrantSchema, Resource: res, Owner: w.name, RequestID: fmt.Sprint("q", fenceSeq),
			Lease: fmt.Sprint("lease-", fenceSeq), FenceToken: fenceSeq, BackendRevision: fenceSeq, PolicyGeneration: 1,
			OperationID: "op", OperationRoot: fmt.Sprint("root-", fenceSeq), IssuerEpoch: 1, TTLMs: uint64(ttl.Milliseconds()),
			IssuedAt: now.UnixMilli(), ExpiresAt: now.Add(ttl).UnixMilli()}
		tok, digest, err := s.signer.SignGrant(g)
		if err != nil {
			return err
		}
		*w = simWorker{name: w.name, grant: tok, vg: g, digest: digest, expires: now.Add(ttl), nextSeg: 1,
			sentBody: map[uint64]string{}, hasLease: true}
		w.status = statusFor(w)
		leaseHolder = w
		return nil
	}
	for step := 0; step < 14; step++ {
		w := workers[rng.IntN(len(workers))]
		now := s.clock.Now()
		switch op := rng.IntN(100); {
		case op < 15: // acquire (the registry grants only a free resource)
			if err := acquire(w); err != nil {
				return err
			}
		case op < 25: // pause: time passes, possibly past the TTL
			s.clock.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
		case op < 30: // release
			if w.hasLease {
				w.released = true
			}
		case op < 38: // refresh the status proof from the registry
			if w.hasLease {
				w.status = statusFor(w)
			}
		case op < 70: // write the next segment (a well-behaved worker, maybe paused)
			if !w.hasLease || w.released {
				continue
			}
			if err := s.writeOn(w, write, rng); err != nil {
				return err
			}
		case op < 74: // the classic case: the holder releases (or is taken for gone), a successor is granted and writes, and the old holder writes on with the HELD proof it kept
			if w.hasLease && !w.released && now.Before(w.heldTill) && rng.IntN(2) == 0 {
				w.released = true
				next := workers[(slices.Index(workers, w)+1+rng.IntN(len(workers)-1))%len(workers)]
				if err := acquire(next); err != nil {
					return err
				}
				if next.hasLease && !next.released {
					if err := s.writeOn(next, write, rng); err != nil {
						return err
					}
				}
			}
			if !w.hasLease || (!w.released && now.Before(w.expires)) {
				continue
			}
			zombie := now.Before(w.heldTill) && maxAccepted > w.vg.FenceToken
			before := s.stats["STALE_OWNER"]
			if err := s.writeOn(w, write, rng); err != nil {
				return err
			}
			if zombie && s.stats["STALE_OWNER"] > before {
				// Its proof still verifies: only the fence rule at the
				// store refused it.
				s.stats["zombie with a HELD proof refused at the store"]++
			}
		case op < 78: // a delayed duplicate, or the same segment with another payload
			if !w.hasLease || w.nextSeg == 1 {
				continue
			}
			seg := 1 + uint64(rng.IntN(int(w.nextSeg-1)))
			body := w.sentBody[seg]
			if rng.IntN(2) == 0 {
				body += "-changed"
			}
			if err := write(w, w.grant, w.status, seg, body, false); err != nil {
				return err
			}
		case op < 84: // skipped or zero segment
			if !w.hasLease {
				continue
			}
			if err := write(w, w.grant, w.status, w.nextSeg+1+uint64(rng.IntN(3)), "skip", false); err != nil {
				return err
			}
		default: // forgeries
			if !w.hasLease {
				continue
			}
			grant, status := w.grant, w.status
			switch rng.IntN(5) {
			case 0: // tampered fence
				grant = tamper(w.grant, 1<<62)
			case 1: // another key under the trusted kid
				g := w.vg
				g.FenceToken = fenceSeq + 1000
				grant, _, _ = s.forger.SignGrant(g)
			case 2: // alg none
				parts := strings.Split(w.grant, ".")
				grant = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"sim"}`)) + "." + parts[1] + "."
			case 3: // a status proof of another resource's grant
				other := w.vg
				other.Resource = "sim/other"
				_, d, _ := s.signer.SignGrant(other)
				st := fencegate.Status{Schema: fencegate.StatusSchema, GrantDigest: d, Resource: "sim/other", Lease: other.Lease,
					FenceToken: other.FenceToken, State: fencegate.StateHeld, IssuerEpoch: 1,
					IssuedAtMs: now.UnixMilli(), ExpiresAtMs: now.Add(time.Second).UnixMilli()}
				status, _ = s.signer.SignStatus(st)
			case 4: // another caller presenting this grant
				other := *w
				other.name = w.name + "-impostor"
				if err := write(&other, grant, status, w.nextSeg, "x", true); err != nil {
					return err
				}
				continue
			}
			if err := write(w, grant, status, w.nextSeg, "forged", true); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeOn sends w's next segment with the grant and proof it holds.
func (s *simShard) writeOn(w *simWorker, write func(*simWorker, string, string, uint64, string, bool) error, rng *rand.Rand) error {
	body := fmt.Sprint("b", rng.IntN(3))
	if err := write(w, w.grant, w.status, w.nextSeg, body, false); err != nil {
		return err
	}
	w.sentBody[w.nextSeg] = body
	w.nextSeg++
	return nil
}

// tamper rewrites a token's fenceToken claim and keeps the old signature.
func tamper(token string, fence uint64) string {
	parts := strings.Split(token, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	_ = dec.Decode(&m)
	m["fenceToken"] = json.Number(fmt.Sprint(fence))
	b, _ := json.Marshal(m)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}

func TestSeededSchedulesAcceptNoStaleOrForgedWrite(t *testing.T) {
	n := simSchedules
	if testing.Short() {
		n = 5_000
	}
	const shards = 4
	stats := make([]map[string]int, shards)
	var wg sync.WaitGroup
	for sh := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newSimShard(t, sh)
			for i := sh; i < n; i += shards {
				if err := s.schedule(uint64(i)); err != nil {
					t.Errorf("seed %d: %v", i, err)
					return
				}
			}
			stats[sh] = s.stats
		}()
	}
	wg.Wait()
	total := map[string]int{}
	for _, m := range stats {
		for k, v := range m {
			total[k] += v
		}
	}
	t.Logf("%d schedules: %v", n, total)
	// The schedules must exercise what they claim to, the fence rule at the
	// store among them: a zombie whose HELD proof still verifies after a
	// newer fence was accepted, refused by nothing but that rule.
	for _, k := range []string{"accepted", "replay", "STALE_OWNER", "SEGMENT_OUT_OF_ORDER", "QUARANTINED", "GRANT_INVALID",
		"STATUS_INVALID", "OWNER_MISMATCH", "zombie with a HELD proof refused at the store"} {
		if total[k] < n/1000 && !t.Failed() {
			t.Errorf("%d of %d schedules produced %s, want at least %d", total[k], n, k, n/1000)
		}
	}
}

var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))
