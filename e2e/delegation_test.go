package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
)

// TestDelegateWritesThroughTheBinaryAndRevocationStopsIt: a coordinator
// mints a delegation of its lease for a consumer; the consumer writes its
// segments through the gateway binary as itself, a segment outside the
// delegation and another identity are refused with nothing changed, its
// rewrite of a written segment is QUARANTINED and the record names it and
// its delegation beside the owner, and a revoked delegation gets no status
// proof (proof mode) and is refused at once by a gateway in query mode.
func TestDelegateWritesThroughTheBinaryAndRevocationStopsIt(t *testing.T) {
	for _, mode := range []string{"proof", "query"} {
		t.Run(mode, func(t *testing.T) {
			p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--status-mode", mode,
				"--identity", "coord=token-coord", "--identity", "consumer=token-consumer", "--identity", "other=token-other")
			ctx := context.Background()
			coord, consumer := client.New(p.base, "token-coord"), client.New(p.base, "token-consumer")
			l, err := coord.AcquireLease(ctx, client.LeaseParams{AcquireParams: client.AcquireParams{
				Resource: "local/jobs/1", TTL: 30 * time.Second, OperationID: "jobs-1"}})
			if err != nil {
				t.Fatal(err)
			}
			manifest, err := l.Objects("local").Put(ctx, "jobs/1/manifest", strings.NewReader("m"), "text/plain")
			if err != nil {
				t.Fatal(err)
			}
			dl, err := l.Delegate(ctx, client.DelegateParams{Delegate: "consumer", SegmentFrom: 2, SegmentTo: 3})
			if err != nil {
				t.Fatal(err)
			}
			var opts []client.DelegatedOption
			if mode == "query" {
				opts = append(opts, client.WithoutStatusProofs())
			}
			w, err := consumer.DelegatedWriter(l.Grant(), dl.Delegation, opts...)
			if err != nil {
				t.Fatal(err)
			}
			r, err := w.Put(ctx, "local", "jobs/1/part-2", 2, strings.NewReader("two"), "text/plain")
			if err != nil || r.Segment != 2 || r.FenceToken != l.Fence() {
				t.Fatalf("delegated segment 2: %+v %v", r, err)
			}
			// The receipt, as the gateway answers it to anyone who reads
			// it, names who made each write: the delegate and its
			// delegation for segment 2, nobody but the owner for the
			// manifest.
			for _, tok := range []string{"token-coord", "token-consumer"} {
				got := p.do(t, "GET", "/v1/receipts/"+r.ID, tok, nil, "")
				if got.status != 200 || got.str("owner") != "coord" || got.str("delegate") != "consumer" || got.str("delegationId") != dl.ID {
					t.Fatalf("the delegated write's receipt read with %s: %d %s; want owner coord, delegate consumer, delegation %s", tok, got.status, got.body, dl.ID)
				}
			}
			if own := p.do(t, "GET", "/v1/receipts/"+manifest.ID, "token-coord", nil, ""); own.status != 200 || own.str("owner") != "coord" ||
				strings.Contains(string(own.body), `"delegat`) {
				t.Fatalf("the owner's receipt: %d %s", own.status, own.body)
			}
			// The delegate rewrites its segment: QUARANTINED, and the
			// record names the delegate and delegation that sent it.
			if _, err := w.Put(ctx, "local", "jobs/1/part-2", 2, strings.NewReader("other"), "text/plain"); fencegate.ErrorCode(err) != fencegate.CodeQuarantined {
				t.Fatalf("the delegate's rewrite of segment 2: %v, want QUARANTINED", err)
			}
			var qs fencegate.QuarantinePage
			if got := p.do(t, "GET", "/v1/quarantine?resource=local/jobs/1", "token-coord", nil, ""); got.status != 200 || json.Unmarshal(got.body, &qs) != nil ||
				len(qs.Records) != 1 || qs.Records[0].Owner != "coord" || qs.Records[0].Delegate != "consumer" || qs.Records[0].DelegationID != dl.ID {
				t.Fatalf("the quarantine of the delegate's rewrite: %d %s; want owner coord, delegate consumer, delegation %s", got.status, got.body, dl.ID)
			}
			before := p.do(t, "GET", "/v1/resources/local/jobs/1", "token-coord", nil, "")
			if _, err := w.Put(ctx, "local", "jobs/1/part-4", 4, strings.NewReader("x"), "text/plain"); fencegate.ErrorCode(err) != fencegate.CodeDelegationInvalid {
				t.Fatalf("segment outside: %v", err)
			}
			other, err := client.New(p.base, "token-other").DelegatedWriter(l.Grant(), dl.Delegation, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := other.Put(ctx, "local", "jobs/1/part-3", 3, strings.NewReader("x"), "text/plain"); fencegate.ErrorCode(err) != fencegate.CodeOwnerMismatch {
				t.Fatalf("another identity: %v", err)
			}
			if err := consumer.RevokeDelegation(ctx, dl.ID); fencegate.ErrorCode(err) != fencegate.CodeOwnerMismatch {
				t.Fatalf("the delegate revoked: %v", err)
			}
			if err := coord.RevokeDelegation(ctx, dl.ID); err != nil {
				t.Fatal(err)
			}
			fresh, err := consumer.DelegatedWriter(l.Grant(), dl.Delegation, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fresh.Put(ctx, "local", "jobs/1/part-3", 3, strings.NewReader("x"), "text/plain"); fencegate.ErrorCode(err) != fencegate.CodeDelegationInvalid {
				t.Fatalf("revoked: %v", err)
			}
			if after := p.do(t, "GET", "/v1/resources/local/jobs/1", "token-coord", nil, ""); string(after.body) != string(before.body) {
				t.Fatalf("refused delegated writes moved the resource: %s -> %s", before.body, after.body)
			}
			// The owner goes on under its own grant: its writers numbered
			// after the delegated segments, and it takes back the one the
			// delegate never used.
			if l.NextSegment() != 4 {
				t.Fatalf("the owner's next segment is %d, not after the delegated ones", l.NextSegment())
			}
			l.ResumeAt(3)
			if r, err := l.Objects("local").Put(ctx, "jobs/1/part-3", strings.NewReader("three"), "text/plain"); err != nil || r.Segment != 3 {
				t.Fatalf("owner after the delegate: %+v %v", r, err)
			}
		})
	}
}

// TestReplicaInQueryModeAsksTheRemoteRegistryAboutADelegation: a
// registry-less replica in query mode asks the registry over HTTP (POST
// /v1/delegations/{id}/status as a gateway identity) about a delegated
// write, and refuses it at once after the owner revoked the delegation.
func TestReplicaInQueryModeAsksTheRemoteRegistryAboutADelegation(t *testing.T) {
	regDir := t.TempDir()
	reg := startGateway(t, "dev", "--data-dir", regDir, "--identity", "coord=token-coord", "--identity", "consumer=token-consumer",
		"--gateway", "replica=replica-token")
	gwDir := t.TempDir()
	cfg := filepath.Join(gwDir, "gw.yaml")
	yml := fmt.Sprintf(`dataDir: %s
trustBundle: %s
statusMode: query
registryURL: %s
registryCredential: {name: replica, token: replica-token}
stores: {local: "local:"}
identities: [{name: coord, token: token-coord}, {name: consumer, token: token-consumer}]
access: {rules: [{identity: coord, lease: [local]}, {identity: consumer, delegate: [local/jobs]}]}
`, filepath.Join(gwDir, "data"), filepath.Join(regDir, "trust-bundle.json"), reg.base)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, "serve", "--config", cfg)
	ctx := context.Background()
	l, err := client.New(reg.base, "token-coord").AcquireLease(ctx, client.LeaseParams{AcquireParams: client.AcquireParams{
		Resource: "local/jobs/2", TTL: time.Minute, OperationID: "jobs-2"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(gw.base, "token-coord").PutObject(ctx, "local", "jobs/2/manifest", client.Fence{Grant: l.Grant(), Segment: 1},
		strings.NewReader("m"), "text/plain"); err != nil {
		t.Fatalf("owner at the replica: %v", err)
	}
	l.ResumeAt(2) // the owner wrote segment 1 at the replica with a plain client, not through l
	dl, err := l.Delegate(ctx, client.DelegateParams{Delegate: "consumer", SegmentFrom: 2, SegmentTo: 3})
	if err != nil {
		t.Fatal(err)
	}
	consumer := client.New(gw.base, "token-consumer")
	w, err := consumer.DelegatedWriter(l.Grant(), dl.Delegation, client.WithoutStatusProofs())
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Put(ctx, "local", "jobs/2/part-2", 2, strings.NewReader("two"), "text/plain"); err != nil || r.Segment != 2 {
		t.Fatalf("delegated write at the replica: %+v %v", r, err)
	}
	if err := client.New(reg.base, "token-coord").RevokeDelegation(ctx, dl.ID); err != nil {
		t.Fatal(err)
	}
	before := gw.do(t, "GET", "/v1/resources/local/jobs/2", "token-coord", nil, "")
	if _, err := w.Put(ctx, "local", "jobs/2/part-3", 3, strings.NewReader("x"), "text/plain"); fencegate.ErrorCode(err) != fencegate.CodeDelegationInvalid {
		t.Fatalf("revoked delegation at the replica: %v", err)
	}
	if after := gw.do(t, "GET", "/v1/resources/local/jobs/2", "token-coord", nil, ""); string(after.body) != string(before.body) {
		t.Fatalf("a revoked delegation moved the resource: %s -> %s", before.body, after.body)
	}
}

// TestFencectlDelegatesAndRevokes: the CLI mints a delegation of the lease in
// its lease file, numbers the owner's next write after it, and revokes it.
func TestFencectlDelegatesAndRevokes(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a", "--identity", "consumer=token-c")
	dir := t.TempDir()
	bin := filepath.Join(filepath.Dir(binary(t)), "fencectl")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/fencectl").CombinedOutput(); err != nil {
		t.Fatalf("build fencectl: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "part"), []byte("owner"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "FENCEGATE_URL="+p.base, "FENCEGATE_TOKEN=token-a")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("fencectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	ctl("acquire", "local/cli/9", "--ttl", "30s", "--operation", "cli-9")
	ctl("put", "local/cli/9/manifest", "part")
	var d client.Delegation
	if err := json.Unmarshal([]byte(ctl("--json", "delegate", "consumer", "--segments", "2-3")), &d); err != nil || d.Delegation == "" {
		t.Fatalf("delegate: %v %+v", err, d)
	}
	var lf struct {
		Lease client.LeaseInfo `json:"lease"`
	}
	raw, _ := os.ReadFile(filepath.Join(dir, ".fencectl-lease.json"))
	if err := json.Unmarshal(raw, &lf); err != nil {
		t.Fatal(err)
	}
	w, err := client.New(p.base, "token-c").DelegatedWriter(lf.Lease.Grant, d.Delegation)
	if err != nil {
		t.Fatal(err)
	}
	for seg := uint64(2); seg <= 3; seg++ {
		if _, err := w.Put(context.Background(), "local", fmt.Sprintf("cli/9/part-%d", seg), seg, strings.NewReader("c"), "text/plain"); err != nil {
			t.Fatalf("delegate segment %d: %v", seg, err)
		}
	}
	var rc fencegate.Receipt
	if out := ctl("--json", "put", "local/cli/9/owner", "part"); json.Unmarshal([]byte(out), &rc) != nil || rc.Segment != 4 {
		t.Fatalf("the owner's write after the delegated segments: %s", out)
	}
	// The receipts listing names the delegate of its segments and none of
	// the owner's.
	byLine := map[string]string{}
	for _, line := range strings.Split(ctl("receipts", "--operation", "cli-9"), "\n") {
		if f := strings.Fields(line); len(f) > 3 {
			byLine[f[3]] = line // by segment
		}
	}
	if !strings.HasSuffix(byLine["SEGMENT"], "DELEGATE") || !strings.HasSuffix(byLine["2"], "consumer ("+d.ID+")") ||
		!strings.HasSuffix(byLine["3"], "consumer ("+d.ID+")") || !strings.HasSuffix(byLine["1"], " -") || !strings.HasSuffix(byLine["4"], " -") {
		t.Fatalf("fencectl receipts does not name the delegate of segments 2 and 3 alone:\n%v", byLine)
	}
	if out := ctl("revoke-delegation", d.ID); !strings.Contains(out, "revoked") {
		t.Fatalf("revoke: %s", out)
	}
}
