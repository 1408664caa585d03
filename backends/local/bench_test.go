//go:build unix

package local_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
)

// BenchmarkPut measures the write path the gateway uses: parallel 1 KiB
// Puts (8 writers on 2 cores: GOMAXPROCS x 4), reporting the fsyncs
// (object file + directory) and the process CPU per Put beside ns/op.
// DistinctKeys creates a new key with every Put (If-None-Match);
// SameKeys has each writer rewrite its own key, chained on the ETag it
// got last (If-Match), as a worker writing segments 1, 2, 3 ... does.
func BenchmarkPut(b *testing.B) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 64)
	meta := fencegate.EffectMeta{FenceToken: 7, Segment: 1, Root: "root", OperationID: "op", PayloadDigest: "sha256:abc", ReceiptID: "rcpt-1"}
	for _, sameKeys := range []bool{false, true} {
		name := "DistinctKeys"
		if sameKeys {
			name = "SameKeys"
		}
		b.Run(name, func(b *testing.B) {
			s, err := local.New("bench", b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			var worker atomic.Int64
			file0, dir0 := local.Syncs(s)
			cpu0 := cpuTime()
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := worker.Add(1)
				etag := ""
				for n := 0; pb.Next(); n++ {
					req := fencegate.PutRequest{Key: fmt.Sprintf("bench/w%d", w), Body: bytes.NewReader(body), Size: int64(len(body)),
						ContentType: "application/octet-stream", Meta: meta}
					if !sameKeys {
						req.Key = fmt.Sprintf("bench/w%d/%d", w, n)
					}
					if etag == "" || !sameKeys {
						req.IfNoneMatch = true
					} else {
						req.IfMatch = etag
					}
					req.Meta.Segment = uint64(n + 1)
					if etag, err = s.Put(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			file, dir := local.Syncs(s)
			b.ReportMetric(float64(file-file0+dir-dir0)/float64(b.N), "fsyncs/op")
			b.ReportMetric(float64(dir-dir0)/float64(b.N), "dirsyncs/op")
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkBareFileWrite is the baseline loadbench's embedded path uses
// for the object file (internal/cmd/loadbench writeFile): per write a temp
// file, one write, fsync, rename over the writer's own file, fsync of the
// directory, with no sharing; 8 writers as in BenchmarkPut, so the two
// compare in one run.
func BenchmarkBareFileWrite(b *testing.B) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 64)
	dir := b.TempDir()
	var worker atomic.Int64
	cpu0 := cpuTime()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		name := filepath.Join(dir, fmt.Sprintf("w%d", worker.Add(1)))
		for pb.Next() {
			if err := bareWrite(dir, name, body); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(2, "fsyncs/op")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

func bareWrite(dir, name string, body []byte) error {
	f, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return err
	}
	if _, err := f.Write(body); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), name); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// cpuTime is the process's user+system CPU so far.
func cpuTime() time.Duration {
	var r syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}
