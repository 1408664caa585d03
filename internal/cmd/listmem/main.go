// Command listmem measures a gateway's memory under parallel listings of one
// large operation: it fills the operation with receipts (writers on several
// resources, one operation ID), then has several clients page through the
// whole operation at once, and prints the gateway's resident set size (VmRSS
// from /proc) before, at its highest during, and after the listings. Writes go
// through the project's client (package client); the listings read raw pages,
// since their size in bytes is what is measured. Run by
// scripts/list-memory.sh against the built binary.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fgclient "github.com/fencegate/fencegate/client"
)

func main() {
	gw := flag.String("gateway", "http://127.0.0.1:18090", "gateway URL")
	token := flag.String("token", "token-a", "workload credential")
	pid := flag.Int("pid", 0, "the gateway's process ID (for /proc/PID/status)")
	receipts := flag.Int("receipts", 20_000, "receipts to write under the operation")
	writers := flag.Int("writers", 8, "parallel writers while filling")
	listers := flag.Int("listers", 8, "parallel listings")
	limit := flag.Int("limit", 1000, "page size the listings ask for")
	flag.Parse()
	c := &client{base: *gw, token: *token}
	gc := fgclient.New(*gw, *token)
	ctx := context.Background()
	op := fmt.Sprintf("op-mem-%d", time.Now().UnixNano())

	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	per := *receipts / *writers
	for w := range *writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("mem/%s/%d", op, w)
			l, err := gc.AcquireLease(ctx, fgclient.LeaseParams{AcquireParams: fgclient.AcquireParams{
				Resource: "local/" + key, RequestID: "req-" + key, TTL: time.Hour, OperationID: op}})
			if err != nil {
				fmt.Fprintln(os.Stderr, "acquire:", err)
				failed.Add(1)
				return
			}
			objects := l.Objects("local")
			for seg := 1; seg <= per; seg++ {
				if _, err := objects.Put(ctx, key+"/part", strings.NewReader(fmt.Sprintf("segment %d", seg)), "text/plain"); err != nil {
					fmt.Fprintln(os.Stderr, "put:", err)
					failed.Add(1)
					return
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		os.Exit(1)
	}
	fmt.Printf("filled %d receipts under %s in %s\n", per**writers, op, time.Since(start).Round(time.Millisecond))

	before := rss(*pid)
	var peak atomic.Int64
	peak.Store(before)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				if v := rss(*pid); v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	}()
	var pages, bytesRead, maxPage, seen atomic.Int64
	start = time.Now()
	for range *listers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cursor := ""
			for {
				n, size, next, err := c.page(op, *limit, cursor)
				if err != nil {
					fmt.Fprintln(os.Stderr, "list:", err)
					failed.Add(1)
					return
				}
				pages.Add(1)
				bytesRead.Add(int64(size))
				seen.Add(int64(n))
				for m := maxPage.Load(); int64(size) > m && !maxPage.CompareAndSwap(m, int64(size)); m = maxPage.Load() {
				}
				if next == "" {
					return
				}
				cursor = next
			}
		}()
	}
	wg.Wait()
	close(stop)
	took := time.Since(start)
	after := rss(*pid)
	if failed.Load() > 0 {
		os.Exit(1)
	}
	fmt.Printf("%d listings of the whole operation (limit=%d): %d pages, %d receipts, %.1f MiB read, largest answer %.1f KiB, %s\n",
		*listers, *limit, pages.Load(), seen.Load(), float64(bytesRead.Load())/(1<<20), float64(maxPage.Load())/1024, took.Round(time.Millisecond))
	fmt.Printf("gateway RSS: before %.1f MiB, peak during %.1f MiB, after %.1f MiB\n", mib(before), mib(peak.Load()), mib(after))
}

func mib(kb int64) float64 { return float64(kb) / 1024 }

// rss is VmRSS of pid in KiB (0 if unreadable).
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// client reads raw pages of receipts, for their size in bytes.
type client struct{ base, token string }

func (c *client) do(method, path string, hdr map[string]string, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// page reads one page and returns its receipt count, its size and next.
func (c *client) page(op string, limit int, cursor string) (int, int, string, error) {
	q := url.Values{"operationId": {op}, "limit": {strconv.Itoa(limit)}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	st, b, err := c.do("GET", "/v1/receipts?"+q.Encode(), nil, "")
	if err != nil || st != http.StatusOK {
		return 0, 0, "", fmt.Errorf("%d %.200s %v", st, b, err)
	}
	var p struct {
		Receipts []json.RawMessage `json:"receipts"`
		Next     string            `json:"next"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return 0, 0, "", err
	}
	return len(p.Receipts), len(b), p.Next, nil
}
