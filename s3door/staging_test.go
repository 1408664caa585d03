package s3door_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/s3door"
)

// filesUnder counts the files under dir of the front door's spool ("" the
// whole spool: staged parts and bodies being read; "s3-uploads" the staged
// parts).
func (e *env) filesUnder(dir string) int {
	n := 0
	_ = filepath.WalkDir(filepath.Join(e.spool, dir), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

func TestAnotherLeasesCredentialCannotTouchAnUpload(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	a := e.client(e.lease("AKIDA", owner, "b/r"))
	b := e.client(e.lease("AKIDB", owner, "b/r")) // the same workload, another lease
	id, parts := upload(t, a, "r/k", []byte("staged by lease A"), "", "")
	bk, k := aws.String("b"), aws.String("r/k")
	errs := map[string]error{}
	_, errs["UploadPart"] = b.UploadPart(ctx, &s3.UploadPartInput{Bucket: bk, Key: k, UploadId: id, PartNumber: aws.Int32(1),
		Body: strings.NewReader("lease B's bytes")})
	_, errs["ListParts"] = b.ListParts(ctx, &s3.ListPartsInput{Bucket: bk, Key: k, UploadId: id})
	_, errs["CompleteMultipartUpload"] = b.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: bk, Key: k,
		UploadId: id, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	_, errs["AbortMultipartUpload"] = b.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: bk, Key: k, UploadId: id})
	for op, err := range errs {
		if code, _, _ := apiCode(t, err); code != "NoSuchUpload" {
			t.Errorf("%s of lease A's upload with lease B's credential: %s, want NoSuchUpload", op, code)
		}
	}
	lp, err := a.ListParts(ctx, &s3.ListPartsInput{Bucket: bk, Key: k, UploadId: id})
	if err != nil || len(lp.Parts) != 1 || aws.ToString(lp.Parts[0].ETag) != aws.ToString(parts[0].ETag) {
		t.Fatalf("lease A's upload after B's attempts: %+v %v", lp, err)
	}
	if e.store.puts.Load() != 0 {
		t.Fatal("something reached the store")
	}
}

func TestARefusedPartLeavesTheStagedPartAsItWas(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	first := []byte("the first part's bytes")
	id, parts := upload(t, c, "r/k", first, types.ChecksumAlgorithmCrc32, "")
	_, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("r/k"), UploadId: id,
		PartNumber: aws.Int32(1), Body: strings.NewReader("other bytes, another algorithm"), ChecksumAlgorithm: types.ChecksumAlgorithmSha256})
	if code, _, _ := apiCode(t, err); code != "InvalidRequest" {
		t.Fatalf("a part of another checksum algorithm: %s", code)
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/k"),
		UploadId: id, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("r/k")})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	_, _ = got.ReadFrom(out.Body)
	out.Body.Close()
	if got.String() != string(first) {
		t.Fatalf("the object is %q, want the accepted part %q", got.String(), first)
	}
}

func TestOpenUploadsAreBoundedPerCredentialAndForgottenWhenIdle(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnvWith(t, nil, false, clock)
	ctx := context.Background()
	cred := e.lease("AKIDA", owner, "b/r")
	c := e.client(cred)
	create := func(c *s3.Client, key ...string) (*string, error) {
		out, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String(append(key, "r/k")[0])})
		if err != nil {
			return nil, err
		}
		return out.UploadId, nil
	}
	var first *string
	for i := range s3door.MaxOpenUploads {
		id, err := create(c)
		if err != nil {
			t.Fatalf("upload %d: %v", i+1, err)
		}
		if i == 0 {
			first = id
			if _, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("r/k"), UploadId: id,
				PartNumber: aws.Int32(1), Body: strings.NewReader("part")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := create(c); err == nil {
		t.Fatal("one upload more than MaxOpenUploads was opened")
	} else if code, _, _ := apiCode(t, err); code != "TooManyUploads" {
		t.Fatalf("one upload too many: %s", code)
	}
	if _, err := create(e.client(e.lease("AKIDB", owner, "b/other")), "other/k"); err != nil {
		t.Fatalf("another credential is not bounded by A's uploads: %v", err)
	}
	if e.filesUnder("s3-uploads") != 1 {
		t.Fatalf("staged files: %d", e.filesUnder("s3-uploads"))
	}
	mu.Lock()
	now = now.Add(s3door.UploadIdle + time.Minute)
	mu.Unlock()
	e.kit.Set(now)
	e.lease("AKIDC", owner, "b/r") // a lease with a proof fresh at the new time
	if code, out := e.sendAt(t, "AKIDC", "POST", "/b/r/k?uploads", nil, "", now); code != 200 {
		t.Fatalf("an upload after the others went idle: %d %s", code, out)
	}
	if code, out := e.sendAt(t, "AKIDA", "GET", "/b/r/k?uploadId="+aws.ToString(first), nil, "", now); code != 404 || !strings.Contains(out, "NoSuchUpload") {
		t.Fatalf("an idle upload: %d %s", code, out)
	}
	if e.filesUnder("s3-uploads") != 0 {
		t.Fatalf("an idle upload's parts are still staged: %d files", e.filesUnder("s3-uploads"))
	}
}

func TestAnUploadsStagedPartsAreBoundedByMaxBody(t *testing.T) {
	e := newEnvServer(t, nil, false, nil, func(s *s3door.Server) { s.MaxBody = 10 << 20 })
	ctx := context.Background()
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	part := bytes.Repeat([]byte("x"), 6<<20)
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/k")})
	if err != nil {
		t.Fatal(err)
	}
	send := func(n int32) error {
		_, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("r/k"), UploadId: up.UploadId,
			PartNumber: aws.Int32(n), Body: bytes.NewReader(part)})
		return err
	}
	if err := send(1); err != nil {
		t.Fatal(err)
	}
	if err := send(1); err != nil { // a part sent again replaces itself: still within the bound
		t.Fatalf("part 1 again: %v", err)
	}
	if code, _, _ := apiCode(t, send(2)); code != "EntityTooLarge" {
		t.Fatalf("parts beyond MaxBody: %s", code)
	}
	if e.filesUnder("s3-uploads") != 1 {
		t.Fatalf("staged files: %d", e.filesUnder("s3-uploads"))
	}
}

func TestAnOversizedXMLDocumentIsRefusedWholeAndNothingDeleted(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	if err := put(c, "r/k", "keep me"); err != nil {
		t.Fatal(err)
	}
	before := e.fingerprint("b/r")
	doc := "<Delete><Object><Key>r/k</Key></Object></Delete>" + strings.Repeat(" ", 5<<20)
	code, body := e.send(t, "AKIDA", "POST", "/b?delete", nil, doc)
	if code != 400 || !strings.Contains(body, "MalformedXML") {
		t.Fatalf("a 5 MiB DeleteObjects document: %d %s", code, body)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("the oversized document deleted something")
	}
}

// send sends one request signed by the SDK's signer under akid's secret,
// with the body's SHA-256 as its signed payload hash.
func (e *env) send(t *testing.T, akid, method, path string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	return e.sendAt(t, akid, method, path, hdr, body, time.Now())
}

// sendAt is send signed at the given time.
func (e *env) sendAt(t *testing.T, akid, method, path string, hdr map[string]string, body string, at time.Time) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	sum := sha256.Sum256([]byte(body))
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(),
		aws.Credentials{AccessKeyID: akid, SecretAccessKey: e.creds[akid].SecretAccessKey}, req, hash, "s3", "us-east-1", at)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestPartsAPreviousProcessStagedAreRemovedAtStart(t *testing.T) {
	var old string
	e := newEnvServer(t, nil, false, nil, func(s *s3door.Server) {
		old = filepath.Join(s.SpoolDir, "s3-uploads", "mpu_before_restart", "1")
		if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(old, []byte("forgotten part"), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("a part staged before the restart is still there: %v", err)
	}
	if e.filesUnder("s3-uploads") != 0 {
		t.Fatal("staged files left")
	}
}
