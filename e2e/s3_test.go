package e2e

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	fs3 "github.com/fencegate/fencegate/backends/s3"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/testenv"
)

// s3Bucket is the test S3 server seen from a test: a fresh key prefix in the
// test bucket, emptied when the test ends, and a client for direct reads.
type s3Bucket struct {
	srv    testenv.S3
	prefix string
	client *s3.Client
}

func newS3Bucket(t *testing.T) *s3Bucket {
	t.Helper()
	srv := testenv.S3Server(t)
	b := &s3Bucket{srv: srv, prefix: testenv.RandomName("e2e_"), client: s3.New(s3.Options{
		Region:       srv.Region,
		BaseEndpoint: aws.String(srv.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
	})}
	t.Cleanup(func() { b.empty(t) })
	return b
}

// storeURL is the --store URL of the prefix, through endpoint (the server's
// own endpoint when "").
func (b *s3Bucket) storeURL(endpoint string) string {
	if endpoint == "" {
		endpoint = b.srv.Endpoint
	}
	q := url.Values{"endpoint": {endpoint}, "region": {b.srv.Region}, "pathStyle": {"true"}}
	return "s3://" + b.srv.Bucket + "/" + b.prefix + "?" + q.Encode()
}

// env gives the gateway process the test server's credentials through the
// SDK's default chain, and nothing from the machine's own AWS configuration.
func (b *s3Bucket) env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + b.srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + b.srv.SecretKey,
		"AWS_SESSION_TOKEN=", "AWS_PROFILE=", "AWS_REGION=", "AWS_DEFAULT_REGION=",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true",
	}
}

// head reads an object's description directly from S3; nil if it does not exist.
func (b *s3Bucket) head(t *testing.T, key string) *s3.HeadObjectOutput {
	t.Helper()
	out, err := b.client.HeadObject(context.Background(), &s3.HeadObjectInput{
		Bucket: aws.String(b.srv.Bucket), Key: aws.String(b.prefix + "/" + key)})
	var nf *types.NotFound
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		t.Fatalf("S3 HEAD %s: %v", key, err)
	}
	return out
}

// get reads an object's bytes directly from S3.
func (b *s3Bucket) get(t *testing.T, key string) string {
	t.Helper()
	out, err := b.client.GetObject(context.Background(), &s3.GetObjectInput{
		Bucket: aws.String(b.srv.Bucket), Key: aws.String(b.prefix + "/" + key)})
	if err != nil {
		t.Fatalf("S3 GET %s: %v", key, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// empty deletes every object under the prefix.
func (b *s3Bucket) empty(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := s3.NewListObjectsV2Paginator(b.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(b.srv.Bucket), Prefix: aws.String(b.prefix + "/")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Logf("cleanup: list %s: %v", b.prefix, err)
			return
		}
		for _, o := range page.Contents {
			if _, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.srv.Bucket), Key: o.Key}); err != nil {
				t.Logf("cleanup: delete %s: %v", aws.ToString(o.Key), err)
			}
		}
	}
}

// receipt is the JSON receipt the gateway answers with.
type receipt struct {
	ID            string    `json:"receiptId"`
	Resource      string    `json:"resource"`
	Target        string    `json:"target"`
	FenceToken    uint64    `json:"fenceToken"`
	Segment       uint64    `json:"segment"`
	OperationID   string    `json:"operationId"`
	OperationRoot string    `json:"operationRoot"`
	PayloadDigest string    `json:"payloadDigest"`
	State         string    `json:"state"`
	Version       string    `json:"version"`
	CreatedAt     time.Time `json:"createdAt"`
}

func receiptOf(t *testing.T, a answer) receipt {
	t.Helper()
	var r receipt
	if err := json.Unmarshal(a.body, &r); err != nil || r.ID == "" {
		t.Fatalf("not a receipt (%d): %s", a.status, a.body)
	}
	return r
}

// receiptsByOperation lists GET /v1/receipts?operationId=op.
func (p *gatewayProc) receiptsByOperation(t *testing.T, token, op string) []receipt {
	t.Helper()
	a := p.do(t, "GET", "/v1/receipts?operationId="+url.QueryEscape(op), token, nil, "")
	var list struct {
		Receipts []receipt `json:"receipts"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &list) != nil {
		t.Fatalf("receipts of %s: %d %s", op, a.status, a.body)
	}
	return list.Receipts
}

func sha256Digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// requireEffectMeta checks that the object's own metadata (read straight from
// S3) describes the effect of receipt r.
func requireEffectMeta(t *testing.T, md map[string]string, r receipt) {
	t.Helper()
	want := map[string]string{
		"fence-token": fmt.Sprint(r.FenceToken), "fence-segment": fmt.Sprint(r.Segment),
		"fence-root": r.OperationRoot, "fence-operation-id": r.OperationID,
		"fence-payload-digest": r.PayloadDigest, "fence-receipt-id": r.ID,
	}
	for k, v := range want {
		if md[k] != v || v == "" {
			t.Fatalf("S3 metadata %s = %q, want %q (metadata %v)", k, md[k], v, md)
		}
	}
}

// TestS3FencedFlowThroughTheBinary runs the quickstart flow on an S3 store
// (versitygw) configured with --store, reads objects and receipts back over
// REST, and reads the objects straight from S3: each one describes its effect
// in its metadata, and a refused late write leaves nothing in the bucket.
func TestS3FencedFlowThroughTheBinary(t *testing.T) {
	b := newS3Bucket(t)
	p := startGatewayEnv(t, b.env(), "dev", "--data-dir", t.TempDir(),
		"--identity", "worker-a=token-a", "--identity", "worker-b=token-b", "--store", "s3a="+b.storeURL(""))

	a := p.acquire(t, "token-a", "s3a/inv/7", "a-1", "invoice-7", 500)
	var firstA receipt
	for seg, body := range []string{"A part 1", "A part 2"} {
		r := p.put(t, "token-a", a, fmt.Sprintf("s3a/inv/7/part-%d", seg+1), seg+1, body)
		if r.status != http.StatusOK || r.str("state") != "COMMITTED" {
			t.Fatalf("A segment %d: %d %s", seg+1, r.status, r.body)
		}
		rc := receiptOf(t, r)
		if rc.PayloadDigest != sha256Digest(body) || r.header.Get("Fence-Receipt") != rc.ID {
			t.Fatalf("A segment %d receipt %+v (Fence-Receipt %q)", seg+1, rc, r.header.Get("Fence-Receipt"))
		}
		if seg == 0 {
			firstA = rc
		}
	}
	// A's object as S3 itself keeps it: A's bytes, A's effect in the metadata.
	if got := b.get(t, "inv/7/part-1"); got != "A part 1" {
		t.Fatalf("S3 object inv/7/part-1 = %q", got)
	}
	h := b.head(t, "inv/7/part-1")
	requireEffectMeta(t, h.Metadata, firstA)
	if aws.ToString(h.ETag) != firstA.Version {
		t.Fatalf("S3 ETag %s, receipt version %s", aws.ToString(h.ETag), firstA.Version)
	}

	held := p.do(t, "POST", "/v1/leases", "token-b", nil, `{"resource":"s3a/inv/7","requestId":"b-0","ttlMs":5000,"operationId":"invoice-7"}`)
	wantCode(t, held, http.StatusConflict, "LEASE_HELD")
	time.Sleep(700 * time.Millisecond) // A pauses past its TTL
	bl := p.acquire(t, "token-b", "s3a/inv/7", "b-1", "invoice-7", 5000)
	if bl.fence <= a.fence {
		t.Fatalf("B's fence %d is not above A's %d", bl.fence, a.fence)
	}
	wb := p.put(t, "token-b", bl, "s3a/inv/7/part-1", 1, "B part 1")
	if wb.status != http.StatusOK {
		t.Fatalf("B write: %d %s", wb.status, wb.body)
	}
	rb := receiptOf(t, wb)
	late := p.put(t, "token-a", a, "s3a/inv/7/part-3", 3, "A part 3")
	wantCode(t, late, http.StatusConflict, "STALE_OWNER")
	if b.head(t, "inv/7/part-3") != nil {
		t.Fatal("the refused late write left an object in S3")
	}

	// Read back over REST.
	obj := p.do(t, "GET", "/v1/objects/s3a/inv/7/part-1", "token-a", nil, "")
	if string(obj.body) != "B part 1" || obj.header.Get("Fence-Token") != fmt.Sprint(bl.fence) ||
		obj.header.Get("Fence-Receipt") != rb.ID || obj.header.Get("ETag") != rb.Version {
		t.Fatalf("object over REST = %q %v, want B's bytes and receipt %+v", obj.body, obj.header, rb)
	}
	if got := p.do(t, "GET", "/v1/objects/s3a/inv/7/part-2", "token-b", nil, ""); string(got.body) != "A part 2" {
		t.Fatalf("part-2 over REST = %d %q", got.status, got.body)
	}
	// And straight from S3: B's bytes, B's effect.
	if got := b.get(t, "inv/7/part-1"); got != "B part 1" {
		t.Fatalf("S3 object inv/7/part-1 = %q", got)
	}
	requireEffectMeta(t, b.head(t, "inv/7/part-1").Metadata, rb)

	res := p.do(t, "GET", "/v1/resources/s3a/inv/7", "token-a", nil, "")
	if res.num("highestFence") != bl.fence || res.num("lastSegmentSeq") != 1 {
		t.Fatalf("resource state %s", res.body)
	}
	list := p.receiptsByOperation(t, "token-a", "invoice-7")
	if len(list) != 3 {
		t.Fatalf("want 3 receipts for invoice-7, got %+v", list)
	}
	for _, r := range list {
		if r.State != "COMMITTED" || r.Version == "" {
			t.Fatalf("receipt %+v is not committed with a version", r)
		}
	}
	one := p.do(t, "GET", "/v1/receipts/"+rb.ID, "token-a", nil, "")
	if got := receiptOf(t, one); got.ID != rb.ID || got.Version != rb.Version || got.Target != "objects/s3a/inv/7/part-1" {
		t.Fatalf("receipt by ID: %s", one.body)
	}
	at := p.do(t, "GET", fmt.Sprintf("/v1/receipts?resource=s3a/inv/7&fence=%d&segment=1", a.fence), "token-a", nil, "")
	if !strings.Contains(string(at.body), firstA.ID) {
		t.Fatalf("receipt at A's fence, segment 1: %s", at.body)
	}
}

// ignoringS3 is an S3 look-alike that stores objects but ignores If-Match and
// If-None-Match. It counts the conditional writes it let through.
type ignoringS3 struct {
	mu          sync.Mutex
	objects     map[string][]byte
	conditional int
}

func (f *ignoringS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, ok := f.objects[r.URL.Path]
	sum := md5.Sum(data)
	etag := `"` + hex.EncodeToString(sum[:]) + `"`
	switch r.Method {
	case http.MethodPut:
		if r.Header.Get("If-Match") != "" || r.Header.Get("If-None-Match") != "" {
			f.conditional++
		}
		body, _ := io.ReadAll(r.Body)
		f.objects[r.URL.Path] = body
		sum = md5.Sum(body)
		w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
		w.WriteHeader(http.StatusOK)
	case http.MethodGet, http.MethodHead:
		if !ok {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusNotFound)
			if r.Method == http.MethodGet {
				_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>none</Message></Error>`)
			}
			return
		}
		w.Header().Set("ETag", etag)
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(data)
		}
	case http.MethodDelete:
		delete(f.objects, r.URL.Path)
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusNotImplemented)
	}
}

// TestStoreIgnoringConditionsIsRefusedAtStart starts the binary with a store
// whose server ignores conditional headers: the start-up probe finds out and
// the gateway exits non-zero naming the store, before it ever serves.
func TestStoreIgnoringConditionsIsRefusedAtStart(t *testing.T) {
	fake := &ignoringS3{objects: map[string][]byte{}}
	srv := httptest.NewServer(fake)
	defer srv.Close()

	addr := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	storeURL := "s3://b/p?endpoint=" + url.QueryEscape(srv.URL) + "&region=us-east-1&pathStyle=true"
	cmd := exec.CommandContext(ctx, binary(t), "dev", "--data-dir", t.TempDir(), "--addr", addr,
		"--identity", "worker-a=token-a", "--store", "bad="+storeURL)
	cmd.Env = append(cmd.Environ(), "AWS_ACCESS_KEY_ID=ak", "AWS_SECRET_ACCESS_KEY=sk", "AWS_SESSION_TOKEN=", "AWS_PROFILE=",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 || ctx.Err() != nil {
		t.Fatalf("gateway with a store ignoring conditions: err %v (ctx %v), want a non-zero exit:\n%s", err, ctx.Err(), out)
	}
	msg := string(out)
	if !strings.Contains(msg, `"bad"`) || !strings.Contains(msg, "If-None-Match") {
		t.Fatalf("exit message does not name the store %q and the missing capability:\n%s", "bad", msg)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.conditional == 0 {
		t.Fatalf("the probe never sent a conditional write; the refusal is for another reason:\n%s", msg)
	}
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("a refused gateway is serving on %s", addr)
	}
	t.Logf("refused with exit %d: %s", ee.ExitCode(), strings.TrimSpace(msg))
}

// TestS3ExampleConfigIsValid loads deploy/gateway.s3.yaml as the gateway
// does: it validates, and every S3 store URL in it parses.
func TestS3ExampleConfigIsValid(t *testing.T) {
	t.Setenv("FENCEGATE_TOKEN_BILLING", "example-token")
	cfg := config.Default()
	if err := config.Load("../deploy/gateway.s3.yaml", &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("deploy/gateway.s3.yaml: %v", err)
	}
	n := 0
	for name, raw := range cfg.Stores {
		if strings.HasPrefix(raw, "s3:") {
			n++
			if _, err := fs3.ParseURL(raw); err != nil {
				t.Errorf("store %s: %v", name, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("the example configures no S3 store")
	}
}
