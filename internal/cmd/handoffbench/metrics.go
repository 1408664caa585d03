package main

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"time"
)

// bucketLine matches one bucket of the gateway's handoff histogram.
var bucketLine = regexp.MustCompile(`^fencegate_lock_handoff_seconds_bucket\{stage="([a-z]+)",le="([^"]+)"\} (\S+)$`)

type bucket struct{ le, count float64 }

// serverHandoffs reads fencegate_lock_handoff_seconds from the gateway's
// operator listener and returns, per stage, the observation count and p50
// and p99 estimated from the buckets the way PromQL's histogram_quantile
// does (linear within a bucket), so the gateway's own view can be set beside
// the client's.
func serverHandoffs(url string) (map[string][3]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	stages := map[string][]bucket{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := bucketLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		le, _ := strconv.ParseFloat(m[2], 64) // "+Inf" parses as +Inf
		c, _ := strconv.ParseFloat(m[3], 64)
		stages[m[1]] = append(stages[m[1]], bucket{le, c})
	}
	out := map[string][3]float64{}
	for st, bs := range stages {
		sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
		total := bs[len(bs)-1].count
		out[st] = [3]float64{total, quantile(bs, 0.5), quantile(bs, 0.99)}
	}
	return out, sc.Err()
}

func quantile(bs []bucket, q float64) float64 {
	total := bs[len(bs)-1].count
	if total == 0 {
		return math.NaN()
	}
	rank, lower, below := q*total, 0.0, 0.0
	for _, b := range bs {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				return lower
			}
			return lower + (b.le-lower)*(rank-below)/(b.count-below)
		}
		lower, below = b.le, b.count
	}
	return lower
}

func printServer(url string) {
	st, err := serverHandoffs(url)
	if err != nil {
		fmt.Printf("gateway metrics: %v\n", err)
		return
	}
	fmt.Printf("\ngateway's fencegate_lock_handoff_seconds (bucket estimates, all kinds together)\n%-28s %10s %10s %10s\n", "stage", "count", "p50", "p99")
	for _, name := range []string{"grant", "write", "total"} {
		v := st[name]
		fmt.Printf("%-28s %10.0f %10s %10s\n", name, v[0], time.Duration(v[1]*float64(time.Second)).Round(10*time.Microsecond),
			time.Duration(v[2]*float64(time.Second)).Round(10*time.Microsecond))
	}
}
