package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"
)

// TestManyWritersOnOneResourceFollowFenceOrder hands one S3-backed resource
// from owner to owner (each a goroutine with its own identity, acquiring a
// higher fence from the registry after the previous owner released its lease
// or let it lapse) while every earlier owner keeps sending late writes as soon
// as a newer owner has been accepted. In the end the object in S3 is the last
// accepted write, every late write was STALE_OWNER and left no receipt, and
// the receipts follow the fence order: in creation order their fences never
// decrease.
func TestManyWritersOnOneResourceFollowFenceOrder(t *testing.T) {
	const (
		owners   = 5
		segments = 3
		op       = "many-op"
		resource = "s3a/many"
		object   = "s3a/many/obj"
	)
	b := newS3Bucket(t)
	args := []string{"dev", "--data-dir", t.TempDir(), "--store", "s3a=" + b.storeURL("")}
	for i := range owners {
		args = append(args, "--identity", fmt.Sprintf("worker-%d=token-%d", i, i))
	}
	p := startGatewayEnv(t, b.env(), args...)

	type write struct {
		owner, seg int
		fence      uint64
		body       string
		receipt    string
	}
	var (
		mu       sync.Mutex
		accepted []write
		late     []answer
		fences   = make([]uint64, owners)
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		cancel()
	}
	wait := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-ctx.Done():
			return false
		}
	}
	turn := make([]chan struct{}, owners+1) // closed when owner i may acquire
	first := make([]chan struct{}, owners)  // closed when owner i's first write was accepted
	for i := range turn {
		turn[i] = make(chan struct{})
	}
	for i := range first {
		first[i] = make(chan struct{})
	}
	close(turn[0])

	var wg sync.WaitGroup
	for i := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			token := fmt.Sprintf("token-%d", i)
			if !wait(turn[i]) {
				return
			}
			// Odd owners let their lease lapse; the next owner waits it out.
			ttl := 30_000
			if i%2 == 1 {
				ttl = 2_500
			}
			body := fmt.Sprintf(`{"resource":%q,"requestId":"own-%d","ttlMs":%d,"operationId":%q}`, resource, i, ttl, op)
			var l lease
			for {
				a, err := p.tryDo("POST", "/v1/leases", token, map[string]string{"Content-Type": "application/json"}, body)
				if err == nil && a.status == http.StatusCreated {
					l = lease{id: a.str("lease"), grant: a.str("grant"), status: a.str("statusProof"), fence: a.num("fenceToken")}
					break
				}
				if err != nil || a.str("code") != "LEASE_HELD" {
					fail("owner %d acquire: %v %d %s", i, err, a.status, a.body)
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			mu.Lock()
			fences[i] = l.fence
			mu.Unlock()
			for seg := 1; seg <= segments; seg++ {
				w := write{owner: i, seg: seg, fence: l.fence, body: fmt.Sprintf("owner %d segment %d", i, seg)}
				a, err := p.tryDo("PUT", "/v1/objects/"+object, token, fenceHeaders(l, seg), w.body)
				if err != nil || a.status != http.StatusOK || a.str("state") != "COMMITTED" {
					fail("owner %d (fence %d) segment %d: %v %d %s", i, l.fence, seg, err, a.status, a.body)
					return
				}
				w.receipt = a.str("receiptId")
				mu.Lock()
				accepted = append(accepted, w)
				mu.Unlock()
				if seg == 1 {
					close(first[i])
				}
			}
			if i%2 == 0 {
				if a, err := p.tryDo("DELETE", "/v1/leases/"+l.id, token, nil, ""); err != nil || a.status != http.StatusOK {
					fail("owner %d release: %v %d %s", i, err, a.status, a.body)
					return
				}
			}
			close(turn[i+1])
			// Wake up late, again and again: once each newer owner is accepted,
			// write the next segment and rewrite the first one, racing that
			// owner's own writes.
			for m := i + 1; m < owners; m++ {
				if !wait(first[m]) {
					return
				}
				var lw sync.WaitGroup
				for _, w := range []struct {
					seg  int
					body string
				}{{segments + 1, fmt.Sprintf("late %d after %d", i, m)}, {1, fmt.Sprintf("rewrite by %d after %d", i, m)}} {
					lw.Add(1)
					go func() {
						defer lw.Done()
						a, err := p.tryDo("PUT", "/v1/objects/"+object, token, fenceHeaders(l, w.seg), w.body)
						if err != nil {
							fail("late write by owner %d: %v", i, err)
							return
						}
						mu.Lock()
						late = append(late, a)
						mu.Unlock()
					}()
				}
				lw.Wait()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	// Fences were handed out in turn order.
	for i := 1; i < owners; i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("owner %d got fence %d, not above owner %d's %d", i, fences[i], i-1, fences[i-1])
		}
	}
	// Every late write was refused as a stale owner.
	if want := owners * (owners - 1); len(late) != want {
		t.Fatalf("%d late writes answered, want %d", len(late), want)
	}
	for _, a := range late {
		wantCode(t, a, http.StatusConflict, "STALE_OWNER")
	}
	// The object is the last accepted write, in S3 itself.
	last := accepted[len(accepted)-1]
	if last.owner != owners-1 || last.seg != segments {
		t.Fatalf("last accepted write %+v", last)
	}
	if got := b.get(t, "many/obj"); got != last.body {
		t.Fatalf("S3 object = %q, want the last accepted write %q", got, last.body)
	}
	md := b.head(t, "many/obj").Metadata
	if md["fence-receipt-id"] != last.receipt || md["fence-token"] != fmt.Sprint(last.fence) || md["fence-segment"] != fmt.Sprint(segments) {
		t.Fatalf("S3 metadata %v, want the last write %+v", md, last)
	}
	// The receipts are exactly the accepted writes, and follow the fence order.
	list := p.receiptsByOperation(t, "token-0", op)
	if len(list) != owners*segments {
		t.Fatalf("%d receipts, want %d (late writes must leave none): %+v", len(list), owners*segments, list)
	}
	byID := map[string]write{}
	for _, w := range accepted {
		byID[w.receipt] = w
	}
	sort.SliceStable(list, func(x, y int) bool { return list[x].CreatedAt.Before(list[y].CreatedAt) })
	var high uint64
	nextSeg := map[uint64]uint64{}
	for _, r := range list {
		w, ok := byID[r.ID]
		if !ok || r.FenceToken != w.fence || r.Segment != uint64(w.seg) || r.State != "COMMITTED" || r.PayloadDigest != sha256Digest(w.body) {
			t.Fatalf("receipt %+v does not match an accepted write (%+v)", r, w)
		}
		if r.FenceToken < high {
			t.Fatalf("receipt %s for fence %d was created after a receipt for fence %d", r.ID, r.FenceToken, high)
		}
		high = r.FenceToken
		if nextSeg[r.FenceToken]++; nextSeg[r.FenceToken] != r.Segment {
			t.Fatalf("receipt %s: fence %d segment %d out of order", r.ID, r.FenceToken, r.Segment)
		}
	}
	for _, r := range list {
		for _, q := range list {
			if r.FenceToken < q.FenceToken && r.CreatedAt.After(q.CreatedAt) {
				t.Fatalf("receipt %s (fence %d) created after %s (fence %d)", r.ID, r.FenceToken, q.ID, q.FenceToken)
			}
		}
	}
	res := p.do(t, "GET", "/v1/resources/"+resource, "token-0", nil, "")
	if res.num("highestFence") != last.fence || res.num("lastSegmentSeq") != segments || res.str("pendingReceipt") != "" {
		t.Fatalf("resource state %s", res.body)
	}
}
