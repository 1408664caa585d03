package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUnmodifiedS3ClientsWriteThroughTheFrontDoor runs Debian's awscli 2.9,
// rclone 1.60 and s3cmd 2.3, unmodified, against the built binary's S3 front
// door, over the local-directory store and over versitygw: small and 50 MiB
// (multipart) copies, a directory sync, get, list and delete, each write
// under a lease whose S3 credentials the client signs with; then a paused
// owner's late `aws s3 cp` after a new owner wrote.
func TestUnmodifiedS3ClientsWriteThroughTheFrontDoor(t *testing.T) {
	aws := debianClient(t, "aws", "aws")
	rclone := debianClient(t, "rclone", "rclone")
	s3cmd := debianClient(t, "s3cmd", "s3cmd")
	stores := map[string]func(t *testing.T) *frontDoor{
		"local": func(t *testing.T) *frontDoor { return startFrontDoor(t, nil) },
		"versitygw": func(t *testing.T) *frontDoor {
			b := newS3Bucket(t)
			return startFrontDoor(t, b.env(), "--store", "s3a="+b.storeURL(""))
		},
	}
	for name, start := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := start(t)
			bucket := "local"
			if name == "versitygw" {
				bucket = "s3a"
			}
			t.Run("aws", func(t *testing.T) { awsCLIFlow(t, d, aws, bucket) })
			t.Run("rclone", func(t *testing.T) { rcloneFlow(t, d, rclone, bucket) })
			t.Run("s3cmd", func(t *testing.T) { s3cmdFlow(t, d, s3cmd, bucket) })
			t.Run("stale owner", func(t *testing.T) { staleAWSCopy(t, d, aws, bucket) })
		})
	}
}

// committed counts the operation's COMMITTED receipts.
func committed(t *testing.T, d *frontDoor, op string) int {
	t.Helper()
	n := 0
	for _, r := range d.receipts(t, "token-a", op) {
		if r["state"] == "COMMITTED" {
			n++
		}
	}
	return n
}

func awsCLIFlow(t *testing.T, d *frontDoor, aws cliClient, bucket string) {
	res := bucket + "/reports/aws"
	k := d.acquireKeys(t, "token-a", res, "aws-1", "op-aws", 120000)
	env := clientEnv(t, k)
	ep := []string{"--endpoint-url", d.s3URL} // awscli 2.9 does not read AWS_ENDPOINT_URL (2.13 does)
	src := t.TempDir()
	small := writeFile(t, src, "small.txt", 1000, "small")
	big := writeFile(t, src, "big.bin", 50<<20, "big-object") // above the CLI's 8 MiB multipart threshold
	for i := range 3 {
		writeFile(t, src, fmt.Sprintf("out/part-%d.csv", i), 2000+i, fmt.Sprintf("row-%d", i))
	}
	writeFile(t, src, "out/sub/deep.csv", 300, "deep")
	base := "s3://" + bucket + "/reports/aws/"
	aws.must(t, env, append(ep, "s3", "cp", small, base+"small.txt")...)
	aws.must(t, env, append(ep, "s3", "cp", big, base+"big.bin")...)
	aws.must(t, env, append(ep, "s3", "sync", filepath.Join(src, "out"), base+"out/")...)
	ls := aws.must(t, env, append(ep, "s3", "ls", "--recursive", base)...)
	for _, key := range []string{"small.txt", "big.bin", "out/part-0.csv", "out/part-2.csv", "out/sub/deep.csv"} {
		if !strings.Contains(ls, "reports/aws/"+key) {
			t.Fatalf("aws s3 ls lacks %s:\n%s", key, ls)
		}
	}
	// A second sync finds nothing to do.
	if out := aws.must(t, env, append(ep, "s3", "sync", filepath.Join(src, "out"), base+"out/")...); strings.Contains(out, "upload:") {
		t.Fatalf("second sync uploaded again:\n%s", out)
	}
	got := t.TempDir()
	aws.must(t, env, append(ep, "s3", "cp", base+"big.bin", filepath.Join(got, "big.bin"))...)
	sameFile(t, big, filepath.Join(got, "big.bin"))
	aws.must(t, env, append(ep, "s3", "cp", base+"small.txt", filepath.Join(got, "small.txt"))...)
	sameFile(t, small, filepath.Join(got, "small.txt"))
	aws.must(t, env, append(ep, "s3", "rm", base+"small.txt")...)
	if ls := aws.must(t, env, append(ep, "s3", "ls", "--recursive", base)...); strings.Contains(ls, "small.txt") {
		t.Fatalf("small.txt still listed after rm:\n%s", ls)
	}
	// cp small, cp big (one effect), 4 sync uploads, rm: 7 receipts.
	if n := committed(t, d, "op-aws"); n != 7 {
		t.Fatalf("%d committed receipts for the AWS CLI's writes, want 7: %v", n, d.receipts(t, "token-a", "op-aws"))
	}
}

func rcloneFlow(t *testing.T, d *frontDoor, rclone cliClient, bucket string) {
	k := d.acquireKeys(t, "token-a", bucket+"/reports/rclone", "rclone-1", "op-rclone", 120000)
	// What fencectl run exports for rclone: any s3 remote goes to the front door.
	env := clientEnv(t, k, "RCLONE_S3_PROVIDER=Other", "RCLONE_S3_ENV_AUTH=true", "RCLONE_S3_ENDPOINT="+d.s3URL,
		"RCLONE_S3_REGION=us-east-1", "RCLONE_S3_FORCE_PATH_STYLE=true", "RCLONE_S3_NO_CHECK_BUCKET=true")
	src := t.TempDir()
	small := writeFile(t, src, "small.txt", 700, "rclone")
	mid := writeFile(t, src, "mid.bin", 12<<20, "rclone-multipart")
	writeFile(t, src, "out/a.csv", 500, "a")
	writeFile(t, src, "out/b.csv", 600, "b")
	base := ":s3:" + bucket + "/reports/rclone/"
	rclone.must(t, env, "copyto", small, base+"small.txt")
	rclone.must(t, env, "copyto", "--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M", mid, base+"mid.bin")
	rclone.must(t, env, "sync", filepath.Join(src, "out"), base+"out")
	ls := rclone.must(t, env, "ls", base)
	for _, key := range []string{"small.txt", "mid.bin", "out/a.csv", "out/b.csv"} {
		if !strings.Contains(ls, key) {
			t.Fatalf("rclone ls lacks %s:\n%s", key, ls)
		}
	}
	if out := rclone.stdout(t, env, "cat", base+"small.txt"); out != mustRead(t, small) {
		t.Fatalf("rclone cat gave %d bytes, want the %d written", len(out), len(mustRead(t, small)))
	}
	got := t.TempDir()
	rclone.must(t, env, "copyto", base+"mid.bin", filepath.Join(got, "mid.bin"))
	sameFile(t, mid, filepath.Join(got, "mid.bin"))
	rclone.must(t, env, "deletefile", base+"small.txt")
	if ls := rclone.must(t, env, "ls", base); strings.Contains(ls, "small.txt") {
		t.Fatalf("small.txt still listed after deletefile:\n%s", ls)
	}
	if n := committed(t, d, "op-rclone"); n != 5 {
		t.Fatalf("%d committed receipts for rclone's writes, want 5: %v", n, d.receipts(t, "token-a", "op-rclone"))
	}
}

func s3cmdFlow(t *testing.T, d *frontDoor, s3cmd cliClient, bucket string) {
	k := d.acquireKeys(t, "token-a", bucket+"/reports/s3cmd", "s3cmd-1", "op-s3cmd", 120000)
	env := clientEnv(t, k)
	cfg := filepath.Join(t.TempDir(), "s3cfg")
	if err := os.WriteFile(cfg, []byte("[default]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(d.s3URL, "http://")
	// --host-bucket without %(bucket)s: path-style addressing.
	opts := []string{"-c", cfg, "--access_key=" + k.akid, "--secret_key=" + k.secret, "--host=" + host, "--host-bucket=" + host,
		"--no-ssl", "--region=us-east-1"}
	src := t.TempDir()
	small := writeFile(t, src, "small.txt", 900, "s3cmd")
	writeFile(t, src, "out/a.csv", 400, "a")
	writeFile(t, src, "out/b.csv", 450, "b")
	base := "s3://" + bucket + "/reports/s3cmd/"
	s3cmd.must(t, env, append(opts, "put", small, base+"small.txt")...)
	s3cmd.must(t, env, append(opts, "sync", filepath.Join(src, "out")+"/", base+"out/")...)
	ls := s3cmd.must(t, env, append(opts, "ls", "--recursive", base)...)
	for _, key := range []string{"small.txt", "out/a.csv", "out/b.csv"} {
		if !strings.Contains(ls, "reports/s3cmd/"+key) {
			t.Fatalf("s3cmd ls lacks %s:\n%s", key, ls)
		}
	}
	got := filepath.Join(t.TempDir(), "small.txt")
	s3cmd.must(t, env, append(opts, "get", base+"small.txt", got)...)
	sameFile(t, small, got)
	s3cmd.must(t, env, append(opts, "del", base+"small.txt")...)
	if ls := s3cmd.must(t, env, append(opts, "ls", "--recursive", base)...); strings.Contains(ls, "small.txt") {
		t.Fatalf("small.txt still listed after del:\n%s", ls)
	}
	if n := committed(t, d, "op-s3cmd"); n != 4 {
		t.Fatalf("%d committed receipts for s3cmd's writes, want 4: %v", n, d.receipts(t, "token-a", "op-s3cmd"))
	}
}

// staleAWSCopy: worker A copies, pauses past its TTL; B acquires and copies
// the same key; A's late `aws s3 cp` is refused with the Fencegate code, the
// object holds B's bytes, and the receipts show both owners' writes.
func staleAWSCopy(t *testing.T, d *frontDoor, aws cliClient, bucket string) {
	res := bucket + "/reports/2026-07"
	key := "s3://" + bucket + "/reports/2026-07/summary.csv"
	ep := []string{"--endpoint-url", d.s3URL}
	src := t.TempDir()
	// The TTL leaves the CLI's start-up (seconds on a loaded 2-core machine) time to write.
	a := d.acquireKeys(t, "token-a", res, "a-1", "op-stale", 15000)
	aws.must(t, clientEnv(t, a), append(ep, "s3", "cp", writeFile(t, src, "a1.csv", 100, "A first"), key)...)
	d.waitExpired(t, "token-a", a.lease) // A pauses past its TTL
	b := d.acquireKeys(t, "token-b", res, "b-1", "op-stale", 60000)
	if b.fence <= a.fence {
		t.Fatalf("B's fence %d is not above A's %d", b.fence, a.fence)
	}
	bFile := writeFile(t, src, "b1.csv", 120, "B wins")
	aws.must(t, clientEnv(t, b), append(ep, "s3", "cp", bFile, key)...)
	code, out := aws.run(t, clientEnv(t, a), append(ep, "s3", "cp", writeFile(t, src, "a2.csv", 100, "A late"), key)...)
	if code == 0 || !strings.Contains(out, "STALE_OWNER") {
		t.Fatalf("A's late aws s3 cp: exit %d, want a refusal naming STALE_OWNER:\n%s", code, out)
	}
	got := filepath.Join(t.TempDir(), "summary.csv")
	aws.must(t, clientEnv(t, b), append(ep, "s3", "cp", key, got)...)
	sameFile(t, bFile, got)
	rs := d.receipts(t, "token-a", "op-stale")
	if len(rs) != 2 || rs[0]["state"] != "COMMITTED" || rs[1]["state"] != "COMMITTED" ||
		uint64(rs[0]["fenceToken"].(float64)) != a.fence || uint64(rs[1]["fenceToken"].(float64)) != b.fence {
		t.Fatalf("receipts of the operation: want A's then B's write, COMMITTED: %v", rs)
	}
}

// waitExpired waits until the registry states the lease EXPIRED.
func (d *frontDoor) waitExpired(t *testing.T, token, lease string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if a := d.do(t, "GET", "/v1/leases/"+lease, token, nil, ""); a.str("state") == "EXPIRED" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("lease %s never expired", lease)
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
