package s3_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	fs3 "github.com/fencegate/fencegate/backends/s3"
)

// BenchmarkPutClientCPU is the client side of one presigned conditional 1 KiB
// Store.Put (as the gateway sends every write) against a stub server that
// answers at once over a kept-alive connection: what the backend and the SDK
// cost per write, without the store's own time. cpu-ns/op is the process's
// CPU time (user + system, the stub server's included) per write: on a
// shared machine it moves far less with other load than ns/op does.
//
//	go test -run X -bench PutClientCPU -benchmem ./backends/s3/
func BenchmarkPutClientCPU(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
	}))
	b.Cleanup(srv.Close)
	body := bytes.Repeat([]byte("0123456789abcdef"), 64)
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(time.Hour))
	run := func(b *testing.B, st *fs3.Store) {
		b.ReportAllocs()
		prev := ""
		cpu0 := processCPU(b)
		for b.Loop() {
			etag, err := st.Put(ctx, fencegate.PutRequest{Key: "k", Body: bytes.NewReader(body), Size: int64(len(body)),
				IfMatch: prev, IfNoneMatch: prev == "", Meta: fencegate.EffectMeta{FenceToken: 1, Segment: 1, ReceiptID: "r"}})
			if err != nil {
				b.Fatal(err)
			}
			prev = etag
		}
		b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	}
	b.Run("sdk", func(b *testing.B) { run(b, fs3.ViaSDK(fs3.New("cpu", client(srv.URL, "AK", "SK"), "bucket", "pre"))) })
	b.Run("direct", func(b *testing.B) { run(b, fs3.New("cpu", client(srv.URL, "AK", "SK"), "bucket", "pre")) })
}

// processCPU is the CPU time (user + system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
