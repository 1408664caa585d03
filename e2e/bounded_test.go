package e2e

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"
)

// TestListsArePagedAndQuarantineKeepsThePayload drives the built binary as an
// outside client: an operation's receipts come in pages no larger than the
// limit asked, following next yields each once in order, and refused pages
// (limit out of range, a cursor of another list) change nothing. A segment
// sent again three times with another payload is one quarantine record with
// three attempts, and GET /v1/quarantine/{id} shows its payload beside the
// accepted receipt and the object it wrote; the fence state never moves.
func TestListsArePagedAndQuarantineKeepsThePayload(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a", "--status-mode", "query")
	l := p.acquire(t, "token-a", "local/pages/1", "pages-1", "op-pages", 60_000)
	var want []string
	for seg := 1; seg <= 7; seg++ {
		a := p.put(t, "token-a", l, fmt.Sprintf("local/pages/1/part-%d", seg), seg, fmt.Sprintf("part %d", seg))
		if a.status != http.StatusOK {
			t.Fatalf("segment %d: %d %s", seg, a.status, a.body)
		}
		want = append(want, a.str("receiptId"))
	}
	state := func() string {
		t.Helper()
		return string(p.do(t, "GET", "/v1/resources/local/pages/1", "token-a", nil, "").body)
	}
	before := state()

	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		a := p.do(t, "GET", "/v1/receipts?operationId=op-pages&limit=3&cursor="+cursor, "token-a", nil, "")
		list, _ := a.json["receipts"].([]any)
		if a.status != http.StatusOK || len(list) > 3 || pages > 3 {
			t.Fatalf("page %d: %d %s", pages, a.status, a.body)
		}
		for _, r := range list {
			got = append(got, r.(map[string]any)["receiptId"].(string))
		}
		if cursor = a.str("next"); cursor == "" {
			break
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pages of 3 = %v, want %v", got, want)
	}
	first := p.do(t, "GET", "/v1/receipts?operationId=op-pages&limit=1", "token-a", nil, "")
	for _, path := range []string{"/v1/receipts?operationId=op-pages&limit=1001", "/v1/receipts?operationId=op-pages&limit=0",
		"/v1/receipts?operationId=op-other&cursor=" + first.str("next"), "/v1/quarantine?cursor=" + first.str("next")} {
		wantCode(t, p.do(t, "GET", path, "token-a", nil, ""), http.StatusBadRequest, "INVALID_REQUEST")
	}

	for range 3 {
		wantCode(t, p.put(t, "token-a", l, "local/pages/1/part-1", 1, "not part 1"), http.StatusConflict, "QUARANTINED")
	}
	if after := state(); after != before {
		t.Fatalf("fence state moved: %s -> %s", before, after)
	}
	q := p.do(t, "GET", "/v1/quarantine?resource=local/pages/1", "token-a", nil, "")
	recs, _ := q.json["quarantine"].([]any)
	if len(recs) != 1 {
		t.Fatalf("three identical refusals: %s, want one record", q.body)
	}
	rec := recs[0].(map[string]any)
	if rec["attempts"] != float64(3) || rec["payloadKept"] != true || rec["receiptId"] != want[0] {
		t.Fatalf("record = %v", rec)
	}
	v := p.do(t, "GET", "/v1/quarantine/"+rec["quarantineId"].(string), "token-a", nil, "")
	quar, _ := v.json["quarantine"].(map[string]any)
	acc, _ := v.json["accepted"].(map[string]any)
	refused, _ := base64.StdEncoding.DecodeString(fmt.Sprint(quar["payload"]))
	accepted, _ := base64.StdEncoding.DecodeString(fmt.Sprint(v.json["acceptedPayload"]))
	if v.status != http.StatusOK || string(refused) != "not part 1" || string(accepted) != "part 1" || acc["receiptId"] != want[0] {
		t.Fatalf("quarantine view: %d %s", v.status, v.body)
	}
	wantCode(t, p.do(t, "GET", "/v1/quarantine/q_none", "token-a", nil, ""), http.StatusNotFound, "NOT_FOUND")
	if after := state(); after != before {
		t.Fatalf("fence state moved: %s -> %s", before, after)
	}
}
