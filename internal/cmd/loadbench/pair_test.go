package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestPairHoldsTheFilledStoreAgainstAnEmptyOneInTheSameRuns: with -prefill
// and -pair, every embedded run measures the point on the filled store and
// on an empty one, and the pair line gives one ratio per run; the filled
// store's file, after its window, is larger than the empty one's, so the
// empty side really started empty. It checks what is measured, not how fast.
func TestPairHoldsTheFilledStoreAgainstAnEmptyOneInTheSameRuns(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), options{paths: []string{"embedded"}, conc: []int{1}, d: 200 * time.Millisecond,
		runs: 2, bin: testenv.GatewayBinary(t), out: &out, prefill: 3000, pair: true, checks: map[string]bool{}})
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	pair := regexp.MustCompile(`filled \(3000 receipts\) ÷ empty, each run's pair \(order alternating\): writes/s ([0-9.]+) ([0-9.]+) \(median ([0-9.]+)x\); gateway cpu/w [0-9.]+ [0-9.]+ `).FindStringSubmatch(text)
	if pair == nil {
		t.Fatalf("no pair line with two runs' ratios in:\n%s", text)
	}
	for _, r := range pair[1:] {
		if v, _ := strconv.ParseFloat(r, 64); v <= 0 {
			t.Fatalf("ratio %s in %q", r, pair[0])
		}
	}
	sz := regexp.MustCompile(`other side \(median run\): ([0-9]+) writes/s.*fence store files after the first run: ([0-9]+) KiB this side, ([0-9]+) KiB the other`).FindStringSubmatch(text)
	if sz == nil || sz[1] == "0" {
		t.Fatalf("no empty store line with a rate and the files' sizes in:\n%s", text)
	}
	filled, _ := strconv.Atoi(sz[2])
	empty, _ := strconv.Atoi(sz[3])
	if filled <= empty {
		t.Fatalf("filled store file %d KiB, empty %d KiB: the empty side was not empty or the filled one not filled", filled, empty)
	}
}

// TestAgainstHoldsOneGatewayAgainstAnotherInTheSameRuns: with -against,
// every run measures the point with both binaries (the other one here is
// the gateway behind a script that counts its starts, so the test sees it
// ran once per run), and the pair line gives one ratio per run for the rate
// and the gateway's CPU. It checks what is measured, not how fast.
func TestAgainstHoldsOneGatewayAgainstAnotherInTheSameRuns(t *testing.T) {
	var out bytes.Buffer
	bin := testenv.GatewayBinary(t)
	dir := t.TempDir()
	starts := filepath.Join(dir, "starts")
	other := filepath.Join(dir, "other-gateway")
	script := fmt.Sprintf("#!/bin/sh\necho x >> %q\nexec %q \"$@\"\n", starts, bin)
	if err := os.WriteFile(other, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), options{paths: []string{"embedded"}, conc: []int{1}, d: 200 * time.Millisecond,
		runs: 2, bin: bin, against: other, out: &out, checks: map[string]bool{}})
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if got, _ := os.ReadFile(starts); strings.Count(string(got), "x") != 2 {
		t.Fatalf("the other gateway started %d times, want once per run (2)", strings.Count(string(got), "x"))
	}
	pair := regexp.MustCompile(`this gateway ÷ ` + regexp.QuoteMeta(other) + `, each run's pair \(order alternating\): writes/s ([0-9.]+) ([0-9.]+) \(median [0-9.]+x\); gateway cpu/w ([0-9.]+) ([0-9.]+) `).FindStringSubmatch(text)
	if pair == nil {
		t.Fatalf("no pair line with two runs' ratios in:\n%s", text)
	}
	for _, r := range pair[1:] {
		if v, _ := strconv.ParseFloat(r, 64); v <= 0 {
			t.Fatalf("ratio %s in %q", r, pair[0])
		}
	}
	if m := regexp.MustCompile(`other side \(median run\): ([0-9]+) writes/s`).FindStringSubmatch(text); m == nil || m[1] == "0" {
		t.Fatalf("no other side with a rate in:\n%s", text)
	}
}
