package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"testing"

	"github.com/fencegate/fencegate"
)

// The snapshot and the comparisons every assertion uses (fixture.go holds
// the fixture and its checked operations).

// snapshot is everything a client can read about the resources and targets
// the subtest used.
type snapshot struct {
	Resources  map[string]any
	Live       map[string]string
	Receipts   map[fencegate.ReceiptState][]fencegate.Receipt
	Versions   map[string]string
	Quarantine []fencegate.Quarantine `json:",omitempty"`
	Operations map[string][]string
	ByResource map[string][]string
}

var allStates = []fencegate.ReceiptState{
	fencegate.ReceiptPending, fencegate.ReceiptCommitted, fencegate.ReceiptFailed,
	fencegate.ReceiptUnknown, fencegate.ReceiptNotApplied,
}

func (f *fx) snapshot(withQuarantine bool) snapshot {
	f.t.Helper()
	s := snapshot{
		Resources:  map[string]any{},
		Live:       map[string]string{},
		Receipts:   map[fencegate.ReceiptState][]fencegate.Receipt{},
		Versions:   map[string]string{},
		Operations: map[string][]string{},
		ByResource: map[string][]string{},
	}
	for res := range f.resources {
		s.ByResource[res] = ids(f.byResource(res))
		row, err := f.s.Resource(f.ctx, res)
		if err != nil {
			wantCode(f.t, err, fencegate.CodeNotFound, "")
			s.Resources[res] = "NOT_FOUND"
			continue
		}
		s.Resources[res] = row
		for seg := uint64(1); seg <= row.LastSegmentSeq+1; seg++ {
			key := fmt.Sprintf("%s@%d/%d", res, row.HighestFence, seg)
			r, err := f.s.ReceiptAt(f.ctx, res, row.HighestFence, seg)
			if err != nil {
				wantCode(f.t, err, fencegate.CodeNotFound, "")
				s.Live[key] = "NOT_FOUND"
				continue
			}
			s.Live[key] = r.ID
		}
	}
	ops := map[string]bool{}
	for _, st := range allStates {
		rs := f.byState(st, 0)
		s.Receipts[st] = rs
		for _, r := range rs {
			ops[r.OperationID] = true
		}
	}
	for op := range ops {
		for _, r := range f.byOperation(op) {
			s.Operations[op] = append(s.Operations[op], r.ID)
		}
	}
	for target := range f.targets {
		s.Versions[target] = f.version(target)
	}
	if withQuarantine {
		s.Quarantine = f.quarantined("")
	}
	return s
}

// --- comparisons -------------------------------------------------------------

// sameJSON fails unless got and want encode to the same JSON after times are
// put in UTC.
func (f *fx) sameJSON(what string, got, want any) {
	f.t.Helper()
	g, w := canon(f.t, got), canon(f.t, want)
	if g != w {
		f.t.Fatalf("%s differs:\n got: %s\nwant: %s", what, g, w)
	}
}

func canon(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(utc(v))
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return string(data)
}

// utc returns v with the times of store values in UTC.
func utc(v any) any {
	switch x := v.(type) {
	case fencegate.Receipt:
		x.CreatedAt = x.CreatedAt.UTC()
		if x.SettledAt != nil {
			at := x.SettledAt.UTC()
			x.SettledAt = &at
		}
		return x
	case []fencegate.Receipt:
		out := make([]fencegate.Receipt, len(x))
		for i := range x {
			out[i] = utc(x[i]).(fencegate.Receipt)
		}
		return out
	case fencegate.ResourceState:
		x.UpdatedAt = x.UpdatedAt.UTC()
		return x
	case fencegate.Quarantine:
		x.At = x.At.UTC()
		return x
	case []fencegate.Quarantine:
		out := make([]fencegate.Quarantine, len(x))
		for i := range x {
			out[i] = utc(x[i]).(fencegate.Quarantine)
		}
		return out
	case snapshot:
		res := map[string]any{}
		for k, r := range x.Resources {
			res[k] = utc(r)
		}
		x.Resources = res
		rs := map[fencegate.ReceiptState][]fencegate.Receipt{}
		for k, r := range x.Receipts {
			rs[k] = utc(r).([]fencegate.Receipt)
		}
		x.Receipts = rs
		x.Quarantine = utc(x.Quarantine).([]fencegate.Quarantine)
		return x
	}
	return v
}

// wantCode fails unless err is a *fencegate.Error with code and, if receiptID
// is not "", with that ReceiptID.
func wantCode(t testing.TB, err error, code fencegate.Code, receiptID string) {
	t.Helper()
	var fe *fencegate.Error
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *fencegate.Error; want %s", err, err, code)
	}
	if fe.Code != code {
		t.Fatalf("error code %s (%v), want %s", fe.Code, err, code)
	}
	if receiptID != "" && fe.ReceiptID != receiptID {
		t.Fatalf("%s names receipt %q, want %q", code, fe.ReceiptID, receiptID)
	}
}

func ids(rs []fencegate.Receipt) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
