package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/fencestore/storetest"
	"github.com/fencegate/fencegate/internal/testenv"
)

// BenchmarkAdmitSettleServerCPU is storetest.BenchAdmitSettleParallel (each
// goroutine admits and settles on a resource of its own; 4 per CPU) and
// reports what the Postgres server spent per write, without a gateway:
// pgcpu-µs/write, the run time (/proc/PID/schedstat) of the store's own
// sessions (found by an application_name of their own, so other clients
// of a shared server add nothing), and wal-B/write, the advance of
// pg_current_wal_lsn (the whole server's, so only meaningful on a server
// of one's own); the sessions' start is in the window. The server must
// run on this machine (its backends' /proc entries are read); otherwise
// neither is reported.
func BenchmarkAdmitSettleServerCPU(b *testing.B) {
	ctx := context.Background()
	app := testenv.RandomName("fgbench_")
	dsn := testenv.PostgresURL(b)
	s := open(b, dsn+"&application_name="+app)
	defer s.Close()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close(ctx)
	b.SetParallelism(4)
	before := readServer(ctx, admin, app)
	storetest.BenchAdmitSettleParallel(b, s)
	b.StopTimer()
	after := readServer(ctx, admin, app)
	if len(after.cpu) == 0 {
		return
	}
	var cpu time.Duration
	for pid, t := range after.cpu {
		cpu += t - before.cpu[pid]
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "pgcpu-µs/write")
	b.ReportMetric(float64(after.wal-before.wal)/float64(b.N), "wal-B/write")
}

// serverReading is the run time of each session named app and the WAL
// position.
type serverReading struct {
	cpu map[int]time.Duration
	wal int64
}

func readServer(ctx context.Context, c *pgx.Conn, app string) serverReading {
	r := serverReading{cpu: map[int]time.Duration{}}
	_ = c.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0')::bigint`).Scan(&r.wal)
	rows, err := c.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		return r
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(data)); len(f) > 0 {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				r.cpu[pid] = time.Duration(ns)
			}
		}
	}
	return r
}
