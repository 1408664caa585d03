package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

// fillEvery sets every field of the struct v points to a distinct non-zero
// value, by reflection, so that a field added to the domain type and not to
// the codec fails the round trip below instead of being dropped silently.
func fillEvery(t *testing.T, v any) {
	t.Helper()
	at := time.Date(2026, 12, 1, 16, 0, 0, 123456000, time.UTC)
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		f, name := rv.Field(i), rv.Type().Field(i).Name
		switch {
		case f.Type() == reflect.TypeOf(time.Time{}):
			f.Set(reflect.ValueOf(at.Add(time.Duration(i) * time.Hour)))
		case f.Type() == reflect.TypeOf(&time.Time{}):
			tm := at.Add(-time.Duration(i) * time.Hour)
			f.Set(reflect.ValueOf(&tm))
		case f.Type() == reflect.TypeOf(&fencegate.EffectResponse{}):
			f.Set(reflect.ValueOf(&fencegate.EffectResponse{Status: 201, Header: map[string]string{"Etag": "x"}, Body: []byte("ok")}))
		case f.Type() == reflect.TypeOf(&fencegate.EffectRequest{}):
			f.Set(reflect.ValueOf(&fencegate.EffectRequest{Method: "POST", Path: "/p?q=1",
				Header: map[string][]string{"Idempotency-Key": {"k"}}, Body: []byte("{}"), Key: "k"}))
		case f.Kind() == reflect.String:
			f.SetString(name + "-value\x00\xff")
		case f.Kind() == reflect.Uint64:
			f.SetUint(1<<40 + uint64(i))
		case f.Kind() == reflect.Int64:
			f.SetInt(-1<<41 - int64(i))
		case f.Kind() == reflect.Int:
			f.SetInt(int64(i) + 3)
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		default:
			t.Fatalf("field %s (%s): teach fillEvery and codec.go about it", name, f.Type())
		}
	}
}

// TestCompactCodecKeepsEveryField: a receipt and a resource state with every
// field set, and with every field zero, read back equal from the compact form.
func TestCompactCodecKeepsEveryField(t *testing.T) {
	var full fencegate.Receipt
	fillEvery(t, &full)
	for _, r := range []fencegate.Receipt{full, {}} {
		v, err := encodeReceipt(&r)
		if err != nil {
			t.Fatal(err)
		}
		if v[0] != codecV2 {
			t.Fatalf("encoded receipt starts with %#x, want codec byte 2", v[0])
		}
		var got fencegate.Receipt
		if err := decodeReceipt(v, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("receipt round trip:\n got %+v\nwant %+v", got, r)
		}
	}
	var row fencegate.ResourceState
	fillEvery(t, &row)
	for _, r := range []fencegate.ResourceState{row, {}} {
		var got fencegate.ResourceState
		if err := decodeResource(encodeResource(&r), &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("resource round trip:\n got %+v\nwant %+v", got, r)
		}
	}
}

// filledValues is a receipt and a resource state with every field set
// (fillEvery), in the compact form.
func filledValues(t *testing.T) (receipt, resource []byte) {
	t.Helper()
	var r fencegate.Receipt
	fillEvery(t, &r)
	v, err := encodeReceipt(&r)
	if err != nil {
		t.Fatal(err)
	}
	var row fencegate.ResourceState
	fillEvery(t, &row)
	return v, encodeResource(&row)
}

// TestCompactValueCutShortIsAnError: every truncation of a compact value, and
// one with a byte too many, is a decoding error, never a panic or a value.
func TestCompactValueCutShortIsAnError(t *testing.T) {
	v, rv := filledValues(t)
	for n := 1; n < len(v); n++ {
		if err := decodeReceipt(v[:n], new(fencegate.Receipt)); err == nil {
			t.Fatalf("receipt cut to %d of %d bytes decoded without error", n, len(v))
		}
	}
	for n := 1; n < len(rv); n++ {
		if err := decodeResource(rv[:n], new(fencegate.ResourceState)); err == nil {
			t.Fatalf("resource cut to %d of %d bytes decoded without error", n, len(rv))
		}
	}
	if err := decodeReceipt(append(v, 0), new(fencegate.Receipt)); err == nil {
		t.Fatal("receipt with a trailing byte decoded without error")
	}
}

// TestUnknownOrMalformedValuesAreErrors: a value of a codec byte this code
// does not know (a newer binary's) and a time whose nanoseconds are out of
// range are decoding errors, never read as some other value.
func TestUnknownOrMalformedValuesAreErrors(t *testing.T) {
	v, rv := filledValues(t)
	newer := append([]byte{codecV2 + 1}, v[1:]...)
	if err := decodeReceipt(newer, new(fencegate.Receipt)); err == nil {
		t.Fatal("a receipt of an unknown codec byte decoded without error")
	}
	if err := decodeResource(append([]byte{codecV2}, rv[1:]...), new(fencegate.ResourceState)); err == nil {
		t.Fatal("a resource state of a receipt-only codec byte decoded without error")
	}
	// A resource state: four empty strings, fence 1, segment 1, issued 0,
	// then the time's seconds (0) and nanoseconds.
	at := func(nsec uint64) []byte { return binary.AppendUvarint([]byte{codecV1, 0, 0, 0, 0, 1, 1, 0, 0}, nsec) }
	if err := decodeResource(at(1e9), new(fencegate.ResourceState)); err == nil || !strings.Contains(err.Error(), "nanoseconds") {
		t.Fatalf("a time of 1e9 nanoseconds: %v, want an error", err)
	}
	if err := decodeResource(at(1e9-1), new(fencegate.ResourceState)); err != nil {
		t.Fatalf("the same value with 1e9-1 nanoseconds: %v", err)
	}
}

// TestJSONValuesOfOlderFilesAreRead: a file whose receipts and resource
// states were written as JSON (every file before the compact codec) is read
// as before: the receipt, its lists, the resource and the high water; a
// replay of its segment is answered from it, and settling it rewrites it in
// the compact form.
func TestJSONValuesOfOlderFilesAreRead(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	req := admitReq("res/old", 1, "rcpt_old")
	req.Now = time.UnixMilli(1_700_000_000_000).UTC()
	adm, err := s.Admit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	row, err := s.Resource(ctx, "res/old")
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()

	// Rewrite both values as the code before the codec wrote them.
	rewriteFile(t, path, func(tx *bolt.Tx) error {
		rj, _ := json.Marshal(adm.Receipt)
		sj, _ := json.Marshal(row)
		if err := tx.Bucket(bReceipts).Put([]byte(adm.Receipt.ID), rj); err != nil {
			return err
		}
		return tx.Bucket(bResources).Put([]byte("res/old"), sj)
	})

	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Receipt(ctx, adm.Receipt.ID); err != nil || !reflect.DeepEqual(got, adm.Receipt) {
		t.Fatalf("Receipt from JSON = %+v, %v; want %+v", got, err, adm.Receipt)
	}
	if got, err := s.Resource(ctx, "res/old"); err != nil || !reflect.DeepEqual(got, row) {
		t.Fatalf("Resource from JSON = %+v, %v; want %+v", got, err, row)
	}
	if p, err := s.ReceiptsByResource(ctx, "res/old", fencegate.Page{}); err != nil || len(p.Receipts) != 1 || p.Receipts[0].ID != adm.Receipt.ID {
		t.Fatalf("ReceiptsByResource from JSON = %+v, %v", p, err)
	}
	if top, err := s.HighestFence(ctx); err != nil || top != req.Grant.FenceToken {
		t.Fatalf("HighestFence from JSON = %d, %v; want %d", top, err, req.Grant.FenceToken)
	}
	if again, err := s.Admit(ctx, req); err != nil || !again.Replay || again.Receipt.ID != adm.Receipt.ID {
		t.Fatalf("replay against JSON values = %+v, %v; want a replay of %s", again, err, adm.Receipt.ID)
	}
	settled, err := s.Settle(ctx, adm.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1", Now: req.Now})
	if err != nil || settled.State != fencegate.ReceiptCommitted {
		t.Fatalf("Settle of a JSON receipt = %+v, %v", settled, err)
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		for _, v := range [][]byte{treeOf(tx, bReceipts).Get([]byte(adm.Receipt.ID)), treeOf(tx, bResources).Get([]byte("res/old"))} {
			if len(v) == 0 || (v[0] != codecV1 && v[0] != codecV2) {
				t.Errorf("value after the settle starts %q, want the compact form", v[:min(len(v), 1)])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Receipt(ctx, adm.Receipt.ID); err != nil || !reflect.DeepEqual(got, settled) {
		t.Fatalf("Receipt after the settle = %+v, %v; want %+v", got, err, settled)
	}
}

// TestReceiptOfCodecOneIsRead: a receipt of codec byte 1 (the compact form
// before the settle room) reads back as it was written.
func TestReceiptOfCodecOneIsRead(t *testing.T) {
	var r fencegate.Receipt
	fillEvery(t, &r)
	r.State = fencegate.ReceiptCommitted
	v, err := encodeReceipt(&r)
	if err != nil {
		t.Fatal(err)
	}
	if v[len(v)-1] != 0 {
		t.Fatalf("a settled receipt ends with %#x, want an empty room", v[len(v)-1])
	}
	old := append([]byte{codecV1}, v[1:len(v)-1]...)
	var got fencegate.Receipt
	if err := decodeReceipt(old, &got); err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("codec 1 receipt = %+v, %v; want %+v", got, err, r)
	}
}

// TestSettleRewritesAReceiptNoLarger: an admitted receipt's value is at
// least as large as the same receipt settled COMMITTED with a local-store
// version token, or FAILED with a short error, so a settle never splits the
// full leaf page that holds it.
func TestSettleRewritesAReceiptNoLarger(t *testing.T) {
	req := admitReq("local/bench/w1", 12, "rcpt_01a2327a3c8e1f2b4d6a8c0e2f")
	req.Grant.Lease, req.Grant.Owner = "lease_0123456789abcdef01234", "bench-worker-1"
	req.PayloadDigest = "sha256:" + strings.Repeat("ab", 32)
	r := fencerules.NewReceipt(&req)
	pending, err := encodeReceipt(&r)
	if err != nil {
		t.Fatal(err)
	}
	etag := `"` + strings.Repeat("c", 64) + "-" + strings.Repeat("d", 16) + `"` // the local store's
	for _, o := range []fencegate.Outcome{
		{State: fencegate.ReceiptCommitted, Version: etag, Now: req.Now.Add(time.Second)},
		{State: fencegate.ReceiptFailed, Error: "backend refused the write: 412 precondition failed", Now: req.Now.Add(time.Second)},
	} {
		next, changed, err := fencerules.Settle(r, &o)
		if err != nil || !changed {
			t.Fatalf("Settle(%s) = %v, %v", o.State, changed, err)
		}
		settled, err := encodeReceipt(&next)
		if err != nil {
			t.Fatal(err)
		}
		if len(settled) > len(pending) {
			t.Errorf("%s receipt is %d bytes, the PENDING one %d: the settle grows it", o.State, len(settled), len(pending))
		}
	}
}

// Two receipts as the codec wrote them before it kept delegates (fDelegated):
// an owner's PENDING one with a LandBy (and its 104 bytes of room), and the
// same settled COMMITTED.
var (
	preDelegatePending   = "0208726370745f6f6c640c6c6f63616c2f6a6f62732f311b6f626a656374732f6c6f63616c2f6a6f62732f312f706172742d3203505554066a6f62732d3106726f6f742d37076c656173652d3705636f6f7264087368613235363a67087368613235363a70000750454e44494e470000070200208095ebb00d00bc95ebb00d0068" + strings.Repeat("00", 104)
	preDelegateCommitted = "0208726370745f6f6c640c6c6f63616c2f6a6f62732f311b6f626a656374732f6c6f63616c2f6a6f62732f312f706172742d3203505554066a6f62732d3106726f6f742d37076c656173652d3705636f6f7264087368613235363a67087368613235363a700009434f4d4d495454454402763100070200248095ebb00d00bc95ebb00d008295ebb00d0000"
)

// TestReceiptWrittenBeforeDelegatesReadsAsTheOwners: receipts the codec
// wrote before it kept a delegate read back as they were, with no delegate
// and no delegation; an owner's receipt is still written byte for byte as
// then (the flag and its strings only for a delegated write), so a file of
// owners' writes stays readable by the binary before.
func TestReceiptWrittenBeforeDelegatesReadsAsTheOwners(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pending := fencegate.Receipt{ID: "rcpt_old", Resource: "local/jobs/1", Target: "objects/local/jobs/1/part-2", Method: "PUT",
		FenceToken: 7, Segment: 2, OperationID: "jobs-1", OperationRoot: "root-7", Lease: "lease-7", Owner: "coord",
		GrantDigest: "sha256:g", PayloadDigest: "sha256:p", State: fencegate.ReceiptPending, CreatedAt: at, LandBy: at.Add(30 * time.Second)}
	committed := pending
	settled := at.Add(time.Second)
	committed.State, committed.Version, committed.SettledAt = fencegate.ReceiptCommitted, "v1", &settled
	for _, c := range []struct {
		name string
		old  string
		want fencegate.Receipt
	}{{"pending", preDelegatePending, pending}, {"committed", preDelegateCommitted, committed}} {
		old, err := hex.DecodeString(c.old)
		if err != nil {
			t.Fatal(err)
		}
		var got fencegate.Receipt
		if err := decodeReceipt(old, &got); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got.Delegate != "" || got.DelegationID != "" || !reflect.DeepEqual(got, c.want) {
			t.Fatalf("%s receipt from before delegates:\n got %+v\nwant %+v", c.name, got, c.want)
		}
		if now, err := encodeReceipt(&c.want); err != nil || !bytes.Equal(now, old) {
			t.Fatalf("%s: an owner's receipt is now written %x (%v), before %x", c.name, now, err, old)
		}
	}
}

// TestDelegatedReceiptIsNotMisreadWithoutItsFlag: a delegated receipt read
// as a binary from before fDelegated reads it (the flag unknown to it,
// here cleared) is a decoding error, never a receipt without its delegate.
func TestDelegatedReceiptIsNotMisreadWithoutItsFlag(t *testing.T) {
	for _, state := range []fencegate.ReceiptState{fencegate.ReceiptPending, fencegate.ReceiptCommitted} {
		r := fencegate.Receipt{ID: "rcpt_d", Resource: "local/jobs/1", Target: "objects/local/jobs/1/part-2", Method: "PUT",
			FenceToken: 7, Segment: 2, Owner: "coord", Delegate: "consumer", DelegationID: "dlg_1", State: state,
			CreatedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
		v, err := encodeReceipt(&r)
		if err != nil {
			t.Fatal(err)
		}
		var got fencegate.Receipt
		if err := decodeReceipt(v, &got); err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("%s delegated receipt = %+v, %v; want %+v", state, got, err, r)
		}
		rd := reader{text: string(v), off: 1}
		for range 14 {
			rd.string()
		}
		rd.uvarint()
		rd.uvarint()
		rd.varint()
		if v[rd.off]&fDelegated == 0 {
			t.Fatalf("%s delegated receipt's flags %#x lack fDelegated", state, v[rd.off])
		}
		old := bytes.Clone(v)
		old[rd.off] &^= fDelegated
		if err := decodeReceipt(old, new(fencegate.Receipt)); err == nil {
			t.Fatalf("%s delegated receipt without its flag decoded without error", state)
		}
	}
}

// preDelegateQuarantine is an owner's quarantine record as the store wrote
// it before records named their delegate.
const preDelegateQuarantine = `{"quarantineId":"q_old","resource":"local/jobs/1","fenceToken":7,"segment":2,"target":"objects/local/jobs/1/part-2","method":"PUT","receiptId":"rcpt_old","payloadDigest":"sha256:r","payloadSize":7,"payloadKept":true,"payload":"cmVmdXNlZA==","owner":"coord","at":"2026-11-30T12:00:00Z","lastAt":"2026-11-30T12:00:01Z","attempts":2}`

// TestQuarantineRecordWrittenBeforeDelegatesReadsAsTheOwners: a quarantine
// record written before records named their delegate reads back as it was,
// with no delegate and no delegation; an owner's record is still written
// byte for byte as then (the delegate's members only on a delegated
// write's), and a delegated write's record keeps both.
func TestQuarantineRecordWrittenBeforeDelegatesReadsAsTheOwners(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	want := fencegate.Quarantine{ID: "q_old", Resource: "local/jobs/1", FenceToken: 7, Segment: 2, Target: "objects/local/jobs/1/part-2",
		Method: "PUT", ReceiptID: "rcpt_old", PayloadDigest: "sha256:r", PayloadSize: 7, PayloadKept: true, Payload: []byte("refused"),
		Owner: "coord", At: at, LastAt: at.Add(time.Second), Attempts: 2}
	var got fencegate.Quarantine
	if err := decodeQuarantine([]byte(preDelegateQuarantine), &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("record from before delegates = %+v, %v\nwant %+v", got, err, want)
	}
	if now, err := encodeQuarantine(&want); err != nil || string(now) != preDelegateQuarantine {
		t.Fatalf("an owner's record is now written %s (%v), before %s", now, err, preDelegateQuarantine)
	}
	delegated := want
	delegated.Delegate, delegated.DelegationID = "consumer", "dlg_1"
	v, err := encodeQuarantine(&delegated)
	if err != nil {
		t.Fatal(err)
	}
	got = fencegate.Quarantine{}
	if err := decodeQuarantine(v, &got); err != nil || !reflect.DeepEqual(got, delegated) {
		t.Fatalf("delegated record = %+v, %v; want %+v", got, err, delegated)
	}
}
