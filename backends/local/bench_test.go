//go:build unix

package local_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
)

var benchBody = bytes.Repeat([]byte("0123456789abcdef"), 64)

// BenchmarkPut measures the write path the gateway uses: 1 KiB Puts from
// c = 1 and c = 8 concurrent writers, reporting the fsyncs (object file +
// directory) and the process CPU per Put beside ns/op. DistinctKeys
// creates a new key with every Put (If-None-Match); SameKeys has each
// writer rewrite its own key, chained on the ETag it got last (If-Match),
// as a worker writing segments 1, 2, 3 ... does.
func BenchmarkPut(b *testing.B) {
	meta := fencegate.EffectMeta{FenceToken: 7, Segment: 1, Root: "root", OperationID: "op", PayloadDigest: "sha256:abc", ReceiptID: "rcpt-1"}
	for _, c := range []int{1, 8} {
		for _, sameKeys := range []bool{false, true} {
			name := fmt.Sprintf("DistinctKeys/c=%d", c)
			if sameKeys {
				name = fmt.Sprintf("SameKeys/c=%d", c)
			}
			b.Run(name, func(b *testing.B) {
				s, err := local.New("bench", b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				file0, dir0 := local.Syncs(s)
				cpu0 := cpuTime()
				writers(b, c, func(w int, next func() bool) {
					etag := ""
					for n := 0; next(); n++ {
						req := fencegate.PutRequest{Key: fmt.Sprintf("bench/w%d", w), Body: bytes.NewReader(benchBody),
							Size: int64(len(benchBody)), ContentType: "application/octet-stream", Meta: meta}
						if !sameKeys {
							req.Key = fmt.Sprintf("bench/w%d/%d", w, n)
						}
						if etag == "" || !sameKeys {
							req.IfNoneMatch = true
						} else {
							req.IfMatch = etag
						}
						req.Meta.Segment = uint64(n + 1)
						var err error
						if etag, err = s.Put(context.Background(), req); err != nil {
							b.Error(err)
							return
						}
					}
				})
				file, dir := local.Syncs(s)
				b.ReportMetric(float64(file-file0+dir-dir0)/float64(b.N), "fsyncs/op")
				b.ReportMetric(float64(dir-dir0)/float64(b.N), "dirsyncs/op")
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			})
		}
	}
}

// BenchmarkBareFileWrite is the baseline loadbench's embedded path uses
// for the object file (internal/cmd/loadbench writeFile): per write a temp
// file, one write, fsync, rename over the writer's own file, fsync of the
// directory, with no sharing; c = 1 and 8 writers as in BenchmarkPut, so
// the two compare in one run.
func BenchmarkBareFileWrite(b *testing.B) {
	for _, c := range []int{1, 8} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			dir := b.TempDir()
			cpu0 := cpuTime()
			writers(b, c, func(w int, next func() bool) {
				name := filepath.Join(dir, fmt.Sprintf("w%d", w))
				for next() {
					if err := bareWrite(dir, name, benchBody); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(2, "fsyncs/op")
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// writers runs c goroutines that share b.N operations (next reports
// whether one more is to be done) and times them.
func writers(b *testing.B, c int, run func(w int, next func() bool)) {
	var left atomic.Int64
	left.Store(int64(b.N))
	next := func() bool { return left.Add(-1) >= 0 }
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range c {
		wg.Add(1)
		go func() { defer wg.Done(); run(w, next) }()
	}
	wg.Wait()
	b.StopTimer()
}

// bareWrite is a twin of internal/cmd/loadbench writeFile (keep the two
// alike): loadbench is a main package, so neither can call the other, and a
// shared package would put bench code in the library.
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

// cpuTime is the process's user+system CPU so far (internal/cmd/loadbench
// selfCPU is its twin, for the load generator's own CPU).
func cpuTime() time.Duration {
	var r syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}
