package s3door_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/s3door"
)

// Rule: a ranged GET whose If-Range names an older version of the object
// answers the whole object as it is now (200), not a slice of it a
// resuming download would join to the old bytes; one naming the current
// ETag answers the range.
func TestIfRangeOfAnOlderVersionAnswersTheWholeObject(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	old, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/k"), Body: strings.NewReader("old-old-old")})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/k"), Body: strings.NewReader("new-new-new")})
	if err != nil {
		t.Fatal(err)
	}
	get := func(ifRange string) (int, string) {
		return e.send(t, "AKIDA", http.MethodGet, "/b/r/k", map[string]string{"Range": "bytes=4-", "If-Range": ifRange}, "")
	}
	if code, body := get(aws.ToString(old.ETag)); code != http.StatusOK || body != "new-new-new" {
		t.Fatalf("If-Range of the older ETag: %d %q, want 200 and the whole object", code, body)
	}
	if code, body := get(aws.ToString(cur.ETag)); code != http.StatusPartialContent || body != "new-new" {
		t.Fatalf("If-Range of the current ETag: %d %q, want 206 and the range", code, body)
	}
}

// Rule: a completed multipart upload leaves nothing in the spool: its
// parts and its staging directory go at completion.
func TestACompletedUploadLeavesNothingStaged(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/big")})
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("r/big"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: strings.NewReader("staged")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/big"),
		UploadId: up.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.spool, "s3-uploads", aws.ToString(up.UploadId))); !os.IsNotExist(err) {
		t.Fatalf("the completed upload's staging directory is still there: %v", err)
	}
}

// Rule: If-Range holds only for the object's ETag, quoted or not; a date
// never holds (a key may be written twice within one Last-Modified second),
// so a resume by date gets the whole object.
func TestIfRangeHoldsOnlyForTheCurrentETag(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	cur, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/k"), Body: strings.NewReader("new-new-new")})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("r/k")})
	if err != nil {
		t.Fatal(err)
	}
	for v, want := range map[string]int{
		strings.Trim(aws.ToString(cur.ETag), `"`):                http.StatusPartialContent,
		"W/" + aws.ToString(cur.ETag):                            http.StatusOK,
		aws.ToTime(h.LastModified).UTC().Format(http.TimeFormat): http.StatusOK,
	} {
		if code, _ := e.send(t, "AKIDA", http.MethodGet, "/b/r/k", map[string]string{"Range": "bytes=4-", "If-Range": v}, ""); code != want {
			t.Fatalf("If-Range %q: %d, want %d", v, code, want)
		}
	}
}

// Rule: one workload identity holds at most MaxOpenUploadsPerIdentity open
// uploads over all its leases, so another identity can still begin one
// (the process bound is not one workload's to fill).
func TestOneIdentityCannotTakeEveryOpenUpload(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	opened := 0
	for l := 0; opened < s3door.MaxOpenUploadsPerIdentity; l++ {
		akid := fmt.Sprintf("AKIDL%03d", l)
		c := e.client(e.lease(akid, owner, "b/r"))
		for i := 0; i < s3door.MaxOpenUploads && opened < s3door.MaxOpenUploadsPerIdentity; i++ {
			if _, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/k")}); err != nil {
				t.Fatalf("upload %d of the identity: %v", opened+1, err)
			}
			opened++
		}
	}
	staged := func() int {
		es, _ := os.ReadDir(filepath.Join(e.spool, "s3-uploads"))
		return len(es)
	}
	before := staged()
	more := e.client(e.lease("AKIDMORE", owner, "b/r"))
	_, err := more.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/k")})
	if code, _, _ := apiCode(t, err); code != "TooManyUploads" {
		t.Fatalf("the identity's upload past its bound, on a fresh lease: %v, want TooManyUploads", err)
	}
	if after := staged(); after != before {
		t.Fatalf("the refused upload staged something: %d upload directories, %d before", after, before)
	}
	other := e.client(e.lease("AKIDOTHER", "spiffe://test/other", "b/o"))
	if _, err := other.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("o/k")}); err != nil {
		t.Fatalf("another identity's first upload: %v", err)
	}
}
