package s3door_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Rule: a condition the front door cannot keep is refused, never dropped.
// DeleteObjects' per-key <ETag>, <LastModifiedTime> and <Size> (S3's
// conditional deletes) refuse the whole request as NotImplemented before
// any key is deleted, the unconditional keys beside them included; so does
// a conditional header on the batch, as on DeleteObject.
func TestDeleteObjectsRefusesAConditionItCannotKeep(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	for _, k := range []string{"r/k", "r/other"} {
		if err := put(c, k, "precious"); err != nil {
			t.Fatal(err)
		}
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("r/k")})
	if err != nil {
		t.Fatal(err)
	}
	before := e.fingerprint("b/r")
	for name, cond := range map[string]types.ObjectIdentifier{
		"an ETag that does not match": {ETag: aws.String(`"00000000000000000000000000000000"`)},
		"the object's own ETag":       {ETag: head.ETag},
		"a LastModifiedTime":          {LastModifiedTime: aws.Time(time.Now().Add(-time.Hour))},
		"a Size":                      {Size: aws.Int64(1)},
	} {
		cond.Key = aws.String("r/k")
		out, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("b"), Delete: &types.Delete{
			Objects: []types.ObjectIdentifier{{Key: aws.String("r/other")}, cond}}})
		if code, _, st := apiCode(t, err); code != "NotImplemented" || st != 501 {
			t.Errorf("DeleteObjects with %s: %s %d (%+v), want NotImplemented 501", name, code, st, out)
		}
	}
	doc := "<Delete><Object><Key>r/k</Key></Object></Delete>"
	for _, h := range []string{"If-Match", "If-None-Match"} {
		if st, out := e.send(t, "AKIDA", http.MethodPost, "/b?delete", map[string]string{h: `"00000000000000000000000000000000"`}, doc); st != 501 {
			t.Errorf("DeleteObjects with %s: %d %s, want 501", h, st, out)
		}
	}
	if e.fingerprint("b/r") != before {
		t.Fatalf("a refused conditional DeleteObjects changed state (deletes forwarded: %d)", e.store.deletes.Load())
	}
	for _, k := range []string{"r/k", "r/other"} {
		if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String(k)}); err != nil {
			t.Fatalf("%s after the refusals: %v", k, err)
		}
	}
}

// Rule: CompleteMultipartUpload's If-None-Match and If-Match are refused
// as PutObject's are (NotImplemented), before anything is admitted: the
// object stays as it was, no segment is spent, the staged parts stay, and
// the upload completes once sent without the condition.
func TestCompleteMultipartUploadRefusesAConditionItCannotKeep(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	if err := put(c, "r/k", "precious"); err != nil {
		t.Fatal(err)
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("r/k")})
	if err != nil {
		t.Fatal(err)
	}
	id, parts := upload(t, c, "r/k", []byte("new bytes"), "", "")
	staged := e.filesUnder("s3-uploads")
	before := e.fingerprint("b/r")
	for name, in := range map[string]*s3.CompleteMultipartUploadInput{
		"If-None-Match: *":    {IfNoneMatch: aws.String("*")},
		"a wrong If-Match":    {IfMatch: aws.String(`"deadbeef"`)},
		"a matching If-Match": {IfMatch: head.ETag},
	} {
		in.Bucket, in.Key, in.UploadId = aws.String("b"), aws.String("r/k"), id
		in.MultipartUpload = &types.CompletedMultipartUpload{Parts: parts}
		_, err := c.CompleteMultipartUpload(ctx, in)
		if code, _, st := apiCode(t, err); code != "NotImplemented" || st != 501 {
			t.Errorf("Complete with %s: %s %d, want NotImplemented 501", name, code, st)
		}
	}
	if e.fingerprint("b/r") != before || e.filesUnder("s3-uploads") != staged {
		t.Fatal("a refused conditional Complete changed state")
	}
	g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("r/k")})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(g.Body); string(b) != "precious" {
		t.Fatalf("object after the refusals: %q", b)
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/k"),
		UploadId: id, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		t.Fatalf("the upload without a condition: %v", err)
	}
}
