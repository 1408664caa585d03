package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/testenv"
)

// The lease is the S3 credential (package s3cred): aws-sdk-go-v2's S3 client
// signs with a lease's keys against the built binary.

func (k s3Keys) door() doorLease {
	return doorLease{lease: lease{id: k.lease, fence: k.fence}, akid: k.akid, secret: k.secret}
}

func putObject(c *s3.Client, bucket, key, body string) error {
	_, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)})
	return err
}

func getObject(c *s3.Client, bucket, key string) (string, error) {
	out, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return "", err
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	return string(b), err
}

// wantRefused checks that err is the S3 error code whose message starts with
// the Fencegate code fgCode ("" for any message).
func wantRefused(t *testing.T, what string, err error, s3code, fgCode string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted, want %s %s", what, s3code, fgCode)
	}
	code, msg := s3Code(t, err)
	if code != s3code || !strings.HasPrefix(msg, fgCode) {
		t.Fatalf("%s: %s %q, want %s %s", what, code, msg, s3code, fgCode)
	}
}

// objectBody reads an object through the REST API (not the front door).
func (d *frontDoor) objectBody(t *testing.T, key string) (int, string) {
	t.Helper()
	a := d.do(t, "GET", "/v1/objects/"+key, "token-a", nil, "")
	return a.status, string(a.body)
}

func TestLeaseS3CredentialsStopWorkingTheMomentTheLeaseEnds(t *testing.T) {
	d := startFrontDoor(t, nil)
	k := d.acquireKeys(t, "token-a", "local/creds/released", "r-1", "op-cred", 60000)
	c := d.s3Client(k.door(), nil)
	if err := putObject(c, "local", "creds/released/x", "first"); err != nil {
		t.Fatalf("write under the held lease: %v", err)
	}
	if r := d.do(t, "DELETE", "/v1/leases/"+k.lease, "token-a", nil, ""); r.status != http.StatusOK {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	// The very next requests, write and reads alike, are refused.
	wantRefused(t, "write after release", putObject(c, "local", "creds/released/x", "after"), "AccessDenied", "STATUS_INVALID")
	_, err := getObject(c, "local", "creds/released/x")
	wantRefused(t, "read after release", err, "AccessDenied", "STATUS_INVALID")
	_, err = c.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String("local"), Prefix: aws.String("creds/")})
	wantRefused(t, "list after release", err, "AccessDenied", "STATUS_INVALID")
	if code, body := d.objectBody(t, "local/creds/released/x"); code != http.StatusOK || body != "first" {
		t.Fatalf("object after the refused write: %d %q, want the first write", code, body)
	}

	e := d.acquireKeys(t, "token-a", "local/creds/expired", "r-2", "op-cred-exp", 3000)
	ce := d.s3Client(e.door(), nil)
	if err := putObject(ce, "local", "creds/expired/x", "in time"); err != nil {
		t.Fatalf("write under the held lease: %v", err)
	}
	d.waitExpired(t, "token-a", e.lease)
	wantRefused(t, "write after expiry", putObject(ce, "local", "creds/expired/x", "late"), "AccessDenied", "STATUS_INVALID")
	_, err = getObject(ce, "local", "creds/expired/x")
	wantRefused(t, "read after expiry", err, "AccessDenied", "STATUS_INVALID")
	if n := len(d.receipts(t, "token-a", "op-cred")) + len(d.receipts(t, "token-a", "op-cred-exp")); n != 2 {
		t.Fatalf("%d receipts, want only the two writes made while the leases were held", n)
	}
}

func TestLeaseS3CredentialsWriteOnlyTheirResource(t *testing.T) {
	d := startFrontDoor(t, nil)
	a := d.acquireKeys(t, "token-a", "local/creds/a", "r-a", "op-a", 60000)
	b := d.acquireKeys(t, "token-b", "local/creds/b", "r-b", "op-b", 60000)
	ca := d.s3Client(a.door(), nil)
	wantRefused(t, "A writes into B's resource", putObject(ca, "local", "creds/b/x", "A's bytes"), "AccessDenied", "RESOURCE_MISMATCH")
	wantRefused(t, "A writes beside its resource", putObject(ca, "local", "creds/ab", "A's bytes"), "AccessDenied", "RESOURCE_MISMATCH")
	if code, _ := d.objectBody(t, "local/creds/b/x"); code != http.StatusNotFound {
		t.Fatalf("B's key after A's refused write: %d, want 404", code)
	}
	if n := len(d.receipts(t, "token-a", "op-a")) + len(d.receipts(t, "token-b", "op-b")); n != 0 {
		t.Fatalf("%d receipts after refused writes", n)
	}
	if err := putObject(d.s3Client(b.door(), nil), "local", "creds/b/x", "B's bytes"); err != nil {
		t.Fatalf("B writes its own resource: %v", err)
	}
}

func TestForgedOrTamperedS3CredentialsAreRefused(t *testing.T) {
	d := startFrontDoor(t, nil)
	a := d.acquireKeys(t, "token-a", "local/creds/forged", "r-a", "op-forged", 60000)
	b := d.acquireKeys(t, "token-b", "local/creds/other", "r-b", "op-other", 60000)
	flip := func(s string) string {
		last := s[len(s)-1]
		if last == 'A' {
			return s[:len(s)-1] + "B"
		}
		return s[:len(s)-1] + "A"
	}
	for name, c := range map[string]struct {
		akid, secret, s3code string
	}{
		"tampered secret":                 {a.akid, flip(a.secret), "SignatureDoesNotMatch"},
		"another lease's key, A's secret": {b.akid, a.secret, "SignatureDoesNotMatch"},
		"A's key, another lease's secret": {a.akid, b.secret, "SignatureDoesNotMatch"},
		"a lease that does not exist":     {"FGLAAAAAAAAAAAAAAAAAAAAAAAAAA", a.secret, "InvalidAccessKeyId"},
		"not a lease credential":          {"AKIAIOSFODNN7EXAMPLE", a.secret, "InvalidAccessKeyId"},
	} {
		forged := d.s3Client(doorLease{akid: c.akid, secret: c.secret}, nil)
		wantRefused(t, name, putObject(forged, "local", "creds/forged/x", "forged"), c.s3code, "")
		_, err := getObject(forged, "local", "creds/forged/x")
		wantRefused(t, name+" (read)", err, c.s3code, "")
	}
	if code, _ := d.objectBody(t, "local/creds/forged/x"); code != http.StatusNotFound {
		t.Fatalf("the key after forged writes: %d, want 404", code)
	}
	if n := len(d.receipts(t, "token-a", "op-forged")); n != 0 {
		t.Fatalf("%d receipts after forged writes", n)
	}
	if err := putObject(d.s3Client(a.door(), nil), "local", "creds/forged/x", "genuine"); err != nil {
		t.Fatalf("the genuine credentials: %v", err)
	}
}

// TestFencectlRunSyncsWithTheAWSCLI is the README's quickstart: fencectl run
// holds the lease while Debian's AWS CLI syncs a directory through the front
// door with the lease's credentials, then releases it.
func TestFencectlRunSyncsWithTheAWSCLI(t *testing.T) {
	awsCLI := debianClient(t, "aws", "aws")
	d := startFrontDoor(t, nil)
	work := t.TempDir()
	writeFile(t, work, "out/a.csv", 300, "a")
	writeFile(t, work, "out/b.csv", 400, "b")
	home := t.TempDir()
	// awscli 2.9 reads no AWS_ENDPOINT_URL: the command passes the one fencectl exported.
	cmd := exec.Command(testenv.FencectlBinary(t), "run", "--resource", "local/reports/2026-07", "--ttl", "30s", "--",
		"sh", "-c", awsCLI.bin+` --endpoint-url "$AWS_ENDPOINT_URL" s3 sync ./out s3://local/reports/2026-07/`)
	cmd.Dir = work
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", "FENCEGATE_URL=" + d.base, "FENCEGATE_TOKEN=token-a",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("fencectl run: %v\n%s", err, out.String())
	}
	rs := d.receipts(t, "token-a", "local/reports/2026-07") // the operation defaults to the resource
	if len(rs) != 2 || rs[0]["state"] != "COMMITTED" || rs[1]["state"] != "COMMITTED" {
		t.Fatalf("receipts of the sync: %v\n%s", rs, out.String())
	}
	if l := d.do(t, "GET", "/v1/leases/"+rs[0]["lease"].(string), "token-a", nil, ""); l.str("state") != "RELEASED" {
		t.Fatalf("the lease after fencectl run: %s", l.body)
	}
	// s3cmd takes its endpoint from the configuration file fencectl writes (S3CMD_CONFIG).
	s3cmd := debianClient(t, "s3cmd", "s3cmd")
	writeFile(t, work, "out/c.csv", 500, "c")
	cmd = exec.Command(testenv.FencectlBinary(t), "run", "--resource", "local/reports/2026-07", "--ttl", "30s", "--",
		s3cmd.bin, "put", "out/c.csv", "s3://local/reports/2026-07/c.csv")
	cmd.Dir, cmd.Env = work, append(cmd.Env[:0:0], "HOME="+home, "PATH=/usr/bin:/bin", "FENCEGATE_URL="+d.base, "FENCEGATE_TOKEN=token-a")
	out.Reset()
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("fencectl run s3cmd: %v\n%s", err, out.String())
	}
	for _, f := range []string{"a.csv", "b.csv", "c.csv"} {
		want, _ := os.ReadFile(filepath.Join(work, "out", f))
		if code, body := d.objectBody(t, "local/reports/2026-07/"+f); code != http.StatusOK || body != string(want) {
			t.Fatalf("%s: %d, %d bytes, want the file's %d", f, code, len(body), len(want))
		}
	}
}

// TestReplicaChecksLeaseS3CredentialsAtTheRegistry: a replica with no
// registry of its own, in proof and in query mode, resolves a lease's S3
// credentials at the registry (POST /v1/leases/{lease}/s3-resolve, as a
// gateway identity) at every request: writes pass while the lease is held,
// and a release at the registry refuses the replica's next request.
func TestReplicaChecksLeaseS3CredentialsAtTheRegistry(t *testing.T) {
	for _, mode := range []string{"proof", "query"} {
		t.Run(mode, func(t *testing.T) {
			reg := startFrontDoor(t, nil, "--gateway", "replica=replica-token")
			gwDir := t.TempDir()
			cfg := filepath.Join(gwDir, "gw.yaml")
			yml := fmt.Sprintf(`dataDir: %s
trustBundle: %s
statusMode: %s
registryURL: %s
registryCredential: {name: replica, token: replica-token}
stores: {local: "local:"}
identities: [{name: worker-a, token: token-a}]
access: {rules: [{identity: worker-a, lease: [local]}]}
`, filepath.Join(gwDir, "data"), filepath.Join(reg.dir, "trust-bundle.json"), mode, reg.base)
			if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
				t.Fatal(err)
			}
			gw := startGateway(t, "serve", "--config", cfg)
			k := reg.acquireKeys(t, "token-a", "local/replica/1", "a-1", "op-replica", 60000)
			c := gw.s3Client(k.door(), nil)
			if err := putObject(c, "local", "replica/1/x", "through the replica"); err != nil {
				t.Fatalf("write at the replica: %v\n%s", err, gw.logs.String())
			}
			if body, err := getObject(c, "local", "replica/1/x"); err != nil || body != "through the replica" {
				t.Fatalf("read at the replica: %q %v", body, err)
			}
			if r := reg.do(t, "DELETE", "/v1/leases/"+k.lease, "token-a", nil, ""); r.status != http.StatusOK {
				t.Fatalf("release: %d %s", r.status, r.body)
			}
			wantRefused(t, "write at the replica after release", putObject(c, "local", "replica/1/x", "late"), "AccessDenied", "STATUS_INVALID")
			_, err := getObject(c, "local", "replica/1/x")
			wantRefused(t, "read at the replica after release", err, "AccessDenied", "STATUS_INVALID")
		})
	}
}
