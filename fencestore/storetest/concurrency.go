package storetest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
)

// concurrentAdmissions races workers on one resource with mixed fences and
// segments. Every admitted attempt is committed at once with version
// "v-<receipt ID>", so each admission's PreviousVersion names the admission
// before it: the admissions must form one chain (no two writers admitted on
// the same predecessor), and along it fences never decrease and the segments
// of each fence run 1..n without gaps.
func concurrentAdmissions(f *fx) {
	const (
		workers  = 16
		attempts = 6
		res      = "res/race"
		op       = "op-race"
	)
	f.resources[res], f.targets[res] = true, true
	type win struct {
		id         string
		fence, seg uint64
		prev       string
	}
	var (
		mu       sync.Mutex
		wins     []win
		problems []string
		codes    = map[fencegate.Code]int{}
		wg       sync.WaitGroup
	)
	problem := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// Rounds: every worker picks its attempt, then all fire together.
	ready := make([]sync.WaitGroup, attempts)
	fire := make([]chan struct{}, attempts)
	for a := range attempts {
		ready[a].Add(workers)
		fire[a] = make(chan struct{})
	}
	for wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(wk), 7))
			for a := range attempts {
				var fence, seg uint64
				if rng.IntN(3) > 0 {
					// Informed: aim at what the store would accept right now.
					row, err := f.s.Resource(f.ctx, res)
					if err != nil && fencegate.ErrorCode(err) != fencegate.CodeNotFound {
						problem("Resource: %v", err)
					}
					switch {
					case row.HighestFence == 0 || rng.IntN(4) == 0:
						fence, seg = row.HighestFence+1, 1
					default:
						fence, seg = row.HighestFence, row.LastSegmentSeq+1
					}
				} else {
					fence = 1 + uint64(rng.IntN(3)) + uint64(a/2)
					seg = 1 + uint64(rng.IntN(3))
				}
				ready[a].Done()
				<-fire[a]
				g := grantFor(res, fence)
				g.OperationID = op
				req := fencegate.AdmitRequest{
					Grant: g, Segment: seg, Target: res, Method: "PUT",
					PayloadDigest: fmt.Sprintf("sha256:w%d-a%d", wk, a),
					ReceiptID:     fmt.Sprintf("race-%02d-%02d", wk, a),
					Now:           time.UnixMilli(baseMs + int64(wk*attempts+a)).UTC(),
				}
				adm, err := f.s.Admit(f.ctx, req)
				if err != nil {
					code := fencegate.ErrorCode(err)
					switch code {
					case fencegate.CodeStaleOwner, fencegate.CodeSegmentOutOfOrder,
						fencegate.CodeQuarantined, fencegate.CodeResourceBusy:
						mu.Lock()
						codes[code]++
						mu.Unlock()
					default:
						problem("admit fence %d segment %d: %v", fence, seg, err)
					}
					continue
				}
				if adm.Replay {
					problem("admit fence %d segment %d with a unique payload was a replay", fence, seg)
					continue
				}
				mu.Lock()
				wins = append(wins, win{adm.Receipt.ID, fence, seg, adm.PreviousVersion})
				mu.Unlock()
				if _, err := f.s.Settle(f.ctx, adm.Receipt.ID, fencegate.Outcome{
					State: fencegate.ReceiptCommitted, Version: "v-" + adm.Receipt.ID, Now: req.Now,
				}); err != nil {
					problem("settle %s: %v", adm.Receipt.ID, err)
				}
			}
		}()
	}
	for a := range attempts {
		ready[a].Wait()
		close(fire[a])
	}
	wg.Wait()
	for _, p := range problems {
		f.t.Error(p)
	}
	if f.t.Failed() {
		f.t.FailNow()
	}
	f.t.Logf("%d of %d attempts admitted; rejections: %v", len(wins), workers*attempts, codes)
	if len(wins) == 0 {
		f.t.Fatal("no attempt was admitted")
	}

	// Rebuild the admission order from the PreviousVersion chain.
	byPrev := map[string]win{}
	for _, w := range wins {
		if other, dup := byPrev[w.prev]; dup {
			f.t.Fatalf("%s and %s were both admitted after version %q", other.id, w.id, w.prev)
		}
		byPrev[w.prev] = w
	}
	var chain []win
	for prev := ""; ; {
		w, ok := byPrev[prev]
		if !ok {
			break
		}
		chain = append(chain, w)
		prev = "v-" + w.id
	}
	if len(chain) != len(wins) {
		f.t.Fatalf("admissions do not form one chain: %d linked of %d", len(chain), len(wins))
	}
	for i, w := range chain {
		switch {
		case i == 0 || w.fence > chain[i-1].fence:
			if w.seg != 1 {
				f.t.Fatalf("admission %d: fence %d started at segment %d", i, w.fence, w.seg)
			}
		case w.fence == chain[i-1].fence:
			if w.seg != chain[i-1].seg+1 {
				f.t.Fatalf("admission %d: fence %d segment %d after segment %d", i, w.fence, w.seg, chain[i-1].seg)
			}
		default:
			f.t.Fatalf("admission %d: fence %d accepted after fence %d", i, w.fence, chain[i-1].fence)
		}
		r, err := f.s.ReceiptAt(f.ctx, res, w.fence, w.seg)
		if err != nil || r.ID != w.id || r.State != fencegate.ReceiptCommitted {
			f.t.Fatalf("ReceiptAt(fence %d, segment %d) = %s %s, %v; want %s COMMITTED", w.fence, w.seg, r.ID, r.State, err, w.id)
		}
	}
	last := chain[len(chain)-1]
	row := f.resource(res)
	if row.HighestFence != last.fence || row.LastSegmentSeq != last.seg || row.PendingReceipt != "" ||
		row.Lease != fmt.Sprintf("lease-%d", last.fence) {
		f.t.Fatalf("final state %+v, want fence %d segment %d of the last admission %s", row, last.fence, last.seg, last.id)
	}
	if v := f.version(res); v != "v-"+last.id {
		f.t.Fatalf("final version %q, want v-%s", v, last.id)
	}
	if got := f.byOperation(op); len(got) != len(wins) {
		f.t.Fatalf("ReceiptsByOperation has %d receipts, want %d", len(got), len(wins))
	}
	for _, st := range []fencegate.ReceiptState{fencegate.ReceiptPending, fencegate.ReceiptUnknown} {
		if rs := f.byState(st, 0); len(rs) != 0 {
			f.t.Fatalf("%d receipts left %s", len(rs), st)
		}
	}
}
