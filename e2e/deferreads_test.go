package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// TestAnswersReadAtAnotherReplicaInTheWindowStayCommitted: while twelve
// workers write through replica A (deferSettle 500ms, versitygw S3,
// Postgres), replica B reads every answer as it arrives, by ID and by
// resource/fence/segment: each reads COMMITTED at the answered version
// although A has not made it durable yet (B proves it from the object and
// settles it; A's fold or flush of it then meets the store's ruling). A is
// killed right after the burst; B reads every answered write through every
// path and admits the next segment on every resource; the store holds no
// answered write in another state than PENDING (with its pending mark) or
// COMMITTED at the answered version; after A restarts every read holds.
func TestAnswersReadAtAnotherReplicaInTheWindowStayCommitted(t *testing.T) {
	c := newDeferCluster(t, true)
	cfgA, cfgB := c.replicaConfig(t, "a", "500ms", ""), c.replicaConfig(t, "b", "500ms", "")
	a, b := c.start(t, cfgA), c.start(t, cfgB)
	ws := newDeferWriters(t, c.reg, c.store+"/readwindow", 12)

	answers := make(chan fencegate.Receipt, 1024)
	var (
		wg    sync.WaitGroup
		reads int
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r := range answers {
			for _, path := range []string{"/v1/receipts/" + r.ID, "/v1/receipts?" + url.Values{"resource": {r.Resource},
				"fence": {fmt.Sprint(r.FenceToken)}, "segment": {fmt.Sprint(r.Segment)}}.Encode()} {
				got, err := readOne(b, path)
				if err != nil {
					t.Errorf("read at B during the window: %v", err)
					continue
				}
				reads++
				if got.State != fencegate.ReceiptCommitted || got.ID != r.ID || got.Version != r.Version {
					t.Errorf("%s at B during the window: answered COMMITTED %s at %s, read %s %s at %q", path, r.ID, r.Version, got.State, got.ID, got.Version)
				}
			}
		}
	}()
	n := watchedBurst(t, a, ws, 96, func(r fencegate.Receipt) { answers <- r })
	close(answers)
	wg.Wait()
	a.kill9()
	if t.Failed() {
		t.FailNow()
	}
	s0 := rawPostgres(t, c.pg.URL())
	window := s0.inWindow(t, ws)
	t.Logf("%d writes answered COMMITTED at A, %d reads of them at B in the window; %d settled first by B's proof (stored settledAt is not the answered one; A's fold or flush then repeated it); %d answered PENDING in the store at the kill",
		n, reads, settledElsewhere(s0, ws), len(window))

	readEverything(t, b, ws)
	for _, w := range ws {
		seg := len(w.answered) + 1
		body := fmt.Sprintf("%s segment %d", w.res, seg)
		got, _ := putUntilAdmitted(t, b, w.lease, w.res, seg, body)
		if got.status != http.StatusOK || got.str("state") != "COMMITTED" {
			t.Fatalf("%s: segment %d after the kill: %d %s", w.res, seg, got.status, got.body)
		}
		w.answered, w.bodies = append(w.answered, answeredReceipt(t, got)), append(w.bodies, body)
	}
	readEverything(t, b, ws)
	rawPostgres(t, c.pg.URL()).inWindow(t, ws)
	a2 := c.start(t, cfgA)
	readEverything(t, a2, ws)
}

// readOne reads one receipt (by ID, or the one of a segment query) at gw.
func readOne(gw *gatewayProc, path string) (fencegate.Receipt, error) {
	a, err := gw.exchange(20*time.Second, "GET", path, deferToken, nil, nil)
	if err != nil || a.status != http.StatusOK {
		return fencegate.Receipt{}, fmt.Errorf("GET %s: %v %d %s", path, err, a.status, a.body)
	}
	if strings.HasPrefix(path, "/v1/receipts/") {
		var r fencegate.Receipt
		return r, json.Unmarshal(a.body, &r)
	}
	var p fencegate.ReceiptPage
	if err := json.Unmarshal(a.body, &p); err != nil || len(p.Receipts) != 1 {
		return fencegate.Receipt{}, fmt.Errorf("GET %s: %v %s", path, err, a.body)
	}
	return p.Receipts[0], nil
}

// settledElsewhere counts the answered receipts stored with another
// settledAt than the answered one: settled first by another replica's
// proof, not by the answering process's fold or flush.
func settledElsewhere(rs rawState, ws []*deferWriter) int {
	n := 0
	for _, w := range ws {
		for _, r := range w.answered {
			got, err := time.Parse(time.RFC3339Nano, fmt.Sprint(rs.receipts[r.ID]["settledAt"]))
			if r.SettledAt != nil && (err != nil || !got.Equal(r.SettledAt.Truncate(time.Microsecond)) && !got.Equal(*r.SettledAt)) {
				n++
			}
		}
	}
	return n
}
