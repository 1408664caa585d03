package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

var baselineName = map[string]string{"postgres": "pgbench", "embedded": "bbolt+file", "s3": "direct PUT"}

// legend explains the columns and the lines under each row.
const legend = `cpu/w: gateway CPU (user+system) per write; fsyncs/w: the gateway's fsync/fdatasync/sync_file_range calls per write (strace);
commit/w and walsync/w: Postgres xact_commit of the bench database and wal_sync of the whole server, per write; on the
  embedded and s3 paths (gateway dev's bbolt fence store) commit/w is the fence store's batches (bbolt write transactions)
  per write, from the gateway's /metrics.
postgres server line (a server on this machine): pgcpu/w, the CPU (user+system, /proc/PID/schedstat) of the bench database's
  sessions per write over the window (the gateway's pool; pgbench's clients over a window inside its run, per transaction
  completed in it), what other clients of the server do not add to; pgsrv/w, every process of the server (postmaster with its
  reaped backends' cutime/cstime, live children: WAL writer, checkpointer, autovacuum, other clients' backends); wal/w,
  pg_current_wal_lsn's advance per write (whole server); ratio: the gateway's pgcpu/w over pgbench's.
stages: the gateway's own histograms over the window (operator listener /metrics), mean ms per write: the PUT request as the
  gateway timed it = admission (fence store, waiting included) + effect (object store) + the rest (settle, body, HTTP, verify);
  "settle" replaces "rest" when the gateway exports fencegate_settle_duration_seconds. loadbench CPU/w: this process's CPU per
  write over the window (getrusage), i.e. what the load generator takes of the machine. fence store writes per batch:
  fencegate_store_batched_writes_total over fencegate_store_batches_total in the window (fence-store writes, i.e. admissions
  and settles, per batch). staged: the writes whose bytes were synced beside their admission (fencegate_staged_writes_total,
  outcome used) over the requests, in the window (the local store only; 0 on S3).
cross-check: the same fenced writes on the same gateway after the client's window, on fresh resources, without the project's
  client: wrk (a separate C program, Lua script with precomputed headers) and plain net/http; the median rate, the median of
  its ratios to the client's rate in the same run, the gateway's CPU and request time per write, the generator's CPU per write.
  floor: not the gateway: after it has stopped, plain net/http PUTs of the same bodies (one key per worker) to a bare HTTP
  server that writes each with the path's object store adapter (conditional Put on the last ETag; local: file sync, rename,
  batched directory sync; s3: one presigned PUT) and no fencing (no grant, fence store, receipt or settle); its rate, its
  ratio to the client's rate, and the server's CPU per write: the least CPU a process spends on a 1 KiB write through HTTP
  into that store on this machine.`

// printPoint prints the median run of pts (by the gateway's rate; the
// baseline's and each cross-check's median taken on their own).
func printPoint(w io.Writer, path string, c int, pts []point) {
	var gws, bases []sample
	checks := map[string][]sample{}
	ratios := map[string][]float64{} // a cross-check's rate / the client's, in the same run
	for _, p := range pts {
		gws, bases = append(gws, p.gw), append(bases, p.base)
		for k, s := range p.checks {
			checks[k] = append(checks[k], s)
			if p.gw.rate() > 0 {
				ratios[k] = append(ratios[k], s.rate()/p.gw.rate())
			}
		}
	}
	gw := median(gws)
	printRow(w, path, c, gw, median(bases))
	fmt.Fprintf(w, "%14s %s\n", "", stageLine(gw))
	if len(checks) > 0 {
		names := make([]string, 0, len(checks))
		for k := range checks {
			names = append(names, k)
		}
		slices.Sort(names)
		var parts []string
		for _, k := range names {
			if k != "floor" {
				parts = append(parts, checkPart(k, median(checks[k]), ratios[k]))
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "%14s cross-check at c=%d: %s\n", "", c, strings.Join(parts, "; "))
		}
		if fl, ok := checks["floor"]; ok {
			fmt.Fprintf(w, "%14s floor at c=%d (bare HTTP + the object store, no fencing): %s\n", "", c, checkPart("floor", median(fl), ratios["floor"]))
		}
	}
}

// stageLine is the per-write stage breakdown of gw and the load
// generator's CPU per write.
func stageLine(gw sample) string {
	var b strings.Builder
	if st := gw.stages; st.valid && st.req.count > 0 {
		ms := func(s series) float64 { return s.sum * 1000 / float64(st.req.count) }
		fmt.Fprintf(&b, "stages ms/write: request %.2f = admission %.2f + effect %.2f", ms(st.req), ms(st.adm), ms(st.eff))
		if st.settle.count > 0 {
			fmt.Fprintf(&b, " + settle %.2f + rest %.2f", ms(st.settle), ms(st.req)-ms(st.adm)-ms(st.eff)-ms(st.settle))
		} else {
			fmt.Fprintf(&b, " + rest %.2f", ms(st.req)-ms(st.adm)-ms(st.eff))
		}
		fmt.Fprintf(&b, " (%d requests)", st.req.count)
	} else {
		b.WriteString("stages: - (no /metrics)")
	}
	if gw.writes > 0 && gw.self > 0 {
		fmt.Fprintf(&b, " | loadbench CPU/w %s", perWriteMs(gw.self, gw.writes))
	}
	if st := gw.stages; st.valid && st.batches > 0 {
		fmt.Fprintf(&b, " | fence store %.2f writes per batch", st.batched/st.batches)
	}
	if st := gw.stages; st.valid && st.req.count > 0 {
		fmt.Fprintf(&b, " | staged %.0f%%", 100*st.staged/float64(st.req.count))
	}
	return b.String()
}

func perWriteMs(d time.Duration, writes int) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)/float64(writes))
}

// checkPart is one cross-check's median rate and the median of its ratios
// to the client's rate in the same run.
func checkPart(name string, s sample, ratios []float64) string {
	ratio := 0.0
	if len(ratios) > 0 {
		slices.Sort(ratios)
		ratio = ratios[len(ratios)/2]
	}
	out := fmt.Sprintf("%s %.0f/s (%.2fx the client's), p50 %s p99 %s, %.1fs", name, s.rate(), ratio,
		round(s.pct(0.5)), round(s.pct(0.99)), s.window.Seconds())
	if s.writes > 0 {
		who := "gateway"
		if name == "floor" {
			who = "server"
		}
		out += ", " + who + " cpu/w " + perWriteMs(s.cpu, s.writes)
		if s.cpu == 0 {
			// /proc counts CPU in clock ticks (10 ms): a short window of
			// few writes (a disk stalled by other work) can use less.
			out += " (under one clock tick in all)"
		}
	}
	if s.writes > 0 && s.self > 0 {
		out += ", generator CPU/w " + perWriteMs(s.self, s.writes)
	}
	if st := s.stages; st.valid && st.req.count > 0 {
		out += fmt.Sprintf(", gateway request %.2fms", st.req.sum*1000/float64(st.req.count))
	}
	if s.errs > 0 {
		out += fmt.Sprintf(", %d NOT OK", s.errs)
	}
	return out
}

func printRow(w io.Writer, path string, c int, gw, base sample) {
	perWrite := func(n int64, s sample) string {
		if s.writes == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(n)/float64(s.writes))
	}
	cpu, syncs, commits := "-", "-", "-"
	if gw.writes > 0 {
		cpu = perWriteMs(gw.cpu, gw.writes)
		if gw.syncs >= 0 {
			syncs = perWrite(int64(gw.syncs), gw)
		}
		switch {
		case gw.pg.valid:
			commits = perWrite(gw.pg.commits, gw) + " walsync/w " + perWrite(gw.pg.walSyncs, gw)
		case path != "postgres" && gw.stages.valid && gw.stages.batches > 0:
			// gateway dev's embedded store: a batch is one bbolt write transaction
			commits = fmt.Sprintf("%.2f", gw.stages.batches/float64(gw.writes))
		}
	}
	ratio := 0.0
	if base.rate() > 0 {
		ratio = gw.rate() / base.rate()
	}
	fmt.Fprintf(w, "%-9s %3d %9.0f %8s %8s | %-18s %9.0f %8s %8s | %5.2fx | %7s %9s %s\n",
		path, c, gw.rate(), round(gw.pct(0.5)), round(gw.pct(0.99)),
		baselineName[path], base.rate(), round(base.pct(0.5)), round(base.pct(0.99)), ratio, cpu, syncs, commits)
	if base.pg.valid && base.writes > 0 {
		fmt.Fprintf(w, "%-9s %3s %9s %8s %8s | %-18s commit/w %s walsync/w %s\n", "", "", "", "", "", "  (pgbench)",
			perWrite(base.pg.commits, base), perWrite(base.pg.walSyncs, base))
	}
	if gw.pgcpu.valid || base.pgcpu.valid {
		line := fmt.Sprintf("%14s postgres server per write: gateway %s | pgbench %s", "", pgCPULine(gw.pgcpu), pgCPULine(base.pgcpu))
		if g, b := gw.pgcpu.perWrite(), base.pgcpu.perWrite(); g > 0 && b > 0 {
			line += fmt.Sprintf(" | pgcpu ratio %.2fx", float64(g)/float64(b))
		}
		fmt.Fprintln(w, line)
	}
}

// perWrite is the bench database's backends' CPU per write (0: not measured).
func (d pgCPUDelta) perWrite() time.Duration {
	if !d.valid || d.writes == 0 {
		return 0
	}
	return d.backends / time.Duration(d.writes)
}

// pgCPULine is one side's pgcpu/w, pgsrv/w and wal/w.
func pgCPULine(d pgCPUDelta) string {
	if !d.valid || d.writes == 0 {
		return "-"
	}
	n := float64(d.writes)
	return fmt.Sprintf("pgcpu/w %.3fms pgsrv/w %.3fms wal/w %.0fB (%d writes in %.1fs)",
		float64(d.backends)/float64(time.Millisecond)/n, float64(d.server)/float64(time.Millisecond)/n,
		float64(d.wal)/n, d.writes, d.to.Sub(d.from).Seconds())
}

func round(d time.Duration) string {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	default:
		return d.Round(10 * time.Microsecond).String()
	}
}
