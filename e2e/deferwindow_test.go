package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// The helpers of the deferred settle's crash tests (deferreplica_test.go,
// deferdev_test.go): writers that answer under a long deferSettle window,
// the read paths an answered receipt must read COMMITTED through, and the
// store's state read raw (no gateway, so no read-repair), to count the
// writes whose settle a kill or a stop found still in the window.

const deferToken = "token-a"

// deferWriter is one worker on its own resource: its lease and every
// write the gateway answered COMMITTED, in order.
type deferWriter struct {
	idx      int
	res      string // the resource, also the object key (store/key)
	op       string
	lease    lease
	answered []fencegate.Receipt
	bodies   []string // answered[i]'s body
	stale    *lease   // the lease it held before the fence moved, if it did
	staleSeg int      // the stale holder's next segment
}

// last is the writer's last answered write (the one whose settle a kill
// right after the burst finds deferred).
func (w *deferWriter) last() (fencegate.Receipt, string) {
	return w.answered[len(w.answered)-1], w.bodies[len(w.bodies)-1]
}

// answeredReceipt decodes an answer's body as a receipt.
func answeredReceipt(t *testing.T, a answer) fencegate.Receipt {
	t.Helper()
	var r fencegate.Receipt
	if err := json.Unmarshal(a.body, &r); err != nil {
		t.Fatalf("not a receipt: %d %s", a.status, a.body)
	}
	return r
}

// newDeferWriters acquires one lease per writer at reg on prefix/wN.
func newDeferWriters(t *testing.T, reg *gatewayProc, prefix string, n int) []*deferWriter {
	t.Helper()
	ws := make([]*deferWriter, n)
	for i := range ws {
		w := &deferWriter{idx: i, res: fmt.Sprintf("%s/w%d", prefix, i), op: fmt.Sprintf("op-%s-w%d", strings.ReplaceAll(prefix, "/", "-"), i)}
		w.lease = reg.acquire(t, deferToken, w.res, "req-"+w.op, w.op, 120_000)
		ws[i] = w
	}
	return ws
}

// deferBurst has every writer write its next segments through gw, at once,
// until at least total writes were answered, then lets each finish the
// write it is in and returns: every write sent was answered, so the kill
// or stop that follows finds each resource's last settle deferred and no
// write in flight. Any answer but 200 COMMITTED fails the test.
func deferBurst(t *testing.T, gw *gatewayProc, ws []*deferWriter, total int) int {
	t.Helper()
	return writeBurst(t, gw, ws, total, false, nil)
}

// watchedBurst is deferBurst that hands every answer to seen as it arrives.
func watchedBurst(t *testing.T, gw *gatewayProc, ws []*deferWriter, total int, seen func(fencegate.Receipt)) int {
	t.Helper()
	return writeBurst(t, gw, ws, total, false, seen)
}

// killMidBurst is deferBurst that kills gw (SIGKILL) as the total-th
// answer arrives, while the other writers' writes are in flight: their
// admissions may or may not have committed (each folding the settle of the
// writer's last answered write), their objects may or may not have landed.
// It fails the test if the burst ends (its 15 s deadline) before the kill.
func killMidBurst(t *testing.T, gw *gatewayProc, ws []*deferWriter, total int) int {
	t.Helper()
	return writeBurst(t, gw, ws, total, true, nil)
}

func writeBurst(t *testing.T, gw *gatewayProc, ws []*deferWriter, total int, kill bool, seen func(fencegate.Receipt)) int {
	t.Helper()
	var (
		mu     sync.Mutex
		n      int
		stop   bool
		killed sync.Once
		dead   atomic.Bool // set before the kill is sent
		wg     sync.WaitGroup
	)
	deadline := time.Now().Add(15 * time.Second)
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				done := stop || !kill && n >= total || time.Now().After(deadline)
				stop = done
				mu.Unlock()
				if done {
					return
				}
				seg := len(w.answered) + 1
				body := fmt.Sprintf("%s segment %d", w.res, seg)
				a, err := gw.tryDo("PUT", "/v1/objects/"+w.res, deferToken, fenceHeaders(w.lease, seg), body)
				if err != nil && dead.Load() {
					return // killed: this write is unanswered
				}
				if err != nil || a.status != http.StatusOK || a.str("state") != "COMMITTED" || a.str("version") == "" {
					t.Errorf("writer %d segment %d: %v %d %s", w.idx, seg, err, a.status, a.body)
					mu.Lock()
					stop = true
					mu.Unlock()
					return
				}
				r := answeredReceipt(t, a)
				mu.Lock()
				w.answered, w.bodies = append(w.answered, r), append(w.bodies, body)
				n++
				reached := kill && n >= total
				mu.Unlock()
				if seen != nil {
					seen(r)
				}
				if reached {
					killed.Do(func() { dead.Store(true); gw.kill9() })
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if kill && !dead.Load() {
		t.Fatalf("never reached %d answers (%d within the deadline): no kill", total, n)
	}
	for _, w := range ws {
		if len(w.answered) == 0 {
			t.Fatalf("writer %d had no write answered", w.idx)
		}
	}
	return n
}

// sameReceipt fails unless got is want as answered: COMMITTED, the same
// receipt, segment and version (settledAt may differ after a crash: the
// proof records its own time).
func sameReceipt(t *testing.T, how string, want, got fencegate.Receipt) {
	t.Helper()
	if got.State != fencegate.ReceiptCommitted || got.ID != want.ID || got.Version != want.Version ||
		got.FenceToken != want.FenceToken || got.Segment != want.Segment || got.PayloadDigest != want.PayloadDigest {
		t.Fatalf("%s: answered COMMITTED %s (fence %d segment %d) at %s; read %s %s (fence %d segment %d) at %q",
			how, want.ID, want.FenceToken, want.Segment, want.Version, got.State, got.ID, got.FenceToken, got.Segment, got.Version)
	}
}

// Read paths: each reads the answered receipt want of w through gw and
// fails unless it is COMMITTED at the answered version.

func readByID(t *testing.T, gw *gatewayProc, want fencegate.Receipt) {
	t.Helper()
	a := gw.do(t, "GET", "/v1/receipts/"+want.ID, deferToken, nil, "")
	if a.status != http.StatusOK {
		t.Fatalf("receipt %s by ID: %d %s", want.ID, a.status, a.body)
	}
	sameReceipt(t, "by ID", want, answeredReceipt(t, a))
}

// listAll pages through a receipt list query.
func listAll(t *testing.T, gw *gatewayProc, query url.Values) []fencegate.Receipt {
	t.Helper()
	var all []fencegate.Receipt
	query.Set("limit", "1000")
	for {
		a := gw.do(t, "GET", "/v1/receipts?"+query.Encode(), deferToken, nil, "")
		var page fencegate.ReceiptPage
		if a.status != http.StatusOK || json.Unmarshal(a.body, &page) != nil {
			t.Fatalf("receipts ?%s: %d %s", query.Encode(), a.status, a.body)
		}
		all = append(all, page.Receipts...)
		if page.Next == "" {
			return all
		}
		query.Set("cursor", page.Next)
	}
}

// readInList fails unless every receipt of want is in list, as answered.
func readInList(t *testing.T, how string, list []fencegate.Receipt, want ...fencegate.Receipt) {
	t.Helper()
	byID := map[string]fencegate.Receipt{}
	for _, r := range list {
		byID[r.ID] = r
	}
	for _, w := range want {
		got, ok := byID[w.ID]
		if !ok {
			t.Fatalf("%s: answered receipt %s is not listed", how, w.ID)
		}
		sameReceipt(t, how, w, got)
	}
}

func readByOperation(t *testing.T, gw *gatewayProc, op string, want ...fencegate.Receipt) {
	t.Helper()
	readInList(t, "by operation", listAll(t, gw, url.Values{"operationId": {op}}), want...)
}

func readByResource(t *testing.T, gw *gatewayProc, res string, want ...fencegate.Receipt) {
	t.Helper()
	readInList(t, "by resource", listAll(t, gw, url.Values{"resource": {res}}), want...)
}

func readBySegment(t *testing.T, gw *gatewayProc, want fencegate.Receipt) {
	t.Helper()
	list := listAll(t, gw, url.Values{"resource": {want.Resource}, "fence": {fmt.Sprint(want.FenceToken)}, "segment": {fmt.Sprint(want.Segment)}})
	if len(list) != 1 {
		t.Fatalf("segment %d of fence %d on %s: %d receipts", want.Segment, want.FenceToken, want.Resource, len(list))
	}
	sameReceipt(t, "by resource, fence and segment", want, list[0])
}

// readByReplay sends the answered segment again (same lease, segment and
// body): the original receipt, Fence-Replay, and the object untouched (its
// version and bytes are the answered write's).
func readByReplay(t *testing.T, gw *gatewayProc, l lease, want fencegate.Receipt, body string) {
	t.Helper()
	replayAnswered(t, gw, l, want, body)
	readObject(t, gw, want, body)
}

// replayAnswered sends the answered segment again (same lease, segment and
// body) and fails unless the answer is the original receipt, Fence-Replay.
func replayAnswered(t *testing.T, gw *gatewayProc, l lease, want fencegate.Receipt, body string) {
	t.Helper()
	a := gw.do(t, "PUT", "/v1/objects/"+want.Resource, deferToken, fenceHeaders(l, int(want.Segment)), body)
	if a.status != http.StatusOK || a.header.Get("Fence-Replay") != "true" {
		t.Fatalf("replay of segment %d on %s: %d replay=%q %s", want.Segment, want.Resource, a.status, a.header.Get("Fence-Replay"), a.body)
	}
	sameReceipt(t, "replay", want, answeredReceipt(t, a))
}

// readObject fails unless the object is the write want answered.
func readObject(t *testing.T, gw *gatewayProc, want fencegate.Receipt, body string) {
	t.Helper()
	o := gw.do(t, "GET", "/v1/objects/"+want.Resource, deferToken, nil, "")
	if o.status != http.StatusOK || string(o.body) != body || o.header.Get("ETag") != want.Version {
		t.Fatalf("object %s: %d ETag %s %q; answered %s %q", want.Resource, o.status, o.header.Get("ETag"), o.body, want.Version, body)
	}
}

// readResource fails unless the resource is at want's fence and segment
// with no effect in flight.
func readResource(t *testing.T, gw *gatewayProc, want fencegate.Receipt) {
	t.Helper()
	a := gw.do(t, "GET", "/v1/resources/"+want.Resource, deferToken, nil, "")
	if a.status != http.StatusOK || a.str("pendingReceipt") != "" || a.num("highestFence") != want.FenceToken || a.num("lastSegmentSeq") != want.Segment {
		t.Fatalf("resource %s after its answered segment %d (fence %d): %d %s", want.Resource, want.Segment, want.FenceToken, a.status, a.body)
	}
}

// readEverything reads every answered write of every writer through every
// path: each receipt by ID, the writer's operation and resource lists,
// the last write by segment, its object and its resource.
func readEverything(t *testing.T, gw *gatewayProc, ws []*deferWriter) {
	t.Helper()
	for _, w := range ws {
		for _, r := range w.answered {
			readByID(t, gw, r)
		}
		readByOperation(t, gw, w.op, w.answered...)
		readByResource(t, gw, w.res, w.answered...)
		last, body := w.last()
		readBySegment(t, gw, last)
		readObject(t, gw, last, body)
		readResource(t, gw, last)
	}
}

// putUntilAdmitted sends a write, again while the answer is RESOURCE_BUSY
// (another process's settle is not durable yet: a bounded wait, as a
// worker retries), and returns the first other answer and how many busy
// answers came before it.
func putUntilAdmitted(t *testing.T, gw *gatewayProc, l lease, res string, seg int, body string) (answer, int) {
	t.Helper()
	busy := 0
	for deadline := time.Now().Add(20 * time.Second); ; busy++ {
		a := gw.do(t, "PUT", "/v1/objects/"+res, deferToken, fenceHeaders(l, seg), body)
		if a.str("code") != string(fencegate.CodeResourceBusy) || time.Now().After(deadline) {
			return a, busy
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rawState is a fence store's rows read without a gateway: receipts by ID,
// resources by name, each as its columns (JSON names).
type rawState struct {
	receipts  map[string]map[string]any
	resources map[string]map[string]any
}

// inWindow is the answered writes that rs holds PENDING: the settles a
// kill or stop found deferred. Any other state than PENDING or COMMITTED
// at the answered version fails: an answered write is never settled
// otherwise, in no store state.
func (rs rawState) inWindow(t *testing.T, ws []*deferWriter) map[string]fencegate.Receipt {
	t.Helper()
	out := map[string]fencegate.Receipt{}
	for _, w := range ws {
		for _, r := range w.answered {
			row, ok := rs.receipts[r.ID]
			switch {
			case !ok:
				t.Fatalf("answered receipt %s is not in the store", r.ID)
			case row["state"] == string(fencegate.ReceiptPending):
				out[r.ID] = r
				if p := rs.resources[r.Resource]["pendingReceipt"]; p != r.ID {
					t.Fatalf("answered receipt %s is PENDING without its resource's pending mark (%v)", r.ID, p)
				}
			case row["state"] != string(fencegate.ReceiptCommitted) || row["version"] != r.Version:
				t.Fatalf("answered COMMITTED at %s, stored %v at %v", r.Version, row["state"], row["version"])
			}
		}
	}
	return out
}

// checkOnlySettled fails unless after is before with exactly the receipts of
// window settled COMMITTED at their answered versions (state, version,
// settledAt), their resources' pending marks cleared, and nothing else
// changed, except on the resources in written (written through since:
// their rows and new receipts are checked through the API).
func checkOnlySettled(t *testing.T, before, after rawState, window map[string]fencegate.Receipt, written map[string]bool) {
	t.Helper()
	for id, b := range before.receipts {
		a, ok := after.receipts[id]
		if !ok {
			t.Fatalf("receipt %s is gone: %v", id, b)
		}
		skip := []string{}
		if w, ok := window[id]; ok {
			if a["state"] != string(fencegate.ReceiptCommitted) || a["version"] != w.Version {
				t.Fatalf("answered receipt %s (%s) stored %v at %v after the settle", id, w.Version, a["state"], a["version"])
			}
			skip = []string{"state", "version", "settledAt"}
		}
		if written[fmt.Sprint(b["resource"])] {
			continue
		}
		if d := rowDiff(b, a, skip...); d != "" {
			t.Fatalf("receipt %s changed beyond its settle: %s", id, d)
		}
	}
	for id, a := range after.receipts {
		if _, ok := before.receipts[id]; !ok && !written[fmt.Sprint(a["resource"])] {
			t.Fatalf("a receipt appeared on a resource nobody wrote: %v", a)
		}
	}
	cleared := map[string]bool{}
	for _, w := range window {
		cleared[w.Resource] = true
	}
	for res, b := range before.resources {
		a := after.resources[res]
		if written[res] {
			continue
		}
		skip := []string{}
		if cleared[res] {
			if a["pendingReceipt"] != "" && a["pendingReceipt"] != nil {
				t.Fatalf("resource %s keeps its pending mark after the settle: %v", res, a)
			}
			skip = []string{"pendingReceipt", "updatedAt"}
		}
		if d := rowDiff(b, a, skip...); d != "" {
			t.Fatalf("resource %s changed beyond the settle: %s", res, d)
		}
	}
}

// rowDiff names the columns where a and b differ, but those in skip.
func rowDiff(a, b map[string]any, skip ...string) string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	for _, k := range skip {
		delete(keys, k)
	}
	var diffs []string
	for k := range keys {
		if fmt.Sprint(a[k]) != fmt.Sprint(b[k]) {
			diffs = append(diffs, fmt.Sprintf("%s: %v -> %v", k, a[k], b[k]))
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

// checkSameState fails unless a and b hold the same rows, column for column.
func checkSameState(t *testing.T, what string, a, b rawState) {
	t.Helper()
	checkOnlySettled(t, a, b, nil, nil)
	if len(a.receipts) != len(b.receipts) || len(a.resources) != len(b.resources) {
		t.Fatalf("%s: %d receipts, %d resources before; %d, %d after", what, len(a.receipts), len(a.resources), len(b.receipts), len(b.resources))
	}
}

// checkSettledAtAnswered fails unless each answered receipt outside
// window (settled by a fold or a flush of the answering process) is
// stored with the settledAt it was answered with: the answer was the
// settle the store records, not an approximation.
func checkSettledAtAnswered(t *testing.T, rs rawState, ws []*deferWriter, window map[string]fencegate.Receipt) {
	t.Helper()
	for _, w := range ws {
		for _, r := range w.answered {
			if _, ok := window[r.ID]; ok || r.SettledAt == nil {
				continue
			}
			got, err := time.Parse(time.RFC3339Nano, fmt.Sprint(rs.receipts[r.ID]["settledAt"]))
			if err != nil || !got.Equal(r.SettledAt.Truncate(time.Microsecond)) && !got.Equal(*r.SettledAt) {
				t.Fatalf("receipt %s answered settled at %s, stored %v", r.ID, r.SettledAt.Format(time.RFC3339Nano), rs.receipts[r.ID]["settledAt"])
			}
		}
	}
}

// rawCtx bounds one raw read of a store.
func rawCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 20*time.Second)
}
