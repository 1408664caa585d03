package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/history"
)

// answer is a decoded HTTP answer.
type answer struct {
	status int
	header http.Header
	body   []byte
	code   string
}

// httpc is the workers' client: a request that gets no answer in 15 s has
// lost it (effectTimeout is 3 s; admission waits at most a few seconds for a
// busy resource).
var httpc = &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}

// exchange sends one request to base and decodes the answer.
func exchange(ctx context.Context, base, method, path, token string, hdr map[string]string, body []byte) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, body: b}
	var p struct {
		Code string `json:"code"`
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") && json.Unmarshal(b, &p) == nil {
		a.code = p.Code
	}
	return a, err
}

// worker is one workload identity acquiring leases and writing segments
// through random replicas. One operation is in flight per worker at a time,
// so its operations form one client lane of the history.
type worker struct {
	id    int
	token string
	c     *cluster
	rng   *rand.Rand
	seq   atomic.Int64
}

// held is what a worker keeps of a lease.
type held struct {
	answer   fencegate.LeaseAnswer
	proofAt  time.Time // when the status proof was fetched
	ttl      time.Duration
	resource string
}

func (w *worker) replica() int { return w.c.pickReplica(w.rng) }

func (w *worker) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// run loops until ctx ends: acquire a lease on a random resource, write one
// to three segments (sometimes pausing past the TTL first), release or let
// the lease lapse, and sometimes send a late write under the old grant.
func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		res := w.c.resources[w.rng.IntN(len(w.c.resources))]
		h, ok := w.acquire(ctx, res)
		if !ok {
			w.sleep(ctx, time.Duration(20+w.rng.IntN(100))*time.Millisecond)
			continue
		}
		segs := 1 + w.rng.IntN(3)
		last := 0
		for seg := 1; seg <= segs && ctx.Err() == nil; seg++ {
			if w.rng.IntN(8) == 0 { // an owner pause past its TTL
				w.c.count("pause past TTL")
				w.sleep(ctx, h.ttl+time.Duration(w.rng.IntN(400))*time.Millisecond)
			}
			if time.Since(h.proofAt) > h.ttl/3 {
				w.renew(ctx, &h)
			}
			o := w.write(ctx, h, seg)
			if o.out != history.OK {
				break
			}
			last = seg
		}
		if w.rng.IntN(4) == 0 {
			continue // let the lease lapse
		}
		if !w.release(ctx, h) || w.rng.IntN(2) == 0 {
			continue
		}
		// A delayed old message: the released owner's next segment, sent
		// after a newer owner may have been accepted.
		w.c.count("late write after release")
		w.sleep(ctx, time.Duration(w.rng.IntN(300))*time.Millisecond)
		w.write(ctx, h, last+1)
	}
}

// acquire asks the registry for a lease, long-polling a second; a lost
// answer (the registry killed, etcd failing over) is recovered by asking
// again with the same request ID.
func (w *worker) acquire(ctx context.Context, res string) (held, bool) {
	ttl := time.Duration(800+w.rng.IntN(1200)) * time.Millisecond
	req := fencegate.LeaseRequest{Resource: res, RequestID: fmt.Sprintf("w%d-%d", w.id, w.seq.Add(1)),
		TTLMs: ttl.Milliseconds(), OperationID: res, WaitMs: 1000}
	body, _ := json.Marshal(req)
	for try := 0; try < 5 && ctx.Err() == nil; try++ {
		a, err := exchange(ctx, w.c.registry.base(), "POST", "/v1/leases", w.token,
			map[string]string{"Content-Type": "application/json"}, body)
		if err != nil || a.status >= 500 {
			w.c.count("acquire retried by request ID")
			w.sleep(ctx, 50*time.Millisecond)
			continue
		}
		if a.status != http.StatusCreated {
			w.c.count("acquire refused " + a.code) // LEASE_HELD after the wait, mostly
			return held{}, false
		}
		var la fencegate.LeaseAnswer
		if json.Unmarshal(a.body, &la) != nil {
			return held{}, false
		}
		return held{answer: la, proofAt: time.Now(), ttl: ttl, resource: res}, true
	}
	return held{}, false
}

// renew extends the lease and takes its fresh status proof; a failed renewal
// keeps the old proof (the next write then tells what the gateway thinks).
func (w *worker) renew(ctx context.Context, h *held) {
	body, _ := json.Marshal(fencegate.RenewRequest{TTLMs: h.ttl.Milliseconds()})
	a, err := exchange(ctx, w.c.registry.base(), "POST", "/v1/leases/"+h.answer.Lease+"/renew", w.token,
		map[string]string{"Content-Type": "application/json"}, body)
	if err != nil || a.status != http.StatusOK {
		return
	}
	var la fencegate.LeaseAnswer
	if json.Unmarshal(a.body, &la) == nil && la.StatusProof != "" {
		h.answer.StatusProof, h.proofAt = la.StatusProof, time.Now()
	}
}

func (w *worker) release(ctx context.Context, h held) bool {
	a, err := exchange(ctx, w.c.registry.base(), "DELETE", "/v1/leases/"+h.answer.Lease, w.token, nil, nil)
	return err == nil && a.status == http.StatusOK
}

// write sends segment seg under h through a random replica and records it.
func (w *worker) write(ctx context.Context, h held, seg int) *op {
	rep := w.replica()
	key := strings.TrimPrefix(h.resource, storeName+"/")
	o := w.c.journal.invoke(&op{client: w.id, kind: history.Write, resource: h.resource, key: key,
		fence: h.answer.FenceToken, seg: uint64(seg), replica: rep, lease: h.answer.Lease,
		value: fmt.Sprintf("w%d f%d s%d #%d", w.id, h.answer.FenceToken, seg, w.seq.Add(1))})
	hdr := map[string]string{"Fence-Grant": h.answer.Grant, "Fence-Status": h.answer.StatusProof,
		"Fence-Segment": fmt.Sprint(seg), "Content-Type": "text/plain"}
	// The request outlives the run's context: an answer in flight is awaited,
	// not abandoned (abandoning it would make it UNKNOWN for no fault).
	a, err := exchange(context.WithoutCancel(ctx), w.c.replicas[rep].base(), "PUT", "/v1/objects/"+h.resource, w.token, hdr, []byte(o.value))
	o.sent = true
	if err != nil {
		o.transport, o.sent = err.Error(), !notSent(err)
	}
	o.status, o.code = a.status, a.code
	o.replay = a.header.Get("Fence-Replay") == "true"
	var rc struct {
		ID string `json:"receiptId"`
	}
	if json.Unmarshal(a.body, &rc) == nil {
		o.receipt = rc.ID
	}
	w.c.journal.done(o)
	w.c.count("write " + o.out.String())
	return o
}

// reader reads every resource's object straight from S3 in turn until ctx
// ends; its reads are one more client lane of the history.
func (c *cluster) reader(ctx context.Context, client int) {
	for i := 0; ctx.Err() == nil; i++ {
		res := c.resources[i%len(c.resources)]
		key := strings.TrimPrefix(res, storeName+"/")
		o := c.journal.invoke(&op{client: client, kind: history.Read, resource: res, key: key, replica: -1})
		v, err := c.s3.get(context.WithoutCancel(ctx), key)
		if err != nil {
			o.transport = err.Error()
		}
		o.value = v
		c.journal.done(o)
		if err != nil && !errors.Is(err, context.Canceled) {
			c.count("read failed")
		}
		select {
		case <-ctx.Done():
		case <-time.After(40 * time.Millisecond):
		}
	}
}
