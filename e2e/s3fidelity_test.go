package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// TestS3FrontDoorKeepsWhatAWriteSaysThroughTheBinary: through the built
// gateway and aws-sdk-go-v2 as a client, on the local store and versitygw:
// the same bytes with other metadata are a new write that replaces it (not
// a replay); a header the stores cannot keep, and an x-amz-* header moved
// into a presigned URL's query, are 501 and change nothing; the fence
// segment given at CreateMultipartUpload numbers its Complete.
func TestS3FrontDoorKeepsWhatAWriteSaysThroughTheBinary(t *testing.T) {
	onEachDoorStore(t, keepsWhatAWriteSays)
}

func keepsWhatAWriteSays(t *testing.T, p *gatewayProc) {
	ctx := context.Background()
	la := p.acquireS3(t, "token-a", "docs/meta", "meta-a")
	var h headers
	c := p.s3Client(la, &h)
	bkt, key := aws.String("docs"), aws.String("meta/a")
	put := func(v string) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bkt, Key: key, Body: strings.NewReader("same"),
			Metadata: map[string]string{"v": v}})
		return err
	}
	if err := put("1"); err != nil {
		t.Fatal(err)
	}
	first := h.last.Get("Fence-Receipt")
	if err := put("1"); err != nil || h.last.Get("Fence-Replay") != "true" || h.last.Get("Fence-Receipt") != first {
		t.Fatalf("the same bytes and metadata again: %v, replay %q receipt %q, want a replay of %s", err, h.last.Get("Fence-Replay"), h.last.Get("Fence-Receipt"), first)
	}
	if err := put("2"); err != nil || h.last.Get("Fence-Replay") != "" || h.last.Get("Fence-Receipt") == first {
		t.Fatalf("the same bytes with other metadata: %v, replay %q, want a new write", err, h.last.Get("Fence-Replay"))
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: bkt, Key: key})
	if err != nil || head.Metadata["v"] != "2" {
		t.Fatalf("head after the metadata change: %+v %v, want v=2", head, err)
	}

	before := p.doorState(t, c, "docs")
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: bkt, Key: key, Body: strings.NewReader("x"), CacheControl: aws.String("no-cache")})
	if code, _ := s3Code(t, err); code != "NotImplemented" {
		t.Fatalf("a put with Cache-Control: %s, want NotImplemented", code)
	}
	// A presigned PUT with the segment in its query, as a presigner may put it.
	pr, err := s3.NewPresignClient(c).PresignPutObject(ctx, &s3.PutObjectInput{Bucket: bkt, Key: key},
		func(o *s3.PresignOptions) {
			o.ClientOptions = append(o.ClientOptions, func(o *s3.Options) {
				o.APIOptions = append(o.APIOptions, addQuery("X-Amz-Meta-Fence-Segment", "9"))
			})
		})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, pr.URL, strings.NewReader("hoisted"))
	for k, v := range pr.SignedHeader {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !strings.Contains(pr.URL, "X-Amz-Meta-Fence-Segment=9") || resp.StatusCode != http.StatusNotImplemented {
		t.Fatalf("a presigned PUT with an x-amz-* header in its query: %d (url %s), want 501", resp.StatusCode, pr.URL)
	}
	if p.doorState(t, c, "docs") != before {
		t.Fatal("a refused write changed the bucket or the receipts")
	}

	// The segment given at create numbers the Complete (segment 3 is next).
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: bkt, Key: aws.String("meta/big"),
		Metadata: map[string]string{"fence-segment": "3"}})
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: bkt, Key: aws.String("meta/big"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: strings.NewReader("only part")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: bkt, Key: aws.String("meta/big"),
		UploadId: up.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}}}}); err != nil {
		t.Fatal(err)
	}
	rc := p.do(t, "GET", "/v1/receipts/"+h.last.Get("Fence-Receipt"), "token-a", nil, "")
	if rc.status != 200 || rc.num("segment") != 3 || rc.str("state") != "COMMITTED" {
		t.Fatalf("the multipart write's receipt: %d %s, want segment 3 COMMITTED", rc.status, rc.body)
	}
}

// addQuery is an aws-sdk-go-v2 API option that puts k=v in the request's
// query before it is signed (as a presigner moving a header there would).
func addQuery(k, v string) func(*middleware.Stack) error {
	return func(st *middleware.Stack) error {
		return st.Build.Add(middleware.BuildMiddlewareFunc("fencegateAddQuery", func(ctx context.Context, in middleware.BuildInput,
			next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
			if r, ok := in.Request.(*smithyhttp.Request); ok {
				q := r.URL.Query()
				q.Set(k, v)
				r.URL.RawQuery = q.Encode()
			}
			return next.HandleBuild(ctx, in)
		}), middleware.After)
	}
}
