package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/s3"
	fggateway "github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/loopback"
)

// The floor: what a write that lands in the path's object store costs a
// process without any fencing. A bare net/http server (this program again,
// started with floorEnv set) writes each PUT's body with the gateway's own
// object store adapter, as the gateway's effect does (a conditional Put on
// the key's last ETag, with the same effect metadata, SHA-256 digest and
// land-by deadline: for backends/local file write and sync, rename,
// batched directory sync; for backends/s3 one presigned PUT), and answers a
// small JSON body. Plain net/http workers drive it, one key each, as the
// http cross-check drives the gateway. Its CPU per write is the least the
// gateway's process could spend on such a write (no grant, status proof,
// fence store, receipt or settle); its rate, what the machine allows a
// 1 KiB write through HTTP into that store at that concurrency.

// floorEnv holds "ADDR STORE" in the environment of a floor server process:
// STORE is local:DIR or an s3:// URL as the gateway's --store takes it (the
// credentials in the AWS_* environment).
const floorEnv = "LOADBENCH_FLOOR"

// floorMain serves the floor if this process was started as one (floorEnv
// set), and then exits; otherwise it returns.
func floorMain() {
	spec := os.Getenv(floorEnv)
	if spec == "" {
		return
	}
	var addr, store string
	if _, err := fmt.Sscan(spec, &addr, &store); err != nil {
		fmt.Fprintf(os.Stderr, "loadbench floor: bad %s %q: %v\n", floorEnv, spec, err)
		os.Exit(2)
	}
	if err := serveFloor(addr, store); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench floor:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveFloor serves PUT /o/{key} (writes the body) and GET /healthz on
// addr, with the object store store names (see floorEnv), until the
// process is stopped.
func serveFloor(addr, store string) error {
	st, err := openFloorStore(store)
	if err != nil {
		return err
	}
	var (
		mu    sync.Mutex
		etags = map[string]string{} // each key's last ETag: the next Put's condition
		segs  = map[string]uint64{}
	)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("PUT /o/{key...}", func(w http.ResponseWriter, r *http.Request) {
		key := r.PathValue("key")
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sum := sha256.Sum256(body)
		mu.Lock() // one worker writes each key, so its entry stays current until it writes again
		prev := etags[key]
		segs[key]++
		seg := segs[key]
		mu.Unlock()
		ctx := fencegate.WithLandBy(r.Context(), time.Now().Add(floorEffectTimeout))
		etag, err := st.Put(ctx, fencegate.PutRequest{Key: key, Body: bytes.NewReader(body), Size: int64(len(body)),
			ContentType: r.Header.Get("Content-Type"), IfMatch: prev, IfNoneMatch: prev == "",
			Meta: fencegate.EffectMeta{FenceToken: 7, Segment: seg, Root: "root_floor", OperationID: "op_floor",
				PayloadDigest: "sha256:" + hex.EncodeToString(sum[:]), ReceiptID: fggateway.NewOrderedID("rcpt_", time.Now())}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		mu.Lock()
		etags[key] = etag
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"state": "COMMITTED", "version": etag, "segment": seg})
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// floorEffectTimeout is the land-by deadline the floor gives each write
// after its start: the gateway's default effectTimeout.
const floorEffectTimeout = 60 * time.Second

// openFloorStore opens store (local:DIR or an s3:// URL) as the gateway's
// adapters do.
func openFloorStore(store string) (fencegate.ObjectStore, error) {
	if dir, ok := strings.CutPrefix(store, "local:"); ok {
		return local.New("local", dir)
	}
	u, err := s3.ParseURL(store)
	if err != nil {
		return nil, err
	}
	return s3.OpenURL(context.Background(), "floor", u)
}

// startFloor starts a floor server process (this executable with floorEnv)
// on a free loopback port, writing to store (local:DIR or an s3:// URL, its
// credentials in env), its log in dir, and waits for /healthz. Its CPU is
// read from /proc like the gateway's; it has no metrics or strace.
func startFloor(ctx context.Context, dir, store string, env []string) (*gateway, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr, err := loopback.FreeAddr()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "floor.log"))
	if err != nil {
		return nil, err
	}
	g := &gateway{url: "http://" + addr, logf: logf, stderr: logf.Name()}
	g.cmd = exec.Command(exe)
	g.cmd.Env = append(append(os.Environ(), env...), floorEnv+"="+addr+" "+store)
	g.cmd.Stdout, g.cmd.Stderr = logf, logf
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := g.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	g.pid = g.cmd.Process.Pid
	if err := g.waitHealthy(ctx, 15*time.Second); err != nil {
		return nil, fmt.Errorf("floor server %w", err)
	}
	return g, nil
}

// floorCheck runs the floor at c for d: a fresh floor server writing to
// store (its log in dir), c plain net/http workers each PUTting 1 KiB
// bodies to a key of its own.
func floorCheck(ctx context.Context, dir, store string, env []string, c int, d time.Duration) (sample, error) {
	g, err := startFloor(ctx, dir, store, env)
	if err != nil {
		return sample{}, err
	}
	defer g.stop()
	tr := &http.Transport{MaxIdleConnsPerHost: c, MaxConnsPerHost: c, DisableCompression: true}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	op := func(w, n int) error {
		url := g.url + "/o/floor/w" + strconv.Itoa(w)
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(body1K))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := cl.Do(req)
		if err != nil {
			return err
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("floor PUT %s write %d: %d %.200s", url, n, resp.StatusCode, data)
		}
		return nil
	}
	s, err := runWorkers(ctx, c, d, counters{gw: g}, func(int) error { return nil }, op)
	if err != nil {
		log, _ := os.ReadFile(g.stderr)
		return s, fmt.Errorf("%w\nfloor log:\n%s", err, tail(string(log), 2000))
	}
	return s, nil
}
