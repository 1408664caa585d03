package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// frontDoor is a gateway serving the S3 front door: SigV4-signed requests
// on its API listener go to it (handlers.Server.S3).
type frontDoor struct {
	*gatewayProc
	s3URL string
	dir   string
}

// startFrontDoor runs `gateway dev` with workload identities worker-a and
// worker-b and extra arguments (stores); env is added to the gateway's
// environment.
func startFrontDoor(t *testing.T, env []string, args ...string) *frontDoor {
	t.Helper()
	dir := t.TempDir()
	all := append([]string{"dev", "--data-dir", dir, "--identity", "worker-a=token-a", "--identity", "worker-b=token-b"}, args...)
	p := startGatewayEnv(t, env, all...)
	return &frontDoor{gatewayProc: p, s3URL: p.base, dir: dir}
}

// s3Keys are a lease's S3 credentials as the registry answers them.
type s3Keys struct {
	lease, akid, secret string
	fence               uint64
}

// acquireS3 acquires a lease asking for its S3 credentials.
func (d *frontDoor) acquireKeys(t *testing.T, token, resource, requestID, opID string, ttlMs int) s3Keys {
	t.Helper()
	body := fmt.Sprintf(`{"resource":%q,"requestId":%q,"ttlMs":%d,"operationId":%q,"s3Credentials":true}`, resource, requestID, ttlMs, opID)
	a := d.do(t, "POST", "/v1/leases", token, map[string]string{"Content-Type": "application/json"}, body)
	if a.status != http.StatusCreated {
		t.Fatalf("acquire %s: %d %s", resource, a.status, a.body)
	}
	c, _ := a.json["s3Credentials"].(map[string]any)
	k := s3Keys{lease: a.str("lease"), fence: a.num("fenceToken")}
	k.akid, _ = c["accessKeyId"].(string)
	k.secret, _ = c["secretAccessKey"].(string)
	if k.akid == "" || k.secret == "" {
		t.Fatalf("acquire answered no S3 credentials: %s", a.body)
	}
	return k
}

// receipts lists the receipts of an operation (one page).
func (d *frontDoor) receipts(t *testing.T, token, opID string) []map[string]any {
	t.Helper()
	a := d.do(t, "GET", "/v1/receipts?operationId="+opID+"&limit=1000", token, nil, "")
	var out struct {
		Receipts []map[string]any `json:"receipts"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &out) != nil {
		t.Fatalf("receipts of %s: %d %s", opID, a.status, a.body)
	}
	return out.Receipts
}

// cliClient is one of Debian's S3 command-line clients, run unmodified.
type cliClient struct {
	name string
	bin  string
}

// debianClient finds a client (testenv.DebianClient).
func debianClient(t *testing.T, name, bin string) cliClient {
	t.Helper()
	return cliClient{name: name, bin: testenv.DebianClient(t, name, bin)}
}

// clientEnv is an environment holding nothing of the machine's own AWS, rclone
// or s3cmd configuration, plus the lease's keys and the given variables.
func clientEnv(t *testing.T, k s3Keys, extra ...string) []string {
	t.Helper()
	home := t.TempDir()
	cfg := filepath.Join(home, "aws-config")
	// The front door serves path-style addressing only (s3door/doc.go).
	if err := os.WriteFile(cfg, []byte("[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "PATH=/usr/bin:/bin", "LANG=C.UTF-8",
		"AWS_ACCESS_KEY_ID=" + k.akid, "AWS_SECRET_ACCESS_KEY=" + k.secret, "AWS_REGION=us-east-1", "AWS_DEFAULT_REGION=us-east-1",
		"AWS_CONFIG_FILE=" + cfg, "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true", "AWS_PAGER=",
		"RCLONE_CONFIG=" + filepath.Join(home, "rclone.conf")}
	return append(env, extra...)
}

// run runs the client with args in env; it returns the exit status and output.
func (c cliClient) run(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%s %v: %v", c.name, args, err)
		}
		code = ee.ExitCode()
	}
	return code, string(out)
}

// stdout runs the client and returns its standard output alone, failing
// the test unless it exits 0.
func (c cliClient) stdout(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = env
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", c.name, strings.Join(args, " "), err, errOut.String())
	}
	return string(out)
}

// must runs the client and fails the test unless it exits 0.
func (c cliClient) must(t *testing.T, env []string, args ...string) string {
	t.Helper()
	code, out := c.run(t, env, args...)
	if code != 0 {
		t.Fatalf("%s %s: exit %d\n%s", c.name, strings.Join(args, " "), code, out)
	}
	return out
}

// writeFile writes n bytes of a pattern named by seed to a file in dir.
func writeFile(t *testing.T, dir, name string, n int, seed string) string {
	t.Helper()
	b := make([]byte, n)
	for i := range b {
		b[i] = seed[i%len(seed)] + byte(i/len(seed)%7)
	}
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	x, err1 := os.ReadFile(a)
	y, err2 := os.ReadFile(b)
	if err1 != nil || err2 != nil || string(x) != string(y) {
		t.Fatalf("%s and %s differ (%d vs %d bytes; %v %v)", a, b, len(x), len(y), err1, err2)
	}
}
