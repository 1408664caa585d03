package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/fencegate/fencegate/internal/metrics"
)

// printVersion prints the version, VCS revision and Go version of the binary
// (the labels of fencegate_build_info).
func printVersion(w io.Writer) {
	v, rev, gov := metrics.BuildInfo()
	fmt.Fprintf(w, "gateway %s (revision %s, %s)\n", v, rev, gov)
}

// healthcheck is `gateway healthcheck [URL]`: GET URL (default
// http://127.0.0.1:8080/healthz) with a 3 s timeout; exit status 0 on 200,
// 1 otherwise. It lets images without a shell or curl (distroless, scratch)
// run a container HEALTHCHECK with the gateway binary itself.
func healthcheck(args []string) int {
	url := "http://127.0.0.1:8080/healthz"
	if len(args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: gateway healthcheck [URL]")
		return 2
	}
	if len(args) == 1 {
		url = args[0]
	}
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway healthcheck:", err)
		return 1
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "gateway healthcheck: %s answered %s\n", url, resp.Status)
		return 1
	}
	return 0
}
