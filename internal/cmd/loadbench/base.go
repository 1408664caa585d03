package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	bolt "go.etcd.io/bbolt"
)

// boltBaseline is the embedded path without the gateway: per write, one
// bbolt Update putting a receipt-sized record and the object file written
// as the local store writes it (temporary file, fsync, rename, directory
// fsync). Workers run concurrently; bbolt serialises the Updates.
func boltBaseline(ctx context.Context, dir string, c int, d time.Duration) (sample, error) {
	db, err := bolt.Open(filepath.Join(dir, "baseline.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return sample{}, err
	}
	defer db.Close()
	objects := filepath.Join(dir, "baseline-objects")
	if err := os.MkdirAll(objects, 0o700); err != nil {
		return sample{}, err
	}
	body := body1K
	rec, _ := json.Marshal(map[string]any{"id": "rcpt-0123456789abcdef", "resource": "local/bench/x", "state": "COMMITTED",
		"fence": 7, "segment": 1, "payloadDigest": "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"})
	op := func(w, n int) error {
		key := fmt.Sprintf("w%d-%d", w, n)
		if err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("receipts"))
			if err != nil {
				return err
			}
			return b.Put([]byte(key), rec)
		}); err != nil {
			return err
		}
		return writeFile(objects, fmt.Sprintf("w%d", w), body)
	}
	return runWorkers(ctx, c, d, counters{}, func(int) error { return nil }, op)
}

// writeFile is a twin of backends/local bench_test.go bareWrite, the
// baseline BenchmarkBareFileWrite times (keep the two alike; a main package
// cannot be imported, and a test file cannot export).
func writeFile(dir, name string, body []byte) error {
	f, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return err
	}
	if _, err := f.Write(body); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	dh, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer dh.Close()
	return dh.Sync()
}

// s3Target is the S3-compatible server the S3 path writes to.
type s3Target struct {
	endpoint, bucket, region, accessKey, secretKey string
}

// storeURL is the gateway's --store URL (after "NAME=") of the bucket's
// prefix on t.
func (t s3Target) storeURL(prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&region=%s&pathStyle=true", t.bucket, prefix, t.endpoint, t.region)
}

func (t s3Target) client() *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(t.endpoint),
		Region:       t.region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(t.accessKey, t.secretKey, ""),
	})
}

// s3Baseline is the same 1 KiB PUTs straight to the server with
// aws-sdk-go-v2, one key per worker, each PUT conditional on the last ETag
// as the gateway writes them (If-None-Match: * first, then If-Match).
func s3Baseline(ctx context.Context, t s3Target, prefix string, c int, d time.Duration) (sample, error) {
	cl := t.client()
	body := body1K
	etags := make([]*string, c)
	op := func(w, n int) error {
		in := &s3.PutObjectInput{Bucket: aws.String(t.bucket), Key: aws.String(fmt.Sprintf("%s/%d", prefix, w)),
			Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))}
		if etags[w] == nil {
			in.IfNoneMatch = aws.String("*")
		} else {
			in.IfMatch = etags[w]
		}
		out, err := cl.PutObject(ctx, in)
		if err != nil {
			return err
		}
		etags[w] = out.ETag
		return nil
	}
	return runWorkers(ctx, c, d, counters{}, func(int) error { return nil }, op)
}
