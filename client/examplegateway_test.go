package client_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/domain"
)

// exampleGateway plays gateway and registry for the examples, on the routes
// and rules openapi/openapi.yaml describes, for one resource at a time: a
// grant's fence must not be below the highest fence the resource accepted
// (STALE_OWNER), segments of a grant are admitted in order
// (SEGMENT_OUT_OF_ORDER), the same segment sent again answers its receipt
// (Fence-Replay), refusals are application/problem+json with the stable
// code. It is not the gateway: e2e runs the client against the real one.
type exampleGateway struct {
	srv *httptest.Server

	mu       sync.Mutex
	fence    uint64            // last fence issued
	highest  map[string]uint64 // resource -> highest fence accepted
	leases   map[string]*exLease
	receipts []domain.Receipt
	applied  int // effects that reached the "backend"
	lose     bool
}

type exLease struct {
	info    domain.LeaseAnswer
	lastSeg uint64
}

func newExampleGateway() *exampleGateway {
	g := &exampleGateway{highest: map[string]uint64{}, leases: map[string]*exLease{}}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	return g
}

func (g *exampleGateway) URL() string { return g.srv.URL }
func (g *exampleGateway) Close()      { g.srv.Close() }

// Lapse ends every live lease as its TTL would.
func (g *exampleGateway) Lapse() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, l := range g.leases {
		if l.info.State == domain.StateHeld {
			l.info.State = domain.StateExpired
		}
	}
}

// LoseNextAnswer makes the next write reach the backend while its outcome
// stays unknown to the gateway (MUTATION_UNKNOWN, receipt UNKNOWN).
func (g *exampleGateway) LoseNextAnswer() { g.mu.Lock(); g.lose = true; g.mu.Unlock() }

// Reconcile settles UNKNOWN receipts as the reconciler would, having found
// the effects in the backend.
func (g *exampleGateway) Reconcile() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.receipts {
		if g.receipts[i].State == domain.ReceiptUnknown {
			g.receipts[i].State = domain.ReceiptCommitted
		}
	}
}

// Applied counts effects that reached the backend.
func (g *exampleGateway) Applied() int { g.mu.Lock(); defer g.mu.Unlock(); return g.applied }

func (g *exampleGateway) serve(w http.ResponseWriter, r *http.Request) {
	caller := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	g.mu.Lock()
	status, body := g.route(caller, r)
	g.mu.Unlock()
	if e, ok := body.(*domain.Error); ok {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "urn:fencegate:problem:" + strings.ToLower(string(e.Code)),
			"title": string(e.Code), "status": status, "code": e.Code, "detail": e.Message, "receiptId": e.ReceiptID})
		return
	}
	if rc, ok := body.(receiptAnswer); ok {
		w.Header().Set("Fence-Receipt", rc.ID)
		if rc.replay {
			w.Header().Set("Fence-Replay", "true")
		}
		body = rc.body
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

type receiptAnswer struct {
	domain.Receipt
	body   any
	replay bool
}

func refuse(status int, code domain.Code, msg string) (int, any) {
	return status, &domain.Error{Code: code, Message: msg}
}

func (g *exampleGateway) route(caller string, r *http.Request) (int, any) {
	p := r.URL.Path
	switch {
	case p == "/v1/leases" && r.Method == http.MethodPost:
		var b domain.LeaseRequest
		_ = json.NewDecoder(r.Body).Decode(&b)
		for _, l := range g.leases {
			if l.info.Resource == b.Resource && l.info.State == domain.StateHeld {
				if l.info.RequestID == b.RequestID {
					return http.StatusOK, l.info
				}
				return refuse(http.StatusConflict, domain.CodeResourceBusy, "resource is leased")
			}
		}
		g.fence++
		exp := time.Now().Add(time.Minute)
		id := "L" + strconv.FormatUint(g.fence, 10)
		l := &exLease{info: domain.LeaseAnswer{Lease: id, Resource: b.Resource, Owner: caller, RequestID: b.RequestID,
			FenceToken: g.fence, OperationID: b.OperationID, OperationRoot: b.OperationID, State: domain.StateHeld,
			ExpiresAt: time.Now().Add(time.Duration(b.TTLMs) * time.Millisecond), Grant: "grant-" + id,
			GrantDigest: "sha256:" + id, StatusProof: "proof-" + id, StatusExpiresAt: &exp}}
		g.leases[id] = l
		return http.StatusCreated, l.info
	case strings.HasPrefix(p, "/v1/leases/") && strings.HasSuffix(p, "/delegations"):
		l := g.leases[strings.Split(p, "/")[3]]
		var b domain.DelegationRequest
		_ = json.NewDecoder(r.Body).Decode(&b)
		if l == nil || l.info.Owner != caller || l.info.State != domain.StateHeld {
			return refuse(http.StatusConflict, domain.CodeLeaseNotHeld, "only the holder of a live lease delegates")
		}
		d := domain.Delegation{Schema: domain.DelegationSchema, ID: "D-" + l.info.Lease, GrantDigest: l.info.GrantDigest,
			Resource: l.info.Resource, Lease: l.info.Lease, Owner: caller, Delegate: b.Delegate, FenceToken: l.info.FenceToken,
			OperationRoot: l.info.OperationRoot, SegmentFrom: b.SegmentFrom, SegmentTo: b.SegmentTo, IssuerEpoch: 1, IssuedAt: time.Now().Unix()}
		claims, _ := json.Marshal(d)
		tok := "eyJhbGciOiJFZERTQSJ9." + base64.RawURLEncoding.EncodeToString(claims) + ".sig"
		return http.StatusCreated, domain.DelegationAnswer{ID: d.ID, Delegation: tok, Claims: d}
	case strings.HasPrefix(p, "/v1/delegations/") && strings.HasSuffix(p, "/status"):
		l := g.leases[strings.TrimPrefix(strings.Split(p, "/")[3], "D-")]
		exp := time.Now().Add(time.Minute)
		return http.StatusOK, domain.DelegationStatusAnswer{StatusProof: "dproof", State: l.info.State, StatusExpiresAt: exp}
	case strings.HasPrefix(p, "/v1/leases/") && r.Method == http.MethodDelete:
		l := g.leases[strings.TrimPrefix(p, "/v1/leases/")]
		l.info.State = domain.StateReleased
		return http.StatusOK, l.info
	case strings.HasPrefix(p, "/v1/leases/"):
		return http.StatusOK, g.leases[strings.TrimPrefix(p, "/v1/leases/")].info
	case p == "/v1/receipts":
		var out []domain.Receipt
		for _, rc := range g.receipts {
			if rc.OperationID == r.URL.Query().Get("operationId") {
				out = append(out, rc)
			}
		}
		return http.StatusOK, domain.ReceiptPage{Receipts: out}
	case strings.HasPrefix(p, "/v1/objects/"), strings.HasPrefix(p, "/v1/apis/"):
		return g.write(caller, r)
	}
	return refuse(http.StatusNotFound, domain.CodeNotFound, "no such route in the example gateway")
}

// write applies the fence and segment rules to a fenced write.
func (g *exampleGateway) write(caller string, r *http.Request) (int, any) {
	var l *exLease
	for _, c := range g.leases {
		if c.info.Grant == r.Header.Get("Fence-Grant") {
			l = c
		}
	}
	if l == nil {
		return refuse(http.StatusUnauthorized, domain.CodeGrantInvalid, "unknown grant")
	}
	seg, _ := strconv.ParseUint(r.Header.Get("Fence-Segment"), 10, 64)
	if tok := r.Header.Get("Fence-Delegation"); tok != "" {
		var d domain.Delegation
		b, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
		_ = json.Unmarshal(b, &d)
		// The order and codes of the Fence-Delegation parameter in openapi.yaml.
		if d.GrantDigest != l.info.GrantDigest {
			return refuse(http.StatusForbidden, domain.CodeDelegationInvalid, "delegation is bound to another grant")
		}
		if d.Delegate != caller {
			return refuse(http.StatusForbidden, domain.CodeOwnerMismatch, "caller is not the delegation's delegate")
		}
		if seg < d.SegmentFrom || seg > d.SegmentTo {
			return refuse(http.StatusForbidden, domain.CodeDelegationInvalid, "delegation does not cover this segment")
		}
	} else if caller != l.info.Owner {
		return refuse(http.StatusForbidden, domain.CodeOwnerMismatch, "caller is not the grant's owner")
	}
	res := l.info.Resource
	if l.info.FenceToken < g.highest[res] {
		return refuse(http.StatusConflict, domain.CodeStaleOwner, fmt.Sprintf("fence %d is below the accepted fence %d", l.info.FenceToken, g.highest[res]))
	}
	body, _ := io.ReadAll(r.Body)
	for _, rc := range g.receipts {
		if rc.Lease == l.info.Lease && rc.Segment == seg {
			return http.StatusOK, receiptAnswer{Receipt: rc, body: rc, replay: true}
		}
	}
	if seg != l.lastSeg+1 {
		return refuse(http.StatusConflict, domain.CodeSegmentOutOfOrder, fmt.Sprintf("segment %d, want %d", seg, l.lastSeg+1))
	}
	if l.info.State != domain.StateHeld && r.Header.Get("Fence-Delegation") == "" {
		return refuse(http.StatusConflict, domain.CodeLeaseNotHeld, "lease is "+string(l.info.State))
	}
	l.lastSeg, g.highest[res] = seg, l.info.FenceToken
	g.applied++
	rc := domain.Receipt{ID: fmt.Sprintf("R%d", len(g.receipts)+1), Lease: l.info.Lease, FenceToken: l.info.FenceToken,
		Segment: seg, OperationID: l.info.OperationID, State: domain.ReceiptCommitted, Method: r.Method,
		Target: strings.TrimPrefix(r.URL.Path, "/v1/"), PayloadDigest: bodyDigest(body)} // as the gateway records them
	if g.lose {
		g.lose, rc.State = false, domain.ReceiptUnknown
		g.receipts = append(g.receipts, rc)
		return http.StatusBadGateway, &domain.Error{Code: domain.CodeMutationUnknown, Message: "the backend's answer was lost", ReceiptID: rc.ID}
	}
	g.receipts = append(g.receipts, rc)
	if strings.HasPrefix(r.URL.Path, "/v1/apis/") {
		return http.StatusOK, receiptAnswer{Receipt: rc, body: map[string]any{"id": "po_1", "request": string(body)}}
	}
	return http.StatusOK, receiptAnswer{Receipt: rc, body: rc}
}

// bodyDigest is the gateway's payload digest of a body: "sha256:<hex>".
func bodyDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
