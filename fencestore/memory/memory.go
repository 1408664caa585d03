// Package memory is a FenceStore held in process memory, behind one mutex. It
// applies the same fence rules as the durable stores (fencestore/internal/
// fencerules) and passes the same contract suite, but keeps nothing across a
// restart: it exists for simulations and tests that need many thousands of
// admissions per second, never for production.
package memory

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

type liveKey struct {
	resource string
	fence    uint64
	segment  uint64
}

// Store is an in-memory FenceStore, safe for concurrent use.
type Store struct {
	mu         sync.Mutex
	resources  map[string]fencegate.ResourceState
	receipts   map[string]fencegate.Receipt
	live       map[liveKey]string
	quarantine map[string]fencegate.Quarantine // by ID
	versions   map[string]string
	bound      map[string]string // target -> the resource it is fenced under
}

var _ fencegate.PriorSettling = (*Store)(nil)

// SettlesPrior implements fencegate.PriorSettling: Admit applies
// AdmitRequest.Prior first, under the same lock.
func (s *Store) SettlesPrior() bool { return true }

// New returns an empty store.
func New() *Store {
	return &Store{resources: map[string]fencegate.ResourceState{}, receipts: map[string]fencegate.Receipt{},
		live: map[liveKey]string{}, quarantine: map[string]fencegate.Quarantine{}, versions: map[string]string{}, bound: map[string]string{}}
}

// Admit implements fencegate.FenceStore.
func (s *Store) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	if err := fencerules.ValidateAdmit(&req); err != nil {
		return fencegate.Admission{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A prior settle is applied first, under the same lock, so the segment is
	// decided on the state it left; its answer rides on every verdict.
	var prior fencegate.Admission
	if req.Prior != nil {
		r, err := s.settle(req.Prior.ReceiptID, req.Prior.Outcome)
		if err != nil {
			prior.PriorErr = err
		} else {
			prior.Prior = &r
		}
	}
	adm, err := s.admit(&req)
	adm.Prior, adm.PriorErr = prior.Prior, prior.PriorErr
	return adm, err
}

// admit decides and writes req; s.mu is held.
func (s *Store) admit(req *fencegate.AdmitRequest) (fencegate.Admission, error) {
	g := &req.Grant
	if err := fencerules.CheckTarget(s.bound[req.Target], req); err != nil {
		return fencegate.Admission{}, err
	}
	row, ok := s.resources[g.Resource]
	if !ok {
		row = fencegate.ResourceState{Resource: g.Resource}
	}
	var live *fencegate.Receipt
	if g.FenceToken == row.HighestFence {
		if id, ok := s.live[liveKey{g.Resource, g.FenceToken, req.Segment}]; ok {
			r := s.receipts[id]
			live = &r
		}
	}
	verdict, err := fencerules.Decide(row, req, live)
	switch verdict {
	case fencerules.Reject:
		return fencegate.Admission{}, err
	case fencerules.Replay:
		return fencegate.Admission{Receipt: *live, Replay: true, PreviousVersion: s.versions[req.Target]}, nil
	case fencerules.Quarantine:
		g := &req.Grant
		id := fencegate.QuarantineID(g.Resource, g.FenceToken, req.Segment, req.Target, req.Method, req.EffectKey, req.PayloadDigest)
		if q, ok := s.quarantine[id]; ok {
			s.quarantine[id] = fencerules.QuarantineAgain(q, req.Now)
		} else {
			s.quarantine[id] = fencerules.QuarantineRecord(req, live)
		}
		return fencegate.Admission{}, err
	}
	if _, dup := s.receipts[req.ReceiptID]; dup {
		return fencegate.Admission{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "receipt ID %q is already in use", req.ReceiptID)
	}
	r := fencerules.NewReceipt(req)
	s.receipts[r.ID] = r
	s.live[liveKey{r.Resource, r.FenceToken, r.Segment}] = r.ID
	s.resources[g.Resource] = fencerules.Accepted(req)
	s.bound[req.Target] = g.Resource
	return fencegate.Admission{Receipt: r, PreviousVersion: s.versions[req.Target]}, nil
}

// Settle implements fencegate.FenceStore.
func (s *Store) Settle(ctx context.Context, id string, o fencegate.Outcome) (fencegate.Receipt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settle(id, o)
}

// settle applies one settle; s.mu is held.
func (s *Store) settle(id string, o fencegate.Outcome) (fencegate.Receipt, error) {
	r, ok := s.receipts[id]
	if !ok {
		return fencegate.Receipt{}, fencegate.Errorf(fencegate.CodeNotFound, "no receipt %q", id)
	}
	var row *fencegate.ResourceState
	if rs, ok := s.resources[r.Resource]; ok {
		row = &rs
	}
	st, err := fencerules.SettleEffects(r, row, &o)
	if err != nil || !st.Changed {
		return st.Receipt, err
	}
	next := st.Receipt
	s.receipts[id] = next
	switch {
	case st.SetVersion && next.Version == "":
		delete(s.versions, next.Target)
	case st.SetVersion:
		s.versions[next.Target] = next.Version
	}
	if st.DropLive {
		delete(s.live, liveKey{next.Resource, next.FenceToken, next.Segment})
	}
	if st.RowChanged {
		s.resources[next.Resource] = st.Row
	}
	return next, nil
}

// Resource implements fencegate.FenceStore.
func (s *Store) Resource(ctx context.Context, resource string) (fencegate.ResourceState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.resources[resource]
	if !ok {
		return fencegate.ResourceState{}, fencegate.Errorf(fencegate.CodeNotFound, "no resource %q", resource)
	}
	return row, nil
}

// Receipt implements fencegate.FenceStore.
func (s *Store) Receipt(ctx context.Context, id string) (fencegate.Receipt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.receipts[id]
	if !ok {
		return fencegate.Receipt{}, fencegate.Errorf(fencegate.CodeNotFound, "no receipt %q", id)
	}
	return r, nil
}

// ReceiptAt implements fencegate.FenceStore.
func (s *Store) ReceiptAt(ctx context.Context, resource string, fence, segment uint64) (fencegate.Receipt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.live[liveKey{resource, fence, segment}]
	if !ok {
		return fencegate.Receipt{}, fencegate.Errorf(fencegate.CodeNotFound, "no receipt for %s fence %d segment %d", resource, fence, segment)
	}
	return s.receipts[id], nil
}

// ReceiptsByOperation implements fencegate.FenceStore.
func (s *Store) ReceiptsByOperation(ctx context.Context, operationID string, page fencegate.Page) (fencegate.ReceiptPage, error) {
	return s.filter(fencerules.ByOperationList(operationID), page, func(r *fencegate.Receipt) bool { return r.OperationID == operationID })
}

// ReceiptsByResource implements fencegate.FenceStore.
func (s *Store) ReceiptsByResource(ctx context.Context, resource string, page fencegate.Page) (fencegate.ReceiptPage, error) {
	return s.filter(fencerules.ByResourceList(resource), page, func(r *fencegate.Receipt) bool { return r.Resource == resource })
}

// ReceiptsByState implements fencegate.FenceStore.
func (s *Store) ReceiptsByState(ctx context.Context, state fencegate.ReceiptState, page fencegate.Page) (fencegate.ReceiptPage, error) {
	return s.filter(fencerules.ByStateList(state), page, func(r *fencegate.Receipt) bool { return r.State == state })
}

// filter pages through the matching receipts, oldest first (ties by ID). It
// sorts every match: the memory store serves tests, not large lists.
func (s *Store) filter(list string, page fencegate.Page, keep func(*fencegate.Receipt) bool) (fencegate.ReceiptPage, error) {
	pg, after, from, err := fencerules.NewPager(list, page)
	if err != nil {
		return fencegate.ReceiptPage{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []fencegate.Receipt
	for _, r := range s.receipts {
		if keep(&r) && (!from || after.After("", r.CreatedAt, r.ID)) {
			all = append(all, r)
		}
	}
	slices.SortFunc(all, func(a, b fencegate.Receipt) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	out := fencegate.ReceiptPage{Receipts: []fencegate.Receipt{}}
	for i := range all {
		if !pg.Take(fencegate.ReceiptPosition(&all[i]), all[i].ApproxSize()) {
			break
		}
		out.Receipts = append(out.Receipts, all[i])
	}
	out.Next = pg.Next
	return out, nil
}

// Quarantined implements fencegate.FenceStore.
func (s *Store) Quarantined(ctx context.Context, resource string, page fencegate.Page) (fencegate.QuarantinePage, error) {
	pg, after, from, err := fencerules.NewPager(fencerules.QuarantineList(resource), page)
	if err != nil {
		return fencegate.QuarantinePage{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []fencegate.Quarantine
	for _, q := range s.quarantine {
		if (resource == "" || q.Resource == resource) && (!from || after.After(q.Resource, q.At, q.ID)) {
			all = append(all, q)
		}
	}
	slices.SortFunc(all, func(a, b fencegate.Quarantine) int {
		if c := strings.Compare(a.Resource, b.Resource); c != 0 {
			return c
		}
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	out := fencegate.QuarantinePage{Records: []fencegate.Quarantine{}}
	for i := range all {
		if !pg.Take(fencegate.QuarantinePosition(&all[i]), all[i].ApproxSize()) {
			break
		}
		out.Records = append(out.Records, all[i])
	}
	out.Next = pg.Next
	return out, nil
}

// QuarantineRecord implements fencegate.FenceStore.
func (s *Store) QuarantineRecord(ctx context.Context, id string) (fencegate.Quarantine, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, ok := s.quarantine[id]
	if !ok {
		return fencegate.Quarantine{}, fencegate.Errorf(fencegate.CodeNotFound, "no quarantine record %q", id)
	}
	return q, nil
}

// Version implements fencegate.FenceStore.
func (s *Store) Version(ctx context.Context, target string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versions[target], nil
}

// SwapVersion implements fencegate.FenceStore.
func (s *Store) SwapVersion(ctx context.Context, target, from, to string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.versions[target]; cur != from {
		return fencegate.Errorf(fencegate.CodeBackendConflict, "version of %q is %q, not %q", target, cur, from)
	}
	if to == "" {
		delete(s.versions, target)
	} else {
		s.versions[target] = to
	}
	return nil
}

// Close implements fencegate.FenceStore; it keeps the data.
func (s *Store) Close() error { return nil }

var _ fencegate.TargetBindings = (*Store)(nil)

// Binding implements fencegate.TargetBindings.
func (s *Store) Binding(ctx context.Context, target string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.bound[target]; ok {
		return b, nil
	}
	return "", fencegate.Errorf(fencegate.CodeNotFound, "target %q is bound to no resource", target)
}

// Unbind implements fencegate.TargetBindings.
func (s *Store) Unbind(ctx context.Context, target, resource string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := fencerules.CheckUnbind(s.bound[target], target, resource, s.resources[resource]); err != nil {
		return err
	}
	delete(s.bound, target)
	return nil
}
