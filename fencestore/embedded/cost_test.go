package embedded

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

// BenchmarkWriteCost is a fenced object write as the gateway makes it on
// the embedded path, with realistic names and digests (random receipt IDs,
// sha256 digests), 8 writers per CPU on resources of their own: either an
// admission and its settle (two ops) or, folded, one admission carrying the
// previous segment's settle (one op). It reports what a write costs the file:
// ops per commit, fdatasyncs, pages and bytes written, file growth, and
// the process's CPU per write (user and system: the benchmark's own work
// too, the same in every variant, so compare variants and versions by it).
//
// -embedded.prefill N first writes N settled receipts (over N/10 resources,
// in large transactions), to compare a full store's cost with an empty one's.
// -embedded.spread makes every write a new fence on a resource of its own
// instead of the next segment on the writer's one resource: on a filled
// store one of the stored resources (each writer its own share of them, in
// turn), on an empty one a new resource; the folded variants are skipped
// (a folded settle is the same resource's previous segment).
func BenchmarkWriteCost(b *testing.B) {
	for _, c := range []struct{ folded, ordered bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
		folded := c.folded
		b.Run(fmt.Sprintf("folded=%v/orderedIDs=%v", c.folded, c.ordered), func(b *testing.B) {
			if folded && *spreadFlag {
				b.Skip("-embedded.spread: a folded settle is the same resource's previous segment")
			}
			if *spreadFlag && 4*runtime.GOMAXPROCS(0) > maxSpreadWriters {
				b.Skipf("-embedded.spread: %d writers, at most %d", 4*runtime.GOMAXPROCS(0), maxSpreadWriters)
			}
			path := filepath.Join(b.TempDir(), "fence.db")
			s, err := Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			prefill(b, s, *prefillFlag, c.ordered)
			b.SetParallelism(4)
			ctx := context.Background()
			var workers, writes atomic.Uint64
			st0, bs0 := s.Stats(), s.db.Stats()
			cpu0, disk0 := cpuTime(), diskWrites()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := workers.Add(1)
				res := fmt.Sprintf("local/bench/w%d", w)
				g := fencegate.VerifiedGrant{Grant: fencegate.Grant{
					Schema: fencegate.GrantSchema, Resource: res, Owner: "bench-worker-" + fmt.Sprint(w),
					Lease: "lease_" + randHex(13), FenceToken: 7, OperationID: "op_" + randHex(13), OperationRoot: "root_" + randHex(13),
					IssuedAt: 1_700_000_000_000, ExpiresAt: 1_700_000_030_000,
				}, Digest: "sha256:" + randHex(32)}
				var seg uint64
				var last string
				var next func() (string, uint64, uint64)
				if *spreadFlag {
					next = spreader(w, *prefillFlag)
				}
				for pb.Next() {
					seg++
					if *spreadFlag {
						g.Resource, g.FenceToken, seg = next()
						res = g.Resource
					}
					now := time.Now().UTC()
					req := fencegate.AdmitRequest{Grant: g, Segment: seg, Target: "objects/" + res, Method: "PUT",
						PayloadDigest: "sha256:" + randHex(32), ReceiptID: "rcpt_" + randHex(13), Now: now}
					if c.ordered { // a time-ordered ID: its time, then randomness
						req.ReceiptID = fmt.Sprintf("rcpt_%016x%s", now.UnixNano(), randHex(5))
					}
					done := fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: fmt.Sprintf("\"%s\"", randHex(16)), Now: now}
					if folded && last != "" {
						req.Prior = &fencegate.PriorSettle{ReceiptID: last, Outcome: done}
					}
					adm, err := s.Admit(ctx, req)
					if err != nil {
						b.Error(err)
						return
					}
					last = adm.Receipt.ID
					if !folded {
						if _, err := s.Settle(ctx, last, done); err != nil {
							b.Error(err)
							return
						}
					}
					writes.Add(1)
				}
			})
			b.StopTimer()
			cpu, disk := cpuTime()-cpu0, diskWrites().sub(disk0)
			st, bs := s.Stats(), s.db.Stats()
			n := float64(writes.Load())
			ts := bs.TxStats.Sub(&bs0.TxStats)
			commits := float64(max(st.Commits-st0.Commits, 1))
			b.ReportMetric(float64(st.Ops-st0.Ops)/float64(max(st.Commits-st0.Commits, 1)), "ops/commit")
			b.ReportMetric(2*float64(st.Commits-st0.Commits)/n, "fdatasyncs/write")
			b.ReportMetric(float64(ts.GetWrite())/n, "pagewrites/write")
			b.ReportMetric(float64((st.Waited-st0.Waited).Microseconds())/commits, "wait-µs/commit")
			b.ReportMetric(float64(ts.GetSpillTime().Microseconds())/commits, "spill-µs/commit")
			b.ReportMetric(float64(ts.GetWriteTime().Microseconds())/commits, "write+sync-µs/commit")
			b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/write")
			var used int64
			_ = s.db.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
			b.ReportMetric(float64(used)/n, "usedbytes/write")
			b.ReportMetric(float64(st.Merges-st0.Merges), "merges")
			b.ReportMetric(float64(bs.FreePageN+bs.PendingPageN), "freepages")
			if disk.ios > 0 { // the machine's disks, whoever writes: compare runs on an idle machine
				b.ReportMetric(float64(disk.ios)/commits, "diskwrites/commit")
				b.ReportMetric(float64(disk.sectors)/2/float64(disk.ios), "KiB/diskwrite")
			}
		})
	}
}

var (
	prefillFlag = flag.Int("embedded.prefill", 0, "settled receipts written before BenchmarkWriteCost measures")
	spreadFlag  = flag.Bool("embedded.spread", false, "BenchmarkWriteCost: every write a new fence on a resource of its own (stored ones after -embedded.prefill)")
)

// maxSpreadWriters bounds the writers of a spread run: writer w takes the
// stored resources whose index is w-1 modulo it, so no two share one.
const maxSpreadWriters = 64

// spreader returns writer w (at most maxSpreadWriters) next resource, fence
// and segment for -embedded.spread: with prefill n, the stored resources
// (n/10 of them, fence 3) of the writer's share in turn, each visit a fence
// above the writer's last; with none to take, a new resource each write.
func spreader(w uint64, n int) func() (string, uint64, uint64) {
	share := max(n/10, 1) / maxSpreadWriters // stored resources per writer
	var i uint64
	return func() (string, uint64, uint64) {
		i++
		if share == 0 || n == 0 {
			return fmt.Sprintf("local/spread/w%d/%d", w, i), 4, 1
		}
		idx := int(w-1) + maxSpreadWriters*int((i-1)%uint64(share))
		return fmt.Sprintf("local/fill/%d", idx), 3 + i, 1
	}
}

// prefill writes n admitted and settled segments over n/10 resources (with
// time-ordered receipt IDs if ordered), moving the journal after each
// transaction.
func prefill(b *testing.B, s *Store, n int, ordered bool) {
	const perTx = 5000
	for done := 0; done < n; done += perTx {
		err := s.batch.do(func(tx *bolt.Tx) error {
			for i := done; i < min(done+perTx, n); i++ {
				res := fmt.Sprintf("local/fill/%d", i%max(n/10, 1))
				g := fencegate.VerifiedGrant{Grant: fencegate.Grant{Resource: res, Owner: "fill", Lease: "lease_fill",
					FenceToken: 3, OperationID: "op_" + res, OperationRoot: "root_fill", IssuedAt: 1}, Digest: "sha256:" + randHex(32)}
				now := time.UnixMilli(1_600_000_000_000 + int64(i)).UTC()
				req := fencegate.AdmitRequest{Grant: g, Segment: uint64(i/max(n/10, 1) + 1), Target: "objects/" + res, Method: "PUT",
					PayloadDigest: "sha256:" + randHex(32), ReceiptID: "rcpt_" + randHex(13), Now: now}
				if ordered {
					req.ReceiptID = fmt.Sprintf("rcpt_%016x%s", now.UnixNano(), randHex(5))
				}
				if _, refused, err := admitTx(tx, &req); err != nil || refused != nil {
					return fmt.Errorf("prefill %d: %v %v", i, refused, err)
				}
				if _, err := settleTx(tx, req.ReceiptID, &fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: randHex(8), Now: now}); err != nil {
					return err
				}
			}
			_, _, err := mergeJournal(tx, math.MaxInt) // as the committer does after as many single writes
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the CPU (user and system) this process has used, a measure
// that other load on the machine disturbs less than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// diskIO counts the write requests the block devices completed and the
// sectors (512 bytes) they wrote.
type diskIO struct{ ios, sectors uint64 }

func (d diskIO) sub(o diskIO) diskIO { return diskIO{d.ios - o.ios, d.sectors - o.sectors} }

// diskWrites sums the write counters of every block device but loop and
// zram ones (/sys/block/DEV/stat: writes completed is the fifth field,
// sectors written the seventh; Documentation/block/stat.rst); zero where
// there is no /sys.
func diskWrites() diskIO {
	var d diskIO
	devs, _ := filepath.Glob("/sys/block/*/stat")
	for _, p := range devs {
		dev := filepath.Base(filepath.Dir(p))
		if strings.HasPrefix(dev, "loop") || strings.HasPrefix(dev, "zram") || strings.HasPrefix(dev, "ram") {
			continue
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		f := strings.Fields(string(raw))
		if len(f) < 7 {
			continue
		}
		ios, _ := strconv.ParseUint(f[4], 10, 64)
		sectors, _ := strconv.ParseUint(f[6], 10, 64)
		d.ios += ios
		d.sectors += sectors
	}
	return d
}

func randHex(n int) string {
	p := make([]byte, n)
	_, _ = rand.Read(p)
	return hex.EncodeToString(p)
}
