package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/fencegate/fencegate"
)

// putCounter is a reverse proxy in front of an S3 server that counts the PUT
// requests reaching each path: how many times an object was written.
type putCounter struct {
	mu   sync.Mutex
	puts map[string]int
}

func countingProxy(t *testing.T, target string) (*httptest.Server, *putCounter) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	c := &putCounter{puts: map[string]int{}}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(u)
		pr.Out.Host = pr.In.Host // the request is signed for the host the client dialled
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			c.mu.Lock()
			c.puts[r.URL.Path]++
			c.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, c
}

func (c *putCounter) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts[path]
}

// crashStore is a store the crash test runs on.
type crashStore struct {
	name  string   // store name, the first segment of resources
	flags []string // extra gateway flags
	env   []string // extra gateway environment
	// inspect reads the object as the store keeps it: its ETag, the receipt
	// ID in its metadata, and how many writes reached it (-1 if not counted).
	inspect func(t *testing.T, p *gatewayProc, key string) (etag, receiptID string, writes int)
}

// TestCrashBetweenEffectAndReceiptIsSettledAfterRestart kills the gateway
// (FENCEGATE_FAILPOINT=after-effect: exit 3 after the store write returned,
// before the receipt settled), reads the fence store raw (the one receipt
// PENDING), restarts the gateway on the same data directory, and shows that
// the reconciler settles the orphaned receipt as COMMITTED from the object's
// own metadata (its log line for the receipt, awaited before anything reads
// the receipt through the gateway, whose reads prove it on the spot), that the object was written exactly once (a replay of
// the segment returns the original receipt and writes nothing), and that the
// resource takes the next segment again.
func TestCrashBetweenEffectAndReceiptIsSettledAfterRestart(t *testing.T) {
	t.Run("s3", func(t *testing.T) {
		b := newS3Bucket(t)
		proxy, counter := countingProxy(t, b.srv.Endpoint)
		crashAndSettle(t, crashStore{
			name: "s3a", flags: []string{"--store", "s3a=" + b.storeURL(proxy.URL)}, env: b.env(),
			inspect: func(t *testing.T, _ *gatewayProc, key string) (string, string, int) {
				h := b.head(t, key)
				if h == nil {
					t.Fatalf("S3 object %s does not exist", key)
				}
				return aws.ToString(h.ETag), h.Metadata["fence-receipt-id"],
					counter.count("/" + b.srv.Bucket + "/" + b.prefix + "/" + key)
			},
		})
	})
	t.Run("local", func(t *testing.T) {
		// The local store's ETag carries a random write ID: an unchanged ETag
		// means the object was not written again, even with the same bytes.
		crashAndSettle(t, crashStore{
			name: "local",
			inspect: func(t *testing.T, p *gatewayProc, key string) (string, string, int) {
				if p == nil {
					return "", "", -1 // no gateway to read through while it is down
				}
				h := p.do(t, "HEAD", "/v1/objects/local/"+key, "token-a", nil, "")
				if h.status != http.StatusOK {
					t.Fatalf("HEAD local/%s: %d", key, h.status)
				}
				return h.header.Get("ETag"), h.header.Get("Fence-Receipt"), -1
			},
		})
	})
}

func crashAndSettle(t *testing.T, cs crashStore) {
	const (
		op          = "crash-op"
		token       = "token-a"
		body1       = "written before the crash"
		body2       = "written after the restart"
		storeKey    = "crash/doc"
		settleLimit = 30 * time.Second
	)
	resource, object := cs.name+"/crash", cs.name+"/"+storeKey
	dataDir := t.TempDir()
	args := append([]string{"dev", "--data-dir", dataDir, "--identity", "worker-a=" + token}, cs.flags...)

	// 1. The write reaches the store, then the process dies before the receipt settles.
	p1 := startGatewayEnv(t, append(append([]string{}, cs.env...), "FENCEGATE_FAILPOINT=after-effect"), args...)
	l := p1.acquire(t, token, resource, "crash-1", op, 60_000)
	if a, err := p1.tryDo("PUT", "/v1/objects/"+object, token, fenceHeaders(l, 1), body1); err == nil {
		t.Fatalf("the write was answered (%d %s) although the gateway should have died after the effect", a.status, a.body)
	}
	if code := p1.waitExit(t, 30*time.Second); code != 3 {
		t.Fatalf("gateway exited with %d at the failpoint, want 3:\n%s", code, p1.logs.String())
	}
	etag0, rid0, writes0 := cs.inspect(t, nil, storeKey)
	if writes0 != -1 && (writes0 != 1 || etag0 == "" || rid0 == "") {
		t.Fatalf("after the crash the store shows ETag %q, receipt %q, %d writes; want one write", etag0, rid0, writes0)
	}
	// The fence store as the crash left it, read without a gateway: the one
	// receipt, PENDING.
	orphan := pendingReceiptOf(t, dataDir, resource)
	if rid0 != "" && rid0 != orphan {
		t.Fatalf("the object names receipt %q, the fence store holds %q", rid0, orphan)
	}

	// 2. Restart without the failpoint, with a reconciler that takes a PENDING
	// receipt as orphaned after a second.
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(cfg, []byte("effectTimeout: 500ms\nreconcile:\n  interval: 200ms\n  deadline: 15m\n  orphan: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nothing reads the receipt through the gateway until the reconciler has
	// settled it: a read would prove it from the object on the spot
	// (readStore) and hide whether the reconciler does. Its evidence is its
	// own log line for the receipt.
	p2 := startGatewayEnv(t, cs.env, append(args, "--config", cfg)...)
	how := waitReconciled(t, p2, orphan, settleLimit)
	t.Logf("receipt %s settled by the reconciler: %s", orphan, how)
	list := p2.receiptsByOperation(t, token, op)
	if len(list) != 1 {
		t.Fatalf("after the reconciler's settle: receipts %+v, want one", list)
	}
	settled := list[0]
	etag, rid, writes := cs.inspect(t, p2, storeKey)
	if settled.State != "COMMITTED" || settled.ID != rid || settled.Version != etag || settled.ID != orphan {
		t.Fatalf("settled receipt %+v; the store has ETag %q for receipt %q", settled, etag, rid)
	}
	if writes0 != -1 && (etag != etag0 || writes != 1) {
		t.Fatalf("the store shows ETag %q after %d writes; before the restart %q", etag, writes, etag0)
	}
	if unk := p2.do(t, "GET", "/v1/unknown", token, nil, ""); len(unk.json["receipts"].([]any)) != 0 {
		t.Fatalf("unknown receipts left: %s", unk.body)
	}

	// 3. The worker retries its segment: the original receipt, nothing written.
	st := p2.do(t, "GET", "/v1/leases/"+l.id, token, nil, "")
	if st.status != http.StatusOK || st.str("statusProof") == "" {
		t.Fatalf("lease status: %d %s", st.status, st.body)
	}
	l.status = st.str("statusProof")
	replay := p2.put(t, token, l, object, 1, body1)
	if replay.status != http.StatusOK || replay.header.Get("Fence-Replay") != "true" {
		t.Fatalf("replay of segment 1: %d %v %s", replay.status, replay.header, replay.body)
	}
	if r := receiptOf(t, replay); r.ID != settled.ID || r.State != "COMMITTED" || r.Version != etag {
		t.Fatalf("replay answered %+v, want the original receipt %+v", r, settled)
	}
	if e, _, w := cs.inspect(t, p2, storeKey); e != etag || (writes != -1 && w != writes) {
		t.Fatalf("the replay wrote the object again: ETag %q -> %q, writes %d -> %d", etag, e, writes, w)
	}
	if got := p2.do(t, "GET", "/v1/objects/"+object, token, nil, ""); string(got.body) != body1 {
		t.Fatalf("object = %q, want %q", got.body, body1)
	}

	// 4. The resource is writable again: the next segment chains on the settled version.
	next := p2.put(t, token, l, object, 2, body2)
	if next.status != http.StatusOK || next.str("state") != "COMMITTED" {
		t.Fatalf("segment 2 after the settlement: %d %s", next.status, next.body)
	}
	r2 := receiptOf(t, next)
	e2, rid2, w2 := cs.inspect(t, p2, storeKey)
	if rid2 != r2.ID || e2 != r2.Version || e2 == etag || (writes != -1 && w2 != writes+1) {
		t.Fatalf("after segment 2 the store shows ETag %q receipt %q (%d writes); receipt %+v", e2, rid2, w2, r2)
	}
	if got := p2.do(t, "GET", "/v1/objects/"+object, token, nil, ""); string(got.body) != body2 {
		t.Fatalf("object = %q, want %q", got.body, body2)
	}
	res := p2.do(t, "GET", "/v1/resources/"+resource, token, nil, "")
	if res.num("lastSegmentSeq") != 2 || res.num("highestFence") != l.fence || res.str("pendingReceipt") != "" {
		t.Fatalf("resource state %s", res.body)
	}
	if list := p2.receiptsByOperation(t, token, op); len(list) != 2 || list[0].State != "COMMITTED" || list[1].State != "COMMITTED" {
		t.Fatalf("receipts %+v, want two COMMITTED", list)
	}
}

// pendingReceiptOf reads the embedded fence store of a stopped gateway dev
// at dataDir and returns the ID of resource's one receipt, which must be
// PENDING.
func pendingReceiptOf(t *testing.T, dataDir, resource string) string {
	t.Helper()
	raw := rawEmbedded(t, dataDir, []string{resource})
	if len(raw.receipts) != 1 {
		t.Fatalf("after the crash the fence store holds receipts %v, want one", raw.receipts)
	}
	for id, row := range raw.receipts {
		if row["state"] != string(fencegate.ReceiptPending) {
			t.Fatalf("after the crash receipt %s is %v in the fence store, want PENDING", id, row["state"])
		}
		return id
	}
	panic("unreachable")
}

// waitReconciled polls p's log, until limit, for the reconciler's line that
// it settled receipt id COMMITTED: proven by its object while young
// ("reconciled: pending receipt proven committed by its object") or once
// orphaned ("reconciled", state COMMITTED). It returns the line.
func waitReconciled(t *testing.T, p *gatewayProc, id string, limit time.Duration) string {
	t.Helper()
	for deadline := time.Now().Add(limit); ; time.Sleep(100 * time.Millisecond) {
		for _, line := range strings.Split(p.logs.String(), "\n") {
			fields := " " + line + " " // text log lines: key=value, a value with spaces quoted
			if !strings.Contains(fields, " receipt="+id+" ") {
				continue
			}
			if strings.Contains(fields, ` msg="reconciled: pending receipt proven committed by its object" `) ||
				(strings.Contains(fields, " msg=reconciled ") && strings.Contains(fields, " state="+string(fencegate.ReceiptCommitted)+" ")) {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reconciler did not settle receipt %s within %s:\n%s", id, limit, p.logs.String())
		}
	}
}

// TestFailpointIsIgnoredOutsideDev: the crash tests' hook
// (FENCEGATE_FAILPOINT) arms only `gateway dev`; a `gateway serve` process
// with it in its environment says so and answers the write it would have
// died on, so a production process cannot be made to exit by its
// environment.
func TestFailpointIsIgnoredOutsideDev(t *testing.T) {
	regDir := t.TempDir()
	reg := startGateway(t, "dev", "--data-dir", regDir, "--identity", "worker-a=token-a")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	yml := fmt.Sprintf("dataDir: %s\ntrustBundle: %s\nstores: {local: \"local:\"}\nidentities: [{name: worker-a, token: token-a}]\naccess: {rules: [{identity: worker-a, lease: [local/fp]}]}\n",
		filepath.Join(dir, "data"), filepath.Join(regDir, "trust-bundle.json"))
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startGatewayEnv(t, []string{"FENCEGATE_FAILPOINT=after-effect"}, "serve", "--config", cfg)
	a := reg.acquire(t, "token-a", "local/fp/1", "fp-1", "op-fp", 60000)
	if r := gw.put(t, "token-a", a, "local/fp/1", 1, "one"); r.status != http.StatusOK {
		t.Fatalf("write at a serve process with FENCEGATE_FAILPOINT: %d %s\n%s", r.status, r.body, gw.logs.String())
	}
	if !strings.Contains(gw.logs.String(), "FENCEGATE_FAILPOINT is ignored outside gateway dev") {
		t.Fatalf("the ignored failpoint was not logged:\n%s", gw.logs.String())
	}
}
