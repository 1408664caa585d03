package s3door_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/fencestore/embedded"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs/prooftest"
	"github.com/fencegate/fencegate/s3door"
)

// countingStore counts the effects forwarded to an object store.
type countingStore struct {
	fencegate.ObjectStore
	puts, deletes atomic.Int64
}

func (c *countingStore) Put(ctx context.Context, req fencegate.PutRequest) (string, error) {
	c.puts.Add(1)
	return c.ObjectStore.Put(ctx, req)
}

func (c *countingStore) Delete(ctx context.Context, key, ifMatch string) error {
	c.deletes.Add(1)
	return c.ObjectStore.Delete(ctx, key, ifMatch)
}

func (c *countingStore) List(ctx context.Context, prefix, after string, limit int) ([]fencegate.ObjectInfo, bool, error) {
	return c.ObjectStore.(fencegate.ObjectLister).List(ctx, prefix, after, limit)
}

// env is a gateway on the embedded fence store with the S3 front door in
// front of a local-directory store named "b" (or the given store).
type env struct {
	t      *testing.T
	kit    *prooftest.Kit
	fences fencegate.FenceStore
	store  *countingStore
	creds  fencegate.StaticS3Credentials
	srv    *httptest.Server
	fence  uint64
	spool  string // the front door's spool directory
}

func newEnv(t *testing.T, st fencegate.ObjectStore) *env { return newEnvWith(t, st, false, nil) }

// newEnvWith is newEnv over TLS (where the SDK streams aws-chunked bodies
// with a trailing checksum) and with the front door's clock.
func newEnvWith(t *testing.T, st fencegate.ObjectStore, tls bool, now func() time.Time) *env {
	t.Helper()
	return newEnvServer(t, st, tls, now, nil)
}

// newEnvServer is newEnvWith with the front door's settings changed by set.
func newEnvServer(t *testing.T, st fencegate.ObjectStore, tls bool, now func() time.Time, set func(*s3door.Server)) *env {
	t.Helper()
	return newEnvModes(t, st, tls, now, set, nil)
}

// newEnvModes is newEnvServer with the gateway's enforcement modes (nil:
// enforce all).
func newEnvModes(t *testing.T, st fencegate.ObjectStore, tls bool, now func() time.Time, set func(*s3door.Server), modes *gateway.Modes) *env {
	t.Helper()
	kit := prooftest.New(t)
	kit.Set(time.Now())
	fs, err := embedded.Open(filepath.Join(t.TempDir(), "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs.Close() })
	if st == nil {
		if st, err = local.New("b", t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	gw, err := gateway.New(gateway.Config{Verifier: kit.Verifier(), Store: fs, Policy: gateway.StaticPolicy{Generation: 1}, Now: kit.Now, Modes: modes})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, kit: kit, fences: fs, store: &countingStore{ObjectStore: st}, creds: fencegate.StaticS3Credentials{}}
	srv := &s3door.Server{Gateway: gw, Stores: map[string]fencegate.ObjectStore{st.Name(): e.store},
		Credentials: e.creds, SpoolDir: t.TempDir(), MaxBody: 256 << 20, Now: now}
	if set != nil {
		set(srv)
	}
	e.spool = srv.SpoolDir
	door := s3door.Router(srv)
	// Answers to a request with a body say "Connection: close", as the
	// gateway's guardBodies (handlers/limits.go) in front of the door makes
	// them until the body is read: a client still sending the body of a
	// request refused before it was read then reads the answer (net/http
	// half-closes and waits before it resets), and one that asked "Expect:
	// 100-continue" never sends it.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			w.Header().Set("Connection", "close")
		}
		door.ServeHTTP(w, r)
	})
	if tls {
		e.srv = httptest.NewTLSServer(h)
	} else {
		e.srv = httptest.NewServer(h)
	}
	t.Cleanup(e.srv.Close)
	return e
}

// lease mints a credential for a new lease on resource owned by owner, at
// the next fence.
func (e *env) lease(akid, owner, resource string) fencegate.S3Credential {
	e.fence++
	fence := e.fence
	tok, vg := e.kit.VerifiedGrant(func(g *fencegate.Grant) {
		g.Resource, g.Owner, g.FenceToken = resource, owner, fence
		g.Lease = "lease-" + strconv.FormatUint(fence, 10)
		g.OperationRoot = "root-" + strconv.FormatUint(fence, 10)
		g.OperationID = "op-s3"
	})
	c := fencegate.S3Credential{AccessKeyID: akid, SecretAccessKey: "secret-" + akid, Identity: owner,
		Grant: tok, Status: e.kit.Status(vg, nil), Lease: vg.Lease, Resource: resource}
	e.creds[akid] = c
	return c
}

// client is aws-sdk-go-v2's S3 client for a credential, path-style against the front door.
func (e *env) client(c fencegate.S3Credential, opts ...func(*s3.Options)) *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(e.srv.URL),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken),
		HTTPClient:   e.srv.Client(),
	}, opts...)
}

var typesTagging = types.Tagging{TagSet: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}}
