package postgres

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// commits counts the COMMITs a store's pool sends.
type commits struct{ n atomic.Int64 }

func (c *commits) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (c *commits) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *commits) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *commits) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if strings.TrimSpace(d.SQL) == "COMMIT" {
		c.n.Add(1)
	}
}
func (c *commits) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// BenchmarkAdmitAndSettle: c workers, each on a resource of its own,
// admitting segments 1, 2, 3 ... and settling each COMMITTED, as loadbench's
// gateway does. It reports per write (one op: an admission and its settle):
// the COMMITs sent, the batches that went on the fast path and that missed
// it, this process's CPU, its pool's Postgres backends' CPU (schedstat of the
// sessions the pool opened, so other clients of a shared server add nothing;
// sessions opened in the window count from their start; the server must run
// on this machine, else 0) and wal-B/op, the advance of pg_current_wal_lsn
// (the whole server's, so only meaningful on a server of one's own).
func BenchmarkAdmitAndSettle(b *testing.B) {
	for _, c := range []int{1, 8, 32} {
		b.Run("c="+strconv.Itoa(c), func(b *testing.B) {
			ctx := context.Background()
			cc := &commits{}
			var (
				mu   sync.Mutex
				pids []uint32
			)
			s, err := open(ctx, testenv.PostgresURL(b), func(cfg *pgxpool.Config) {
				cfg.ConnConfig.Tracer = cc
				cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
					mu.Lock()
					pids = append(pids, conn.PgConn().PID())
					mu.Unlock()
					return nil
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			admin, err := pgx.Connect(ctx, testenv.PostgresURL(b))
			if err != nil {
				b.Fatal(err)
			}
			defer admin.Close(ctx)
			now := time.UnixMilli(1_700_000_000_000).UTC()
			backends := func() (d time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				for _, pid := range pids {
					d += schedTime(int(pid))
				}
				return d
			}
			var next atomic.Int64
			wal0 := walPosition(ctx, b, admin)
			commits0, fast0, missed0, cpu0, pg0 := cc.n.Load(), s.fast.Load(), s.missed.Load(), selfCPU(), backends()
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range c {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res := fmt.Sprintf("res/%d", w)
					for seg := uint64(1); next.Add(1) <= int64(b.N); seg++ {
						id := fmt.Sprintf("%s-%d", res, seg)
						if _, err := s.Admit(ctx, writeReq(res, seg, id, now)); err != nil {
							b.Error(err)
							return
						}
						o := fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v-" + id, Now: now}
						if _, err := s.Settle(ctx, id, o); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			cpu, pg := selfCPU(), backends()
			n := float64(b.N)
			b.ReportMetric(float64(cc.n.Load()-commits0)/n, "commits/op")
			b.ReportMetric(float64(s.fast.Load()-fast0)/n, "fast/op")
			b.ReportMetric(float64(s.missed.Load()-missed0)/n, "missed/op")
			b.ReportMetric(float64(cpu-cpu0)/n/1e3, "cpu-µs/op")
			b.ReportMetric(float64(pg-pg0)/n/1e3, "pgcpu-µs/op")
			b.ReportMetric(float64(walPosition(ctx, b, admin)-wal0)/n, "wal-B/op")
		})
	}
}

// walPosition is the server's WAL insert position in bytes.
func walPosition(ctx context.Context, b *testing.B, c *pgx.Conn) int64 {
	var lsn int64
	if err := c.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0')::bigint`).Scan(&lsn); err != nil {
		b.Fatal(err)
	}
	return lsn
}

// selfCPU is this process's user+system time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// schedTime is the time process pid has run on a CPU (/proc/PID/schedstat).
func schedTime(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	ns, _ := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns)
}
