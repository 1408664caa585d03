package domain

import (
	"strings"
	"testing"
)

// Rule: a delegation names exactly one of a segment range [from, to] with
// 1 <= from <= to, or a set of 1 to MaxDelegationSegments distinct numbers
// from 1; anything else is DELEGATION_INVALID, and Validate refuses a
// delegation whose claims break it.
func TestDelegatedSegmentsAreOneRangeOrSetNumberedFromOne(t *testing.T) {
	full := make([]uint64, MaxDelegationSegments)
	for i := range full {
		full[i] = uint64(i + 1)
	}
	for _, tc := range []struct {
		rule     string
		from, to uint64
		set      []uint64
		ok       bool
	}{
		{"a range", 2, 9, nil, true},
		{"a range of one", 3, 3, nil, true},
		{"a set", 0, 0, []uint64{4, 2, 3}, true},
		{"the longest set", 0, 0, full, true},
		{"neither", 0, 0, nil, false},
		{"both", 2, 3, []uint64{4}, false},
		{"a range without its start (from 0)", 0, 3, nil, false},
		{"a range running downwards", 5, 3, nil, false},
		{"a range with only its start", 3, 0, nil, false},
		{"a set with 0", 0, 0, []uint64{0, 1}, false},
		{"a set with a number repeated", 0, 0, []uint64{2, 3, 2}, false},
		{"a set longer than MaxDelegationSegments", 0, 0, append(full, MaxDelegationSegments+1), false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			err := CheckDelegatedSegments(tc.from, tc.to, tc.set)
			if tc.ok != (err == nil) || err != nil && ErrorCode(err) != CodeDelegationInvalid {
				t.Fatalf("CheckDelegatedSegments(%d, %d, %v) = %v; want ok %v", tc.from, tc.to, tc.set, err, tc.ok)
			}
			d := Delegation{Schema: DelegationSchema, ID: "dlg_1", GrantDigest: "sha256:00", Resource: "bucket/jobs", Lease: "L1",
				Owner: "coord", Delegate: "consumer", FenceToken: 7, OperationRoot: "root", IssuedAt: 1,
				SegmentFrom: tc.from, SegmentTo: tc.to, Segments: tc.set}
			verr := d.Validate()
			if tc.ok != (verr == nil) || verr != nil && (ErrorCode(verr) != CodeDelegationInvalid || !strings.Contains(ErrorMessage(verr), "segments")) {
				t.Fatalf("Validate = %v; want ok %v", verr, tc.ok)
			}
		})
	}
}
