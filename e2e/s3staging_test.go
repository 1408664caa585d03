package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// TestS3StagingShareOfOneIdentityLeavesTheOthersRoom: through the built
// binary with aws-sdk-go-v2, a workload identity whose multipart uploads
// (over two leases) hold its s3StagingBytesPerIdentity is refused a further
// part with 503 SlowDown naming the setting, while another identity stages
// its own; the identity's abort gives its share back, and its upload
// completes.
func TestS3StagingShareOfOneIdentityLeavesTheOthersRoom(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gateway.yaml") // a share of 16 MiB, not the default's 32 (a quarter of 128)
	if err := os.WriteFile(cfg, []byte("maxBodyBytes: 8388608\ns3StagingBytes: 134217728\ns3StagingBytesPerIdentity: 16777216\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startGateway(t, "dev", "--config", cfg, "--data-dir", filepath.Join(dir, "data"), "--identity", "worker-a=token-a",
		"--identity", "worker-b=token-b", "--store", "docs=local:"+t.TempDir(), "--status-mode", "query")
	ctx := context.Background()
	client := func(token, resource, req string) *s3.Client {
		c := p.s3Client(p.acquireS3(t, token, resource, req), nil)
		return s3.New(c.Options(), func(o *s3.Options) { o.Retryer = aws.NopRetryer{} }) // see the SlowDown
	}
	a1, a2, b := client("token-a", "docs/a1", "share-a1"), client("token-a", "docs/a2", "share-a2"), client("token-b", "docs/b", "share-b")
	type upload struct {
		c       *s3.Client
		key, id string
	}
	begin := func(c *s3.Client, key string) upload {
		out, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("docs"), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("create %s: %v", key, err)
		}
		return upload{c, key, aws.ToString(out.UploadId)}
	}
	part := func(u upload, n int32, size int) (*s3.UploadPartOutput, error) {
		return u.c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("docs"), Key: aws.String(u.key), UploadId: aws.String(u.id),
			PartNumber: aws.Int32(n), Body: bytes.NewReader(bytes.Repeat([]byte{byte('0' + n)}, size))})
	}
	must := func(u upload, n int32, size int) *s3.UploadPartOutput {
		out, err := part(u, n, size)
		if err != nil {
			t.Fatalf("part %d of %s (%d bytes): %v", n, u.key, size, err)
		}
		return out
	}
	first, second := begin(a1, "a1/x"), begin(a2, "a2/y")
	must(first, 1, 8<<20)
	p1, p2 := must(second, 1, 5<<20), must(second, 2, 3<<20) // worker-a holds its 16 MiB share
	third := begin(a2, "a2/z")
	_, err := part(third, 1, 1) // counts 1 MiB
	if code, msg := s3Code(t, err); code != "SlowDown" || !strings.Contains(msg, "s3StagingBytesPerIdentity") || !strings.Contains(msg, `"worker-a"`) {
		t.Fatalf("a part past worker-a's share: %s %q, want SlowDown naming s3StagingBytesPerIdentity and worker-a", code, msg)
	}
	other := begin(b, "b/w")
	must(other, 1, 8<<20) // worker-b stages with worker-a's share spent
	if _, err := a1.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String("docs"), Key: aws.String(first.key), UploadId: aws.String(first.id)}); err != nil {
		t.Fatal(err)
	}
	must(third, 1, 1) // the abort gave 8 MiB of the share back
	if _, err := a2.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("docs"), Key: aws.String(second.key), UploadId: aws.String(second.id),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: p1.ETag}, {PartNumber: aws.Int32(2), ETag: p2.ETag}}}}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	must(begin(a2, "a2/v"), 1, 8<<20) // and the completion its 8 MiB: 1 + 8 MiB held
}
