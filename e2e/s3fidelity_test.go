package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
// into a presigned URL's query, are 501 and change nothing, and so is a
// presigned PUT whose x-amz-content-sha256 header says aws-chunked (one
// naming another body's SHA-256 is XAmzContentSHA256Mismatch); the fence
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
	// A presigned PUT whose x-amz-content-sha256 header says its body is
	// aws-chunked, or is another body's SHA-256: refused as on a
	// header-signed PUT, never the framing bytes stored as the object.
	plain, err := s3.NewPresignClient(c).PresignPutObject(ctx, &s3.PutObjectInput{Bucket: bkt, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	other := sha256.Sum256([]byte("other"))
	for _, tc := range []struct {
		sha, encoding, body, code string
		status                    int
	}{
		{"STREAMING-UNSIGNED-PAYLOAD-TRAILER", "aws-chunked", "2\r\npp\r\n0\r\n\r\n", "NotImplemented", http.StatusNotImplemented},
		{hex.EncodeToString(other[:]), "", "pp", "XAmzContentSHA256Mismatch", http.StatusBadRequest},
	} {
		req, _ := http.NewRequest(http.MethodPut, plain.URL, strings.NewReader(tc.body))
		for k, v := range plain.SignedHeader {
			req.Header[k] = v
		}
		req.Header.Set("X-Amz-Content-Sha256", tc.sha)
		if tc.encoding != "" {
			req.Header.Set("Content-Encoding", tc.encoding)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(out), "<Code>"+tc.code+"</Code>") || resp.Header.Get("Fence-Receipt") != "" {
			t.Fatalf("a presigned PUT with x-amz-content-sha256 %s: %d %s, want %d %s", tc.sha, resp.StatusCode, out, tc.status, tc.code)
		}
	}
	if p.doorState(t, c, "docs") != before {
		t.Fatal("a presigned PUT refused for its x-amz-content-sha256 changed the bucket or the receipts")
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

// TestS3FrontDoorResumesPagesAndKeepsTextThroughTheBinary (the one test of
// the door's paging past a key ending with the delimiter): through the
// built gateway and aws-sdk-go-v2, on the local store and versitygw:
// metadata a client sends as RFC 2047 words (as Amazon S3 asks for
// non-ASCII text) comes back as the same text; a ranged GET whose If-Range
// names an older version gets the whole object; and paging a delimited
// listing one entry at a time, v1 and v2, lists every key past one equal
// to the prefix.
func TestS3FrontDoorResumesPagesAndKeepsTextThroughTheBinary(t *testing.T) {
	onEachDoorStore(t, resumesPagesAndKeepsText)
}

func resumesPagesAndKeepsText(t *testing.T, p *gatewayProc) {
	ctx := context.Background()
	c := p.s3Client(p.acquireS3(t, "token-a", "docs/logs", "logs-a"), nil)
	bkt := aws.String("docs")
	words := "=?UTF-8?B?Q3LDqG1lIGJyw7tsw6ll?=" // "Crème brûlée"
	old, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bkt, Key: aws.String("logs/k"), Body: strings.NewReader("old-old-old"),
		Metadata: map[string]string{"title": words}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bkt, Key: aws.String("logs/k"), Body: strings.NewReader("new-new-new"),
		Metadata: map[string]string{"title": words}}); err != nil {
		t.Fatal(err)
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: bkt, Key: aws.String("logs/k")})
	if err != nil || head.Metadata["title"] != words {
		t.Fatalf("head: %v %v, want the title as the encoded words Amazon S3 answers", head, err)
	}
	got, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: bkt, Key: aws.String("logs/k"), Range: aws.String("bytes=4-")},
		func(o *s3.Options) {
			o.APIOptions = append(o.APIOptions, addHeader("If-Range", aws.ToString(old.ETag)))
		})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(got.Body)
	got.Body.Close()
	if string(body) != "new-new-new" {
		t.Fatalf("a ranged GET whose If-Range names the older version: %q, want the whole new object", body)
	}

	for _, k := range []string{"logs/x-", "logs/x-1", "logs/x-2-a", "logs/x-2-b", "logs/x-3"} {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: bkt, Key: aws.String(k), Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
	}
	want := "logs/x- logs/x-1 prefix logs/x-2- logs/x-3"
	var v1, v2 []string
	marker, token := "", ""
	for range 10 {
		out, err := c.ListObjects(ctx, &s3.ListObjectsInput{Bucket: bkt, Prefix: aws.String("logs/x-"), Delimiter: aws.String("-"),
			MaxKeys: aws.Int32(1), Marker: aws.String(marker)})
		if err != nil {
			t.Fatal(err)
		}
		v1 = append(v1, pageEntries(out.Contents, out.CommonPrefixes)...)
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		marker = aws.ToString(out.NextMarker)
	}
	for range 10 {
		in := &s3.ListObjectsV2Input{Bucket: bkt, Prefix: aws.String("logs/x-"), Delimiter: aws.String("-"), MaxKeys: aws.Int32(1)}
		if token != "" {
			in.ContinuationToken = aws.String(token)
		}
		out, err := c.ListObjectsV2(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		v2 = append(v2, pageEntries(out.Contents, out.CommonPrefixes)...)
		if token = aws.ToString(out.NextContinuationToken); token == "" {
			break
		}
	}
	if strings.Join(v1, " ") != want || strings.Join(v2, " ") != want {
		t.Fatalf("paged listings v1 %q, v2 %q, want %q", v1, v2, want)
	}
}

// pageEntries are a listing page's keys and common prefixes ("prefix P").
func pageEntries(contents []types.Object, prefixes []types.CommonPrefix) []string {
	var out []string
	for _, o := range contents {
		out = append(out, aws.ToString(o.Key))
	}
	for _, p := range prefixes {
		out = append(out, "prefix "+aws.ToString(p.Prefix))
	}
	return out
}

// addHeader is an SDK middleware setting a request header the SDK has no
// field for.
func addHeader(k, v string) func(*middleware.Stack) error {
	return func(st *middleware.Stack) error {
		return st.Build.Add(middleware.BuildMiddlewareFunc("fencegateAddHeader", func(ctx context.Context, in middleware.BuildInput,
			next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
			if r, ok := in.Request.(*smithyhttp.Request); ok {
				r.Header.Set(k, v)
			}
			return next.HandleBuild(ctx, in)
		}), middleware.After)
	}
}
