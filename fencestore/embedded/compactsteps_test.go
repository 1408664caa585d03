package embedded

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// fakeStep is one step's answer in a compactSteps test.
type fakeStep struct {
	deleted int
	more    bool
	err     error
	cancel  bool // the context ends during the step
}

// Rule: the step loop CompactReceipts and CompactQuarantine share gives
// each step what is left of the call's limit and goes on while a step
// reports more to do, stopping at the first of: a step with nothing more,
// a failed step (its error returned with the total), the limit reached
// (with no error, even if the context ended during the last step: the call
// did what was asked), or the context's end between steps.
func TestCompactionStepsStopAtNothingMoreAnErrorTheLimitOrTheContextsEnd(t *testing.T) {
	fault := errors.New("step failed")
	for _, tc := range []struct {
		name      string
		limit     int
		steps     []fakeStep
		total     int
		limits    []int // the limit each step was given
		err       error
		cancelled bool
	}{
		{name: "nothing more", limit: 10, steps: []fakeStep{{3, true, nil, false}, {3, true, nil, false}, {1, false, nil, false}},
			total: 7, limits: []int{10, 7, 4}},
		{name: "limit reached", limit: 6, steps: []fakeStep{{3, true, nil, false}, {3, true, nil, false}},
			total: 6, limits: []int{6, 3}},
		{name: "limit reached as the context ends", limit: 6, steps: []fakeStep{{3, true, nil, false}, {3, true, nil, true}},
			total: 6, limits: []int{6, 3}},
		{name: "context ends between steps", limit: 10, steps: []fakeStep{{3, true, nil, false}, {3, true, nil, true}},
			total: 6, limits: []int{10, 7}, cancelled: true},
		{name: "step fails", limit: 10, steps: []fakeStep{{3, true, nil, false}, {2, true, fault, false}},
			total: 5, limits: []int{10, 7}, err: fault},
		{name: "no limit", limit: 0, total: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var limits []int
			total, err := compactSteps(ctx, tc.limit, func(limit int) (int, bool, error) {
				if len(limits) == len(tc.steps) {
					t.Fatalf("step %d run; want %d steps", len(limits)+1, len(tc.steps))
				}
				st := tc.steps[len(limits)]
				limits = append(limits, limit)
				if st.cancel {
					cancel()
				}
				return st.deleted, st.more, st.err
			})
			if total != tc.total || !slices.Equal(limits, tc.limits) {
				t.Fatalf("total %d after steps given limits %v; want %d after %v", total, limits, tc.total, tc.limits)
			}
			switch {
			case tc.cancelled:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("error %v, want the context's end", err)
				}
			case err != tc.err:
				t.Fatalf("error %v, want %v", err, tc.err)
			}
		})
	}
}
