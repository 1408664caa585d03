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
//
// -against BIN holds one gateway binary against another the same way, on
// every path: each run measures the point with -gateway-bin and with BIN,
// in alternating order, and printPair reports this gateway ÷ BIN. It is how
// a change's speed is measured here (the gateway of the change against the
// one before it), rather than by comparing runs made minutes apart.

// pairs reports whether path's runs are measured in pairs.
func (o options) pairs(path string) bool {
	return o.against != "" || o.pair && o.prefill > 0 && (path == "postgres" || path == "embedded")
}

// pairLabel names what a pair line divides by what.
func (o options) pairLabel() string {
	if o.against != "" {
		return fmt.Sprintf("this gateway ÷ %s", o.against)
	}
	return fmt.Sprintf("filled (%d receipts) ÷ empty", o.prefill)
}

// measurePair measures one run of a point as o says (in dir, with prof) and
// its other side, unprofiled, in the order run picks: on an empty store
// (-pair) or with the gateway -against names.
func measurePair(ctx context.Context, o options, path, tag, dir string, c, run int, prof string) (this, other point, err error) {
	e := o
	what := "empty store"
	if o.against != "" {
		e.bin, what = o.against, o.against
	} else {
		e.filled, e.filledEmbedded = "", ""
	}
	e.checks, e.noBaseline = nil, true // the gateway alone: only its numbers are compared
	edir := dir + "-other"
	if err := os.MkdirAll(edir, 0o700); err != nil {
		return this, other, err
	}
	defer os.RemoveAll(edir)
	measureThis := func() (err error) {
		this, err = measure(ctx, o, path, tag, dir, c, run, prof)
		return err
	}
	measureOther := func() (err error) {
		other, err = measure(ctx, e, path, tag+"e", edir, c, run, "")
		if err != nil {
			err = fmt.Errorf("%s: %w", what, err)
		}
		return err
	}
	first, second := measureThis, measureOther
	if run%2 == 1 {
		first, second = measureOther, measureThis
	}
	if err := first(); err != nil {
		return this, other, err
	}
	return this, other, second()
}

// printPair prints, under a point's row (this side's runs), each run's
// this ÷ other ratios of writes/s, gateway CPU per write, request time and
// (a Postgres server on this machine) the server's CPU per write, their
// medians, the other side's median run, and the embedded store files'
// sizes after the window.
func printPair(w io.Writer, label string, this, other []point) {
	var rate, cpu, req, pgc []float64
	var es []sample
	for i := range min(len(this), len(other)) {
		f, e := this[i].gw, other[i].gw
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
		if fp, ep := f.pgcpu.perWrite(), e.pgcpu.perWrite(); fp > 0 && ep > 0 {
			pgc = append(pgc, float64(fp)/float64(ep))
		}
	}
	if len(es) == 0 {
		return
	}
	line := fmt.Sprintf("%s, each run's pair (order alternating): writes/s %s; gateway cpu/w %s; request ms %s", label, ratios(rate), ratios(cpu), ratios(req))
	if len(pgc) > 0 {
		line += "; postgres pgcpu/w " + ratios(pgc)
	}
	fmt.Fprintf(w, "%14s %s\n", "", line)
	em := median(es)
	line = fmt.Sprintf("other side (median run): %.0f writes/s", em.rate())
	if em.writes > 0 && em.cpu > 0 {
		line += ", cpu/w " + perWriteMs(em.cpu, em.writes)
	}
	if r := reqMs(em); r > 0 {
		line += fmt.Sprintf(", request %.2f ms", r)
	}
	if fb, eb := this[0].gw.storeBytes, other[0].gw.storeBytes; fb > 0 && eb > 0 {
		line += fmt.Sprintf("; fence store files after the first run: %d KiB this side, %d KiB the other", fb>>10, eb>>10)
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
