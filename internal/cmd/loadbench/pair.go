package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// -pair (with -prefill N) holds a filled fence store against an empty one in
// the same run, as every other ratio here is held against its baseline:
// each run of a Postgres or embedded point measures the point twice, once on
// the filled store and once on a fresh, empty one, the two one after the
// other in alternating order (filled first in even runs, empty first in odd
// ones), so that a machine drifting over minutes moves both sides of a pair
// alike. printPair reports each run's filled ÷ empty ratios and their
// median: issue 12 asks a write's cost at 1,000,000 receipts to be within
// 10 % of an empty store's.

// pairs reports whether path's runs are measured in filled/empty pairs.
func (o options) pairs(path string) bool {
	return o.pair && o.prefill > 0 && (path == "postgres" || path == "embedded")
}

// measurePair measures one run of a point on the filled store (in dir, with
// prof) and on an empty one (in dir+"-empty", unprofiled), in the order run
// picks.
func measurePair(ctx context.Context, o options, path, tag, dir string, c, run int, prof string) (filled, empty point, err error) {
	e := o
	e.filled, e.filledEmbedded = "", ""
	e.checks, e.noBaseline = nil, true // the gateway alone: only its numbers are compared
	edir := dir + "-empty"
	if err := os.MkdirAll(edir, 0o700); err != nil {
		return filled, empty, err
	}
	defer os.RemoveAll(edir)
	measureFilled := func() (err error) {
		filled, err = measure(ctx, o, path, tag, dir, c, run, prof)
		return err
	}
	measureEmpty := func() (err error) {
		empty, err = measure(ctx, e, path, tag+"e", edir, c, run, "")
		if err != nil {
			err = fmt.Errorf("empty store: %w", err)
		}
		return err
	}
	first, second := measureFilled, measureEmpty
	if run%2 == 1 {
		first, second = measureEmpty, measureFilled
	}
	if err := first(); err != nil {
		return filled, empty, err
	}
	return filled, empty, second()
}

// printPair prints, under a point's row (the filled store's runs), each
// run's filled ÷ empty ratios of writes/s, gateway CPU per write and
// request time, their medians, the empty store's median run, and the
// embedded store files' sizes after the window.
func printPair(w io.Writer, prefill int, filled, empty []point) {
	var rate, cpu, req []float64
	var es []sample
	for i := range min(len(filled), len(empty)) {
		f, e := filled[i].gw, empty[i].gw
		es = append(es, e)
		if f.writes == 0 || e.writes == 0 {
			continue
		}
		rate = append(rate, f.rate()/e.rate())
		if f.cpu > 0 && e.cpu > 0 {
			cpu = append(cpu, (float64(f.cpu)/float64(f.writes))/(float64(e.cpu)/float64(e.writes)))
		}
		if fr, er := reqMs(f), reqMs(e); fr > 0 && er > 0 {
			req = append(req, fr/er)
		}
	}
	if len(es) == 0 {
		return
	}
	fmt.Fprintf(w, "%14s filled (%d receipts) ÷ empty, each run's pair (order alternating): writes/s %s; gateway cpu/w %s; request ms %s\n",
		"", prefill, ratios(rate), ratios(cpu), ratios(req))
	em := median(es)
	line := fmt.Sprintf("empty store (median run): %.0f writes/s", em.rate())
	if em.writes > 0 && em.cpu > 0 {
		line += ", cpu/w " + perWriteMs(em.cpu, em.writes)
	}
	if r := reqMs(em); r > 0 {
		line += fmt.Sprintf(", request %.2f ms", r)
	}
	if fb, eb := filled[0].gw.storeBytes, empty[0].gw.storeBytes; fb > 0 && eb > 0 {
		line += fmt.Sprintf("; fence store files after the first run: %d KiB filled, %d KiB empty", fb>>10, eb>>10)
	}
	fmt.Fprintf(w, "%14s %s\n", "", line)
}

// reqMs is the gateway's mean request time per write in ms (0: not known).
func reqMs(s sample) float64 {
	if st := s.stages; st.valid && st.req.count > 0 {
		return st.req.sum * 1000 / float64(st.req.count)
	}
	return 0
}

// ratios prints each value and their median ("-" for none).
func ratios(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return fmt.Sprintf("%s (median %.2fx)", strings.Join(parts, " "), m)
}
