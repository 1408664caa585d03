package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencegate/fencegate"
	fs3 "github.com/fencegate/fencegate/backends/s3"
	"github.com/fencegate/fencegate/internal/testenv"
)

// BenchmarkPut compares, with 8 goroutines, chained conditional 1 KiB PUTs straight through the SDK with the
// same PUTs through Store.Put, plain and presigned (a landing deadline, as
// every gateway write has). The ratio of ns/op is the backend's overhead;
// cpu-ns/op is this process's CPU per PUT (the server is another process),
// steadier than ns/op on a shared machine.
//
//	go test -run X -bench Put -benchtime 3s ./backends/s3/
func BenchmarkPut(b *testing.B) {
	srv := testenv.S3Server(b)
	body := bytes.Repeat([]byte("0123456789abcdef"), 64)
	cl := client(srv.Endpoint, srv.AccessKey, srv.SecretKey)
	prefix := testenv.RandomName("bench_")
	var worker atomic.Int64
	run := func(b *testing.B, put func(ctx context.Context, key, prev string) (string, error)) {
		b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0))) // 8 goroutines
		b.ReportAllocs()
		cpu0 := processCPU(b)
		defer func() { b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op") }()
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprintf("%s/w%d", b.Name(), worker.Add(1))
			prev := ""
			for pb.Next() {
				etag, err := put(context.Background(), key, prev)
				if err != nil {
					b.Error(err)
					return
				}
				prev = etag
			}
		})
	}
	b.Run("sdk", func(b *testing.B) {
		run(b, func(ctx context.Context, key, prev string) (string, error) {
			in := &s3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(prefix + "/" + key),
				Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))}
			if prev == "" {
				in.IfNoneMatch = aws.String("*")
			} else {
				in.IfMatch = aws.String(prev)
			}
			out, err := cl.PutObject(ctx, in)
			if err != nil {
				return "", err
			}
			return aws.ToString(out.ETag), nil
		})
	})
	st := fs3.New("bench", cl, srv.Bucket, prefix)
	storePut := func(landBy bool) func(ctx context.Context, key, prev string) (string, error) {
		return func(ctx context.Context, key, prev string) (string, error) {
			if landBy {
				ctx = fencegate.WithLandBy(ctx, time.Now().Add(30*time.Second))
			}
			return st.Put(ctx, fencegate.PutRequest{Key: key, Body: bytes.NewReader(body), Size: int64(len(body)),
				IfMatch: prev, IfNoneMatch: prev == "", Meta: fencegate.EffectMeta{FenceToken: 1, Segment: 1, ReceiptID: "r"}})
		}
	}
	b.Run("store", func(b *testing.B) { run(b, storePut(false)) })
	b.Run("store-presigned", func(b *testing.B) { run(b, storePut(true)) })
}

// countingBody counts the bytes read from it (no WriteTo: every byte is
// counted).
type countingBody struct {
	r    *bytes.Reader
	read int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += int64(n)
	return n, err
}

func (c *countingBody) Seek(off int64, whence int) (int64, error) { return c.r.Seek(off, whence) }

func TestPresignedPutReadsItsBodyOnce(t *testing.T) {
	srv := testenv.S3Server(t)
	st := fs3.New("once", client(srv.Endpoint, srv.AccessKey, srv.SecretKey), srv.Bucket, testenv.RandomName("t_"))
	data := bytes.Repeat([]byte("x"), 256<<10)
	body := &countingBody{r: bytes.NewReader(data)}
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(time.Minute))
	if _, err := st.Put(ctx, fencegate.PutRequest{Key: "k/once", Body: body, Size: int64(len(data)), IfNoneMatch: true,
		Meta: fencegate.EffectMeta{FenceToken: 1, Segment: 1, ReceiptID: "r"}}); err != nil {
		t.Fatal(err)
	}
	// UNSIGNED-PAYLOAD: the SDK does not read the body for a SHA-256 first.
	if body.read != int64(len(data)) {
		t.Fatalf("read %d bytes of a %d-byte body", body.read, len(data))
	}
}
