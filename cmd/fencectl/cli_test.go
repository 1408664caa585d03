package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// fakeGateway answers acquire, status, object writes and receipts like the
// gateway, and remembers the fenced writes it accepted.
type fakeGateway struct {
	mu       sync.Mutex
	receipts []fencegate.Receipt
	writes   []http.Header
	bodies   []string
	stale    bool // answer STALE_OWNER to writes
	unknown  bool // answer MUTATION_UNKNOWN to writes
	// unknownState, with unknown, records the write answered
	// MUTATION_UNKNOWN in receipt R9 in this state (else it left none).
	unknownState fencegate.ReceiptState
	shadow       bool // answer writes as shadow mode forwarding a refused one
	// bindingCalls are the methods of the binding requests received.
	bindingCalls []string
	// hold, when set, holds the next object write until it is closed
	// (entered is closed when it arrives); one write only.
	hold, entered chan struct{}
	statuses      int // GET /v1/leases/L1 answered
	// listDown and lookupDown answer the receipts list and a receipt's
	// lookup (GET /v1/receipts/{id}, else NOT_FOUND) 503 BACKEND_UNAVAILABLE.
	listDown, lookupDown bool
}

func (f *fakeGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == "PUT" && strings.HasPrefix(r.URL.Path, "/v1/objects/") {
		f.mu.Lock()
		hold, entered := f.hold, f.entered
		f.hold, f.entered = nil, nil
		f.mu.Unlock()
		if hold != nil {
			close(entered)
			<-hold
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer tok" {
		problem(w, fencegate.CodeUnauthenticated, http.StatusUnauthorized, "unknown workload credential")
		return
	}
	exp := time.Now().Add(5 * time.Second)
	lease := map[string]any{"lease": "L1", "resource": "bucket/jobs", "owner": "w", "requestId": "req-1", "fenceToken": 7,
		"operationId": "op-1", "operationRoot": "root", "state": "HELD", "expiresAt": time.Now().Add(30 * time.Second),
		"grant": "grant-7", "grantDigest": "sha256:g", "statusProof": "proof", "statusExpiresAt": exp}
	switch {
	case r.Method == "GET" && (r.URL.Path == "/v1/quarantine/q_1" || r.URL.Path == "/v1/quarantine/q_2" || r.URL.Path == "/v1/quarantine/q_3"):
		accepted := fencegate.Receipt{ID: "R1", Resource: "bucket/jobs", FenceToken: 7, Segment: 1, Method: "PUT", PayloadDigest: "sha256:aa", State: fencegate.ReceiptCommitted}
		refused := fencegate.Quarantine{ID: "q_1", Resource: "bucket/jobs", FenceToken: 7, Segment: 1, Method: "PUT",
			ReceiptID: "R1", PayloadDigest: "sha256:bb", PayloadSize: 7, PayloadKept: true, Payload: []byte("refused"), Attempts: 2}
		switch {
		case strings.HasSuffix(r.URL.Path, "q_2"): // the accepted write was a delegate's
			accepted.Delegate, accepted.DelegationID = "consumer", "dlg_1"
		case strings.HasSuffix(r.URL.Path, "q_3"): // the refused one was
			refused.Delegate, refused.DelegationID = "consumer-2", "dlg_2"
		}
		answer(w, http.StatusOK, map[string]any{
			"quarantine":          refused,
			"accepted":            accepted,
			"acceptedPayload":     []byte("accepted"),
			"acceptedPayloadKept": true,
		})
	case r.URL.Path == "/v1/admin/bindings/bucket/jobs/a" && (r.Method == "GET" || r.Method == "DELETE"):
		f.bindingCalls = append(f.bindingCalls, r.Method)
		answer(w, http.StatusOK, map[string]string{"store": "bucket", "key": "jobs/a", "target": "objects/bucket/jobs/a", "resource": "bucket/jobs"})
	case r.Method == "POST" && r.URL.Path == "/v1/leases":
		var b map[string]any
		_ = json.NewDecoder(r.Body).Decode(&b)
		if b["resource"] != "bucket/jobs" || b["operationId"] != "op-1" || b["ttlMs"] != float64(10000) {
			problem(w, fencegate.CodeInvalidRequest, 400, "unexpected body")
			return
		}
		answer(w, http.StatusCreated, lease)
	case r.Method == "GET" && r.URL.Path == "/v1/leases/L1":
		f.statuses++
		answer(w, http.StatusOK, lease)
	case r.Method == "PUT" && strings.HasPrefix(r.URL.Path, "/v1/objects/"):
		if f.stale {
			problem(w, fencegate.CodeStaleOwner, http.StatusConflict, "fence 7 is below the resource's highest fence 8")
			return
		}
		b, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(b)
		seg, _ := strconv.ParseUint(r.Header.Get("Fence-Segment"), 10, 64)
		rc := fencegate.Receipt{ID: "R1", Resource: "bucket/jobs", Target: strings.TrimPrefix(r.URL.Path, "/v1/"), Method: "PUT",
			FenceToken: 7, Segment: seg, OperationID: "op-1", Lease: "L1", State: fencegate.ReceiptCommitted,
			PayloadDigest: "sha256:" + hex.EncodeToString(sum[:])}
		if f.unknown && f.unknownState != "" {
			rc.ID, rc.State = "R9", f.unknownState
			f.receipts = append(f.receipts, rc)
		}
		if f.unknown {
			w.Header().Set("Fence-Receipt", "R9")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadGateway)
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "urn:fencegate:problem:mutation_unknown", "title": "x", "status": 502,
				"detail": "the store did not answer", "code": fencegate.CodeMutationUnknown, "receiptId": "R9"})
			return
		}
		if f.shadow { // forwarded, nothing admitted: an unstored receipt
			w.Header().Set("Fence-Mode", "shadow")
			w.Header().Set("Fence-Verdict", string(fencegate.CodeResourceMismatch))
			answer(w, http.StatusOK, fencegate.Receipt{ID: "shadow_1", Resource: "bucket/jobs", Method: "PUT", FenceToken: 7,
				Segment: 1, State: fencegate.ReceiptCommitted})
			return
		}
		f.writes = append(f.writes, r.Header.Clone())
		f.bodies = append(f.bodies, string(b))
		f.receipts = append(f.receipts, rc)
		w.Header().Set("Fence-Receipt", rc.ID)
		answer(w, http.StatusOK, rc)
	case r.Method == "GET" && (f.listDown && r.URL.Path == "/v1/receipts" || f.lookupDown && strings.HasPrefix(r.URL.Path, "/v1/receipts/")):
		problem(w, fencegate.CodeBackendUnavailable, http.StatusServiceUnavailable, "the receipt store is unavailable")
	case r.Method == "GET" && r.URL.Path == "/v1/receipts" && r.URL.Query().Get("operationId") == "op-1":
		// Pages as the gateway does, with the index as the cursor.
		from, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		limit, err := strconv.Atoi(r.URL.Query().Get("limit"))
		if err != nil {
			limit = fencegate.DefaultPageLimit
		}
		to, next := min(from+limit, len(f.receipts)), ""
		if to < len(f.receipts) {
			next = strconv.Itoa(to)
		}
		answer(w, http.StatusOK, fencegate.ReceiptPage{Receipts: f.receipts[from:to], Next: next})
	default:
		problem(w, fencegate.CodeNotFound, http.StatusNotFound, "no route")
	}
}

func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func problem(w http.ResponseWriter, code fencegate.Code, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "urn:fencegate:problem:" + strings.ToLower(string(code)),
		"title": "x", "status": status, "detail": detail, "code": code})
}

type harness struct {
	t      *testing.T
	fake   *fakeGateway
	global []string
	dir    string
}

func newHarness(t *testing.T) *harness {
	f := &fakeGateway{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	env = func(string) string { return "" }
	t.Cleanup(func() { env = os.Getenv })
	return &harness{t: t, fake: f, dir: dir,
		global: []string{"--gateway", srv.URL, "--token", "tok", "--lease-file", filepath.Join(dir, "lease.json")}}
}

// bodyFile writes a small body for put and returns its path.
func (h *harness) bodyFile() string {
	h.t.Helper()
	file := filepath.Join(h.dir, "body.txt")
	if err := os.WriteFile(file, []byte("hello"), 0o600); err != nil {
		h.t.Fatal(err)
	}
	return file
}

func (h *harness) run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(append(append([]string{}, h.global...), args...), &o, &e)
	return code, o.String(), e.String()
}

// leaseSnapshot is the lease file as snapshotLease read it.
type leaseSnapshot struct {
	b      []byte
	exists bool
}

// snapshotLease reads the harness's lease file byte for byte (none: it
// does not exist); t is the test (or subtest) it fails.
func (h *harness) snapshotLease(t testing.TB) leaseSnapshot {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.dir, "lease.json"))
	if errors.Is(err, os.ErrNotExist) {
		return leaseSnapshot{}
	}
	if err != nil {
		t.Fatal(err)
	}
	return leaseSnapshot{b: b, exists: true}
}

// leaseUnchanged fails t unless the lease file is byte for byte what snap
// read (still absent if it was): what was refused wrote nothing there.
func (h *harness) leaseUnchanged(t testing.TB, snap leaseSnapshot, what string) {
	t.Helper()
	now := h.snapshotLease(t)
	if now.exists != snap.exists || !bytes.Equal(now.b, snap.b) {
		t.Fatalf("%s changed the lease file:\n%s\n->\n%s", what, snap.b, now.b)
	}
}

func TestAcquirePutAndReceipts(t *testing.T) {
	h := newHarness(t)
	code, out, errOut := h.run("acquire", "bucket/jobs", "--ttl", "10s", "--operation", "op-1")
	if code != 0 || !strings.Contains(out, "L1") || !strings.Contains(out, "fence") || !strings.Contains(out, "7") {
		t.Fatalf("acquire: %d\n%s%s", code, out, errOut)
	}
	file := filepath.Join(h.dir, "data.txt")
	if err := os.WriteFile(file, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if code, out, errOut := h.run("put", "bucket/jobs/a", file); code != 0 || !strings.Contains(out, "COMMITTED") {
			t.Fatalf("put: %d\n%s%s", code, out, errOut)
		}
	}
	w := h.fake.writes
	if len(w) != 2 || w[0].Get("Fence-Grant") != "grant-7" || w[0].Get("Fence-Status") != "proof" ||
		w[0].Get("Fence-Segment") != "1" || w[1].Get("Fence-Segment") != "2" || h.fake.bodies[0] != "hello" {
		t.Fatalf("writes %v bodies %q", w, h.fake.bodies)
	}
	code, out, _ = h.run("--json", "receipts", "--operation", "op-1")
	var list struct{ Receipts []fencegate.Receipt }
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Receipts) != 2 || list.Receipts[1].Segment != 2 {
		t.Fatalf("receipts: %d %s", code, out)
	}
	if code, out, _ := h.run("receipts", "--operation", "op-1"); code != 0 || !strings.Contains(out, "RECEIPT") {
		t.Fatalf("readable receipts: %d %s", code, out)
	}
}

// TestReceiptsArePagedWithLimitAndCursor: --limit asks for a page, the
// readable output says how to get the next one, --cursor gets it.
// Rule: a write shadow mode forwarded although it refused it admits no
// segment, so the lease file keeps naming it as the next one; put used to
// move on, and every later write of the lease was SEGMENT_OUT_OF_ORDER.
func TestAShadowedPutLeavesTheSegmentToTheNextWrite(t *testing.T) {
	h := newHarness(t)
	if code, out, errOut := h.run("acquire", "bucket/jobs", "--ttl", "10s", "--operation", "op-1"); code != 0 {
		t.Fatalf("acquire: %d\n%s%s", code, out, errOut)
	}
	file := h.bodyFile()
	h.fake.shadow = true
	if code, out, errOut := h.run("put", "bucket/jobs/a", file); code != 0 || !strings.Contains(out, "shadow_1") {
		t.Fatalf("shadowed put: %d\n%s%s", code, out, errOut)
	}
	h.fake.shadow = false
	if code, out, errOut := h.run("put", "bucket/jobs/a", file); code != 0 {
		t.Fatalf("put: %d\n%s%s", code, out, errOut)
	}
	if len(h.fake.writes) != 1 || h.fake.writes[0].Get("Fence-Segment") != "1" {
		t.Fatalf("the write after a shadowed one went at segment %q, want 1", h.fake.writes[0].Get("Fence-Segment"))
	}
}

func TestReceiptsArePagedWithLimitAndCursor(t *testing.T) {
	h := newHarness(t)
	if code, _, e := h.run("acquire", "bucket/jobs", "--ttl", "10s", "--operation", "op-1"); code != 0 {
		t.Fatalf("acquire: %s", e)
	}
	file := filepath.Join(h.dir, "data.txt")
	if err := os.WriteFile(file, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if code, out, errOut := h.run("put", "bucket/jobs/a", file); code != 0 {
			t.Fatalf("put: %d\n%s%s", code, out, errOut)
		}
	}
	code, out, _ := h.run("receipts", "--operation", "op-1", "--limit", "1")
	if code != 0 || strings.Count(out, "bucket/jobs/a") != 1 || !strings.Contains(out, "more: fencectl receipts --operation op-1 --limit 1 --cursor 1") {
		t.Fatalf("first page: %d\n%s", code, out)
	}
	code, out, _ = h.run("--json", "receipts", "--operation", "op-1", "--limit", "1", "--cursor", "1")
	var page fencegate.ReceiptPage
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Receipts) != 1 || page.Receipts[0].Segment != 2 || page.Next != "" {
		t.Fatalf("second page: %d %s", code, out)
	}
}

func TestStaleOwnerPrintsTheCodeAndWhatToDo(t *testing.T) {
	h := newHarness(t)
	if code, _, e := h.run("acquire", "bucket/jobs", "--ttl", "10s", "--operation", "op-1"); code != 0 {
		t.Fatalf("acquire: %s", e)
	}
	h.fake.stale = true
	stdin = strings.NewReader("payload")
	t.Cleanup(func() { stdin = os.Stdin })
	code, out, errOut := h.run("put", "bucket/jobs/a", "-", "--segment", "1")
	if code != 1 || out != "" {
		t.Fatalf("exit %d stdout %q", code, out)
	}
	want := "error: STALE_OWNER: fence 7 is below the resource's highest fence 8\n" +
		"hint: a newer owner holds this resource; stop and query receipts by operation ID\n"
	if errOut != want {
		t.Fatalf("stderr %q, want %q", errOut, want)
	}
}

func TestUsageMistakesExitTwo(t *testing.T) {
	h := newHarness(t)
	for _, args := range [][]string{{"nope"}, {"acquire"}, {"acquire", "r"}, {"put", "nokey", "f"}} {
		if code, _, _ := h.run(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, _ := h.run("--token", "bad", "unknown"); code != 1 {
		t.Errorf("refused call: exit %d, want 1", code)
	}
}

func TestEveryCodeHasAHint(t *testing.T) {
	for _, c := range fencegate.Codes {
		if hints[string(c)] == "" {
			t.Errorf("no hint for %s", c)
		}
	}
}

// TestShowQuarantinePutsBothPayloadsSideBySide: the refused request and the
// accepted one in two columns, then both payloads.
func TestShowQuarantinePutsBothPayloadsSideBySide(t *testing.T) {
	h := newHarness(t)
	code, out, errOut := h.run("show-quarantine", "q_1")
	if code != 0 {
		t.Fatalf("show-quarantine: %d %s", code, errOut)
	}
	for _, want := range []string{"REFUSED (q_1)", "ACCEPTED (R1)", "sha256:bb", "sha256:aa", "2 attempts", "refused payload (7 bytes):\n  refused", "accepted payload:\n  accepted"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestShowQuarantineNamesTheDelegateOfEachWrite: when a delegate made the
// accepted write or sent the refused one, a delegate row names it and its
// delegation in that write's column ("-" in the other's, the owner's); when
// the owner made both, there is no such row.
func TestShowQuarantineNamesTheDelegateOfEachWrite(t *testing.T) {
	h := newHarness(t)
	code, out, errOut := h.run("show-quarantine", "q_2")
	if code != 0 || !regexp.MustCompile(`(?m)^delegate +- +consumer \(dlg_1\)$`).MatchString(out) {
		t.Fatalf("show-quarantine of a delegate's accepted write: %d %s\n%s", code, errOut, out)
	}
	code, out, errOut = h.run("show-quarantine", "q_3")
	if code != 0 || !regexp.MustCompile(`(?m)^delegate +consumer-2 \(dlg_2\) +-$`).MatchString(out) {
		t.Fatalf("show-quarantine of a delegate's refused write: %d %s\n%s", code, errOut, out)
	}
	if _, out, _ := h.run("show-quarantine", "q_1"); strings.Contains(out, "delegate") {
		t.Fatalf("show-quarantine of the owner's writes names a delegate:\n%s", out)
	}
}

func TestBindingAndUnbindCallTheAdminRoutes(t *testing.T) {
	h := newHarness(t)
	if code, out, errOut := h.run("binding", "bucket/jobs/a"); code != 0 || !strings.Contains(out, `"resource":"bucket/jobs"`) {
		t.Fatalf("binding: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := h.run("unbind", "bucket/jobs/a"); code != 0 || !strings.Contains(out, "cleared") {
		t.Fatalf("unbind: %d %q %q", code, out, errOut)
	}
	if code, _, _ := h.run("unbind", "nokey"); code != 2 {
		t.Fatalf("unbind without a key exits %d, want 2", code)
	}
	if got := strings.Join(h.fake.bindingCalls, ","); got != "GET,DELETE" {
		t.Fatalf("binding requests %s", got)
	}
}

// Rule: delegate refuses segments below the lease file's next one (the
// lease's own, written or in doubt), as the Go client's Lease.Delegate does:
// owner and delegate never share a number.
func TestDelegateRefusesTheLeasesOwnSegments(t *testing.T) {
	h := newHarness(t)
	if code, out, errOut := h.run("acquire", "bucket/jobs", "--ttl", "10s", "--operation", "op-1"); code != 0 {
		t.Fatalf("acquire: %d\n%s%s", code, out, errOut)
	}
	file := h.bodyFile()
	if code, out, errOut := h.run("put", "bucket/jobs/a", file); code != 0 {
		t.Fatalf("put: %d\n%s%s", code, out, errOut)
	}
	before := h.snapshotLease(t)
	for _, segs := range []string{"1-3", "4,1", "3-4"} {
		code, _, errOut := h.run("delegate", "consumer", "--segments", segs)
		if code != exitRefused || !strings.Contains(errOut, "INVALID_REQUEST") || !strings.Contains(errOut, "from 2 on") {
			t.Fatalf("delegate --segments %s: exit %d\n%s", segs, code, errOut)
		}
		h.leaseUnchanged(t, before, "delegate --segments "+segs) // its next segment still 2
	}
	if n := h.numbering().NextSegment; n != 2 {
		t.Fatalf("the lease file's next segment is %d, want 2", n)
	}
}
