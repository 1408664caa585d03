package s3door_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Rule: a CompleteMultipartUpload sent after the upload was completed is
// the first Complete's replay (same receipt and ETag, Fence-Replay: true,
// nothing written) only when it names the same parts; one naming another
// list is refused 404 NoSuchUpload and changes nothing: the object, the
// receipts and the fence state are as the first Complete left them.
func TestACompleteNamingOtherPartsAfterTheCompletionIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/k")})
	if err != nil {
		t.Fatal(err)
	}
	etags := map[int32]*string{}
	for n, body := range map[int32]string{1: "data1", 2: "data"} {
		pr, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("r/k"), UploadId: up.UploadId,
			PartNumber: aws.Int32(n), Body: strings.NewReader(body)})
		if err != nil {
			t.Fatalf("part %d: %v", n, err)
		}
		etags[n] = pr.ETag
	}
	complete := func(parts ...types.CompletedPart) (*s3.CompleteMultipartUploadOutput, http.Header, error) {
		var h http.Header
		out, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/k"),
			UploadId: up.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}, rawHeader(&h))
		return out, h, err
	}
	part1 := types.CompletedPart{PartNumber: aws.Int32(1), ETag: etags[1]}
	part2 := types.CompletedPart{PartNumber: aws.Int32(2), ETag: etags[2]}
	first, h1, err := complete(part1)
	if err != nil {
		t.Fatalf("complete with part 1: %v", err)
	}
	object := func() string {
		got, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("r/k")})
		if err != nil {
			t.Fatal(err)
		}
		defer got.Body.Close()
		b, _ := io.ReadAll(got.Body)
		return string(b)
	}
	if got := object(); got != "data1" {
		t.Fatalf("object after the first Complete: %q", got)
	}
	before := e.fingerprint("b/r")
	for name, parts := range map[string][]types.CompletedPart{
		"part 2 with its ETag":     {part2},
		"parts 1 and 2":            {part1, part2},
		"part 1 with another ETag": {{PartNumber: aws.Int32(1), ETag: etags[2]}},
	} {
		_, h, err := complete(parts...)
		if code, _, status := apiCode(t, err); code != "NoSuchUpload" || status != http.StatusNotFound {
			t.Errorf("a Complete naming %s after the completion: %d %s, want 404 NoSuchUpload", name, status, code)
		}
		if h.Get("Fence-Replay") != "" || h.Get("Fence-Receipt") != "" {
			t.Errorf("the refusal of %s answers Fence-Replay %q, Fence-Receipt %q", name, h.Get("Fence-Replay"), h.Get("Fence-Receipt"))
		}
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a refused Complete changed state")
	}
	if got := object(); got != "data1" {
		t.Fatalf("object after the refusals: %q", got)
	}
	// The same list, its ETag unquoted as some clients send it, is the replay.
	again, h2, err := complete(types.CompletedPart{PartNumber: aws.Int32(1), ETag: aws.String(strings.Trim(*etags[1], `"`))})
	if err != nil {
		t.Fatalf("the identical Complete again: %v", err)
	}
	if h2.Get("Fence-Replay") != "true" || h2.Get("Fence-Receipt") != h1.Get("Fence-Receipt") || aws.ToString(again.ETag) != aws.ToString(first.ETag) {
		t.Fatalf("the identical Complete: replay %q receipt %q ETag %s, want true %q %s", h2.Get("Fence-Replay"),
			h2.Get("Fence-Receipt"), aws.ToString(again.ETag), h1.Get("Fence-Receipt"), aws.ToString(first.ETag))
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("the replayed Complete changed state")
	}
}
