// Package testenv hands tests the real servers they need (Postgres, Redis, S3,
// etcd). A server that is not configured makes the test skip on a developer's
// machine but fail under CI (CI=true), so no suite skips silently in CI.
// scripts/test.sh starts the servers and exports the variables read here.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// need returns the value of env var name, or skips (fails under CI) when unset.
func need(t testing.TB, name, what string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set: the %s suite must run in CI (scripts/test.sh sets it)", name, what)
		}
		t.Skipf("%s is not set; run `make test` to start %s", name, what)
	}
	return v
}

// DebianClient is the path of one of Debian's S3 command-line clients run
// unmodified by the tests (name: aws, rclone, s3cmd): $FENCEGATE_TEST_<NAME>,
// else /usr/bin/<bin> (scripts/services.sh ensure_s3clients installs them).
// Missing, it fails in CI and skips elsewhere.
func DebianClient(t testing.TB, name, bin string) string {
	t.Helper()
	path := os.Getenv("FENCEGATE_TEST_" + strings.ToUpper(name))
	if path == "" {
		path = "/usr/bin/" + bin
	}
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not installed at %s (scripts/services.sh ensure_s3clients)", name, path)
		}
		t.Skipf("%s not installed at %s (scripts/services.sh ensure_s3clients)", name, path)
	}
	return path
}

// RandomName returns prefix followed by 12 random hex characters.
func RandomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// PostgresURL returns a connection URL whose search_path is a fresh schema,
// dropped when the test ends. It reads FENCEGATE_TEST_PG.
func PostgresURL(t testing.TB) string {
	t.Helper()
	base := need(t, "FENCEGATE_TEST_PG", "Postgres")
	schema := RandomName("t_")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect %s: %v", base, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, base); err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			_ = c.Close(ctx)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", base, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// WithParam is dsn with the URL query parameter name set to value.
func WithParam(t testing.TB, dsn, name, value string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// SchemaTables counts the tables in the first schema of dsn's search_path
// (a PostgresURL's fresh schema): 0 until something has migrated there.
func SchemaTables(t testing.TB, dsn string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()`).Scan(&n); err != nil {
		t.Fatalf("count tables: %v", err)
	}
	return n
}

// RedisAddr returns host:port of the test Redis (FENCEGATE_TEST_REDIS).
func RedisAddr(t testing.TB) string {
	t.Helper()
	return need(t, "FENCEGATE_TEST_REDIS", "Redis")
}

// EtcdEndpoint returns the test etcd endpoint (FENCEGATE_TEST_ETCD).
func EtcdEndpoint(t testing.TB) string {
	t.Helper()
	return need(t, "FENCEGATE_TEST_ETCD", "etcd")
}

// S3 describes the test S3-compatible server.
type S3 struct {
	Endpoint  string
	Bucket    string
	AccessKey string
	SecretKey string
	Region    string
}

// S3Server returns the test S3-compatible server (FENCEGATE_TEST_S3_ENDPOINT,
// _BUCKET, _ACCESS_KEY, _SECRET_KEY). Tests isolate themselves by key prefix.
func S3Server(t testing.TB) S3 {
	t.Helper()
	ep := need(t, "FENCEGATE_TEST_S3_ENDPOINT", "the S3-compatible server")
	return S3{
		Endpoint:  strings.TrimRight(ep, "/"),
		Bucket:    need(t, "FENCEGATE_TEST_S3_BUCKET", "the S3-compatible server"),
		AccessKey: need(t, "FENCEGATE_TEST_S3_ACCESS_KEY", "the S3-compatible server"),
		SecretKey: need(t, "FENCEGATE_TEST_S3_SECRET_KEY", "the S3-compatible server"),
		Region:    "us-east-1",
	}
}
