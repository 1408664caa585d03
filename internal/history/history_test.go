package history

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate"
)

// hist builds histories step by step for the model tests.
type hist struct{ r Recorder }

func (h *hist) write(client int, res, key string, fence uint64, val string) Call {
	return h.r.Invoke(client, Input{Kind: Write, Resource: res, Key: key, Fence: fence, Segment: 1, Value: val})
}

func (h *hist) do(client int, res, key string, fence uint64, val string, o Outcome) {
	h.write(client, res, key, fence, val).Return(Output{Outcome: o})
}

func (h *hist) read(client int, res, key, val string) {
	h.r.Invoke(client, Input{Kind: Read, Resource: res, Key: key}).Return(Output{Value: val})
}

func (h *hist) check(t *testing.T) Result {
	t.Helper()
	res, err := Check(h.r.Operations(), 0, filepath.Join(t.TempDir(), "v.html"))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func linearizable(t *testing.T, h *hist, want bool) {
	t.Helper()
	res := h.check(t)
	if res.Linearizable != want {
		t.Fatalf("linearizable = %v, want %v", res.Linearizable, want)
	}
	if !want {
		if _, err := os.Stat(res.Visualization); err != nil {
			t.Fatalf("no visualisation written for a failing history: %v", err)
		}
	}
}

func TestSequentialFencedWritesAndReadsAreLinearizable(t *testing.T) {
	var h hist
	h.read(0, "r", "k", "")
	h.do(0, "r", "k", 1, "a", OK)
	h.read(1, "r", "k", "a")
	h.do(1, "r", "k", 2, "b", OK)
	h.do(0, "r", "k", 1, "a2", Stale)
	h.read(0, "r", "k", "b")
	linearizable(t, &h, true)
}

func TestLowerFenceAcceptedAfterHigherFenceIsNotLinearizable(t *testing.T) {
	var h hist
	h.do(1, "r", "k", 2, "b", OK)
	h.do(0, "r", "k", 1, "a", OK) // a stale write accepted
	linearizable(t, &h, false)
}

func TestLowerFenceAcceptedOnAnotherKeyAfterHigherFenceIsNotLinearizable(t *testing.T) {
	var h hist
	h.do(1, "r", "k2", 2, "b", OK)
	h.do(0, "r", "k1", 1, "a", OK) // the fence line is the resource, not the key
	linearizable(t, &h, false)
}

func TestConcurrentWritesMayLinearizeInFenceOrder(t *testing.T) {
	var h hist
	hi := h.write(1, "r", "k", 2, "b")
	lo := h.write(0, "r", "k", 1, "a")
	lo.Return(Output{Outcome: OK})
	hi.Return(Output{Outcome: OK})
	h.read(0, "r", "k", "b")
	linearizable(t, &h, true)

	var bad hist
	hi = bad.write(1, "r", "k", 2, "b")
	lo = bad.write(0, "r", "k", 1, "a")
	lo.Return(Output{Outcome: OK})
	hi.Return(Output{Outcome: OK})
	bad.read(0, "r", "k", "a") // the lower fence's value after both completed
	linearizable(t, &bad, false)
}

func TestStaleRefusalNeedsAHigherAdmittedFence(t *testing.T) {
	var h hist
	h.do(0, "r", "k", 1, "a", OK)
	h.do(0, "r", "k", 1, "a2", Stale) // nothing above fence 1 was admitted
	linearizable(t, &h, false)
}

func TestNotAppliedWriteMovesTheFenceButNotTheValue(t *testing.T) {
	var h hist
	h.do(0, "r", "k", 1, "a", OK)
	h.do(1, "r", "k", 2, "b", NotApplied)
	h.do(0, "r", "k", 1, "a2", Stale)
	h.read(0, "r", "k", "a")
	linearizable(t, &h, true)

	var bad hist
	bad.do(0, "r", "k", 1, "a", OK)
	bad.do(1, "r", "k", 2, "b", NotApplied)
	bad.read(0, "r", "k", "b") // a refused write's bytes are visible
	linearizable(t, &bad, false)
}

func TestUnknownWriteMayLandAfterItsAnswer(t *testing.T) {
	var h hist
	h.do(0, "r", "k", 1, "a", OK)
	h.do(1, "r", "k", 2, "b", Unknown)
	h.read(0, "r", "k", "a")
	h.do(0, "r", "k", 1, "a2", Stale) // fence 2 was admitted
	h.read(0, "r", "k", "a")
	h.read(0, "r", "k", "b") // and its effect landed late
	linearizable(t, &h, true)
}

func TestUnknownWriteCannotLandAfterAHigherFencesWrite(t *testing.T) {
	var h hist
	h.do(0, "r", "k", 1, "a", OK)
	h.do(1, "r", "k", 2, "b", Unknown)
	h.do(2, "r", "k", 3, "c", OK)
	h.read(0, "r", "k", "b") // the fence-2 effect landed after fence 3's write
	linearizable(t, &h, false)
}

func TestUnreturnedCallsAreUnknown(t *testing.T) {
	var h hist
	h.write(1, "r", "k", 2, "b") // the client crashed
	h.read(0, "r", "k", "")
	h.read(0, "r", "k", "b")
	ops := h.r.Operations()
	if got := ops[0].Output.(Output).Outcome; got != Unknown {
		t.Fatalf("open call's outcome = %v, want unknown", got)
	}
	if ops[0].Return <= ops[2].Return {
		t.Fatalf("open call returns at %d, before the last event at %d", ops[0].Return, ops[2].Return)
	}
	linearizable(t, &h, true)
}

func TestResourcesAreSeparateFenceLines(t *testing.T) {
	var h hist
	h.do(0, "r1", "k", 5, "a", OK)
	h.do(1, "r2", "k", 1, "b", OK) // a lower fence on another resource is fine
	h.read(0, "r1", "k", "a")
	h.read(1, "r2", "k", "b")
	linearizable(t, &h, true)
}

func TestReplayAndRefusalChangeNothing(t *testing.T) {
	var h hist
	h.do(0, "r", "k", 1, "a", OK)
	h.do(0, "r", "k", 1, "a", Duplicate)
	h.do(0, "r", "k", 9, "x", Refused)
	h.read(0, "r", "k", "a")
	h.do(0, "r", "k", 2, "b", OK) // fence 9 did not move the line
	linearizable(t, &h, true)
}

func TestOutcomeOfCodeClassifiesEveryCode(t *testing.T) {
	want := map[fencegate.Code]Outcome{
		fencegate.CodeStaleOwner:         Stale,
		fencegate.CodeBackendConflict:    NotApplied,
		fencegate.CodeBackendUnavailable: NotApplied,
		fencegate.CodeMutationUnknown:    Unknown,
		fencegate.CodeInternal:           Unknown,
		fencegate.CodeLeaseHeld:          Unknown, // not an answer a fenced write gets
		fencegate.CodeLeaseNotHeld:       Unknown,
		fencegate.CodeRequestIDConflict:  Unknown, // an acquisition's answer, never a write's
		fencegate.CodeStateLost:          Unknown, // an acquisition's answer, never a write's
		fencegate.CodeStillReconciling:   Unknown, // an operator's resolve answer, never a write's
		fencegate.CodeReceiptSettled:     Unknown, // a settle's or an operator's answer, never a write's
	}
	for _, c := range fencegate.Codes {
		got := OutcomeOfCode(c).Outcome
		if w, ok := want[c]; ok {
			if got != w {
				t.Errorf("%s: outcome %v, want %v", c, got, w)
			}
			continue
		}
		if got != Refused {
			t.Errorf("%s: outcome %v, want refused", c, got)
		}
	}
	if o := OutcomeOf(nil, true); o.Outcome != Duplicate {
		t.Errorf("replay: %v", o.Outcome)
	}
	if o := OutcomeOf(errors.New("conn reset"), false); o.Outcome != Unknown {
		t.Errorf("transport error: %v", o.Outcome)
	}
}
