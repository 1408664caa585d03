package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/internal/testenv"
)

const (
	storeName  = "s3c"
	adminToken = "chaos-ops"
	replicas   = 3
)

// cluster is everything one chaos run starts: the replicas, the links from
// each replica to its stores, the etcd cluster of the registry, the journal
// of what clients saw, and counters of what was injected.
type cluster struct {
	t         *testing.T
	dir       string
	replicas  []*replica
	registry  *replica // the one `gateway registry` process, on the etcd cluster
	pgLinks   []*link  // replica i -> Postgres
	s3Links   []*link  // replica i -> S3
	etcd      *testenv.EtcdCluster
	ownS3     *testenv.Versitygw // the S3 server when it is the test's own (it may be paused)
	s3        *s3Reader
	resources []string
	tokens    []string
	journal   journal

	mu     sync.Mutex
	counts map[string]int
}

// count adds one to the named counter.
func (c *cluster) count(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[name]++
}

// injections is how often the named fault was injected.
func (c *cluster) injections(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts["fault "+name]
}

// counters returns the counters, sorted by name, one "name: n" per line.
func (c *cluster) counters() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.counts))
	for k := range c.counts {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "  %-40s %d\n", k+":", c.counts[k])
	}
	return b.String()
}

// pickReplica picks a random replica, preferring one that is up; a worker
// may still reach one that is being killed.
func (c *cluster) pickReplica(rng *rand.Rand) int {
	for range 4 {
		i := rng.IntN(len(c.replicas))
		if c.replicas[i].up() {
			return i
		}
	}
	return rng.IntN(len(c.replicas))
}

// clusterSpec says what the run starts with.
type clusterSpec struct {
	workers   int
	resources int
	pgURL     string // the fence store's database (its host:port is proxied)
	// deferSettle is every replica's deferSettle window ("" or "0s": off).
	deferSettle string
	s3          testenv.S3
}

// startCluster starts the etcd cluster, the links and three replicas.
func startCluster(t *testing.T, spec clusterSpec) *cluster {
	t.Helper()
	srv := spec.s3
	c := &cluster{t: t, dir: t.ArtifactDir(), counts: map[string]int{}}
	c.etcd = testenv.OwnEtcdCluster(t)
	prefix := testenv.RandomName("chaos_")
	c.s3 = newS3Reader(t, srv, prefix)
	for i := range spec.resources {
		c.resources = append(c.resources, fmt.Sprintf("%s/r%d", storeName, i))
	}
	for i := range spec.workers {
		c.tokens = append(c.tokens, fmt.Sprintf("token-%d-%s", i, testenv.RandomName("")))
	}
	pg, err := url.Parse(spec.pgURL)
	if err != nil {
		t.Fatal(err)
	}
	s3u, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ls := newLinks()
	bin := binary(t)
	etcdURL := "etcd://" + strings.Join(c.etcd.Endpoints(), ",") + "?prefix=/" + prefix + "/"
	regDir := filepath.Join(c.dir, "registry")
	regCfg := filepath.Join(c.dir, "registry.yaml")
	rc := registryConfig{DataDir: regDir, FenceStore: spec.pgURL, Backend: etcdURL, Identities: c.tokens}
	if err := os.WriteFile(regCfg, []byte(rc.yaml()), 0o600); err != nil {
		t.Fatal(err)
	}
	c.registry = &replica{idx: -1, sub: "registry", bin: bin, addr: freeAddr(t), cfgPath: regCfg,
		logPath: filepath.Join(c.dir, "registry.log")}
	t.Cleanup(func() {
		if err := c.registry.stop(); err != nil {
			t.Errorf("%v", err)
		}
	})
	bundle := filepath.Join(regDir, "trust-bundle.json") // written by the registry at its first start
	for i := range replicas {
		pl := ls.open(t, fmt.Sprintf("pg-%d", i), pg.Host)
		sl := ls.open(t, fmt.Sprintf("s3-%d", i), s3u.Host)
		c.pgLinks, c.s3Links = append(c.pgLinks, pl), append(c.s3Links, sl)
		viaPG := *pg
		viaPG.Host = pl.Addr()
		q := url.Values{"endpoint": {"http://" + sl.Addr()}, "region": {srv.Region}, "pathStyle": {"true"}}
		mode := "proof"
		if i == replicas-1 {
			mode = "query" // one replica asks the registry for each grant's status
		}
		cfg := replicaConfig{
			DataDir: filepath.Join(c.dir, fmt.Sprintf("data-%d", i)), FenceStore: viaPG.String(),
			Store:  "s3://" + srv.Bucket + "/" + prefix + "?" + q.Encode(),
			Bundle: bundle, StatusMode: mode, RegistryURL: c.registry.base(), Identities: c.tokens,
			DeferSettle: spec.deferSettle,
		}
		path := filepath.Join(c.dir, fmt.Sprintf("replica-%d.yaml", i))
		if err := os.WriteFile(path, []byte(cfg.yaml()), 0o600); err != nil {
			t.Fatal(err)
		}
		r := &replica{idx: i, bin: bin, addr: freeAddr(t), cfgPath: path,
			logPath: filepath.Join(c.dir, fmt.Sprintf("replica-%d.log", i)), env: s3Env(srv)}
		c.replicas = append(c.replicas, r)
		t.Cleanup(func() {
			if err := r.stop(); err != nil {
				t.Errorf("%v", err)
			}
		})
	}
	// The registry writes its signing key and trust bundle; the replicas
	// start on them.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, r := range append([]*replica{c.registry}, c.replicas...) {
		if err := r.start(ctx); err != nil {
			t.Fatalf("%v\n%s", err, tail(r.logPath, 40))
		}
	}
	return c
}

// s3Env gives a replica the S3 server's credentials through the SDK's default
// chain, and nothing from the machine's own AWS configuration.
func s3Env(srv testenv.S3) []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey,
		"AWS_SESSION_TOKEN=", "AWS_PROFILE=", "AWS_REGION=", "AWS_DEFAULT_REGION=",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true",
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// s3Reader reads the run's objects straight from S3 (no proxy, no gateway)
// and removes them when the test ends.
type s3Reader struct {
	srv    testenv.S3
	prefix string
	client *s3.Client
}

func newS3Reader(t *testing.T, srv testenv.S3, prefix string) *s3Reader {
	r := &s3Reader{srv: srv, prefix: prefix, client: s3.New(s3.Options{
		Region: srv.Region, BaseEndpoint: aws.String(srv.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
	})}
	t.Cleanup(func() { r.empty() })
	return r
}

// get returns the object's body, "" when it does not exist.
func (r *s3Reader) get(ctx context.Context, key string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := r.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(r.srv.Bucket), Key: aws.String(r.prefix + "/" + key)})
	var nk *types.NoSuchKey
	if errors.As(err, &nk) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	return string(b), err
}

// empty deletes every object under the prefix.
func (r *s3Reader) empty() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := s3.NewListObjectsV2Paginator(r.client, &s3.ListObjectsV2Input{Bucket: aws.String(r.srv.Bucket), Prefix: aws.String(r.prefix + "/")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return
		}
		for _, o := range page.Contents {
			_, _ = r.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(r.srv.Bucket), Key: o.Key})
		}
	}
}

// keepLogs copies the replicas' logs and configs and the etcd members' logs
// to dir, which outlives the test.
func keepLogs(dir string, c *cluster) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, r := range append([]*replica{c.registry}, c.replicas...) {
		for _, p := range []string{r.logPath, r.cfgPath} {
			if b, err := os.ReadFile(p); err == nil {
				_ = os.WriteFile(filepath.Join(dir, filepath.Base(p)), b, 0o644)
			}
		}
	}
	return os.WriteFile(filepath.Join(dir, "etcd.log"), []byte(c.etcd.Logs()), 0o644)
}

// grepLines returns the lines of the file at path that contain substr.
func grepLines(path, substr string) []string {
	b, _ := os.ReadFile(path)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}
