package main

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stages is what the gateway's own histograms (its operator listener's
// /metrics) hold for fenced object PUTs: the sums and counts of
// fencegate_http_request_duration_seconds (PUT, route /v1/objects/...),
// fencegate_admission_duration_seconds{outcome="admitted"} and
// fencegate_effect_duration_seconds{backend="objects/..."}, and of
// fencegate_settle_duration_seconds should the gateway export one; and the
// fence store's group-commit counters (fencegate_store_batches_total,
// fencegate_store_batched_writes_total) and the writes staged beside their
// admission and used (fencegate_staged_writes_total), 0 where it exports
// none. The
// difference of two scrapes is a window's.
type stages struct {
	valid                 bool
	req, adm, eff, settle series
	batches, batched      float64
	staged                float64 // fencegate_staged_writes_total{outcome="used"}
}

// series is one histogram's sum (seconds) and count.
type series struct {
	sum   float64
	count int64
}

func (a series) minus(b series) series { return series{sum: a.sum - b.sum, count: a.count - b.count} }

func (a stages) minus(b stages) stages {
	if !a.valid || !b.valid {
		return stages{}
	}
	return stages{valid: true, req: a.req.minus(b.req), adm: a.adm.minus(b.adm), eff: a.eff.minus(b.eff),
		settle: a.settle.minus(b.settle), batches: a.batches - b.batches, batched: a.batched - b.batched,
		staged: a.staged - b.staged}
}

// scrapeStages reads the stage histograms from the operator listener at
// base; not valid when it cannot.
func scrapeStages(base string) stages {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(base + "/metrics")
	if err != nil {
		return stages{}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return stages{}
	}
	return parseStages(resp.Body)
}

// parseStages reads the Prometheus text exposition from r, keeping the
// _sum and _count samples of the stage histograms.
func parseStages(r io.Reader) stages {
	st := stages{valid: true}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		name, labels := line[:sp], ""
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name, labels = name[:i], name[i:]
		}
		switch name {
		case "fencegate_store_batches_total":
			st.batches += v
			continue
		case "fencegate_store_batched_writes_total":
			st.batched += v
			continue
		case "fencegate_staged_writes_total":
			if strings.Contains(labels, `outcome="used"`) {
				st.staged += v
			}
			continue
		}
		var s *series
		switch base := strings.TrimSuffix(strings.TrimSuffix(name, "_sum"), "_count"); {
		case base == name: // neither _sum nor _count
			continue
		case base == "fencegate_http_request_duration_seconds" && strings.Contains(labels, `route="/v1/objects/`) &&
			strings.Contains(labels, `method="PUT"`) && strings.Contains(labels, `outcome="ok"`):
			s = &st.req
		case base == "fencegate_admission_duration_seconds" && strings.Contains(labels, `outcome="admitted"`):
			s = &st.adm
		case base == "fencegate_effect_duration_seconds" && strings.Contains(labels, `backend="objects/`):
			s = &st.eff
		case base == "fencegate_settle_duration_seconds":
			s = &st.settle
		default:
			continue
		}
		if strings.HasSuffix(name, "_sum") {
			s.sum += v
		} else {
			s.count += int64(v)
		}
	}
	return st
}

// selfCPU is this process's user+system CPU time so far (getrusage).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
