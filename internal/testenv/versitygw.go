package testenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Versitygw is a private S3-compatible server (versitygw, posix backend)
// owned by one test: its own root directory and random loopback port, with
// one bucket. A test may pause it (SIGSTOP: connections are accepted by the
// kernel and requests queue in socket buffers, nothing is answered) and
// resume it; it never touches the shared server on 7070. It is killed and its
// directory removed when the test ends.
type Versitygw struct {
	// S3 describes the server as S3Server does the shared one.
	S3

	mu     sync.Mutex
	cmd    *exec.Cmd
	paused bool
}

// OwnVersitygw starts versitygw (on PATH, or in Go's bin directory, where
// scripts/services.sh installs it) with a fresh bucket and waits until it
// answers. Without the binary the test skips, and fails under CI=true.
func OwnVersitygw(t testing.TB) *Versitygw {
	t.Helper()
	bin, err := exec.LookPath("versitygw")
	if err != nil {
		gobin, _ := exec.Command("go", "env", "GOPATH").Output()
		cand := filepath.Join(string(trimNL(gobin)), "bin", "versitygw")
		if _, serr := os.Stat(cand); serr == nil {
			bin = cand
		}
	}
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("no versitygw binary: the suite must run in CI (scripts/services.sh installs it)")
		}
		t.Skip("no versitygw binary; run scripts/services.sh ensure_s3")
	}
	dir, err := os.MkdirTemp("", "fg-own-s3-")
	if err != nil {
		t.Fatalf("own versitygw: %v", err)
	}
	addr := FreeAddr(t)
	v := &Versitygw{S3: S3{Endpoint: "http://" + addr, Bucket: "fencegate-own", AccessKey: "own-ak",
		SecretKey: "own-sk", Region: "us-east-1"}}
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatalf("own versitygw: %v", err)
	}
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatalf("own versitygw: %v", err)
	}
	// --keep-alive: connections stay open between requests, as S3's do (see
	// ensure_s3 in scripts/services.sh).
	v.cmd = exec.Command(bin, "--access", v.AccessKey, "--secret", v.SecretKey, "--port", addr, "--keep-alive", "--quiet", "posix", root)
	v.cmd.Stdout, v.cmd.Stderr = logf, logf
	if err := v.cmd.Start(); err != nil {
		t.Fatalf("own versitygw: %v", err)
	}
	t.Cleanup(func() {
		_ = v.cmd.Process.Signal(syscall.SIGKILL)
		_ = v.cmd.Wait()
		_ = logf.Close()
		_ = os.RemoveAll(dir)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := http.Get(v.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("own versitygw does not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	client := s3.New(s3.Options{Region: v.Region, BaseEndpoint: aws.String(v.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(v.AccessKey, v.SecretKey, "")})
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(v.Bucket)}); err != nil {
		t.Fatalf("own versitygw: create bucket: %v", err)
	}
	return v
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// Pause stops the server (SIGSTOP) until Resume: it answers nothing, but the
// kernel still accepts connections and buffers what clients send, so requests
// sent meanwhile are served when it resumes, whether or not their client
// still waits.
func (v *Versitygw) Pause() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.paused {
		return fmt.Errorf("versitygw already paused")
	}
	v.paused = true
	return v.cmd.Process.Signal(syscall.SIGSTOP)
}

// Resume lets a paused server run again (SIGCONT).
func (v *Versitygw) Resume() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.paused {
		return nil
	}
	v.paused = false
	return v.cmd.Process.Signal(syscall.SIGCONT)
}
