package gateway

import (
	"context"
	"log/slog"

	"github.com/fencegate/fencegate"
)

// Holders names a resource's live lease (registry.Registry implements it):
// NOT_FOUND when no live lease holds it.
type Holders interface {
	Holder(ctx context.Context, resource string) (fencegate.Lease, error)
}

// Binding is an object key's binding to the resource that first wrote it
// (README, "Canonical mapping").
type Binding struct {
	Store    string `json:"store"`
	Key      string `json:"key"`
	Target   string `json:"target"`
	Resource string `json:"resource"`
}

// Bindings lets operators inspect an object key's binding and clear it once
// no live lease covers the key, so that the key's rightful resource can write
// it after another resource (a parent) wrote it first. Every clearing and
// every refused attempt is logged with the operator's identity.
type Bindings struct {
	Store fencegate.FenceStore
	// Leases names live leases; nil: bindings can be read but not cleared.
	Leases Holders
	Log    *slog.Logger
}

// Get returns the binding of key in store; NOT_FOUND if the key is unbound.
func (b *Bindings) Get(ctx context.Context, store, key string) (Binding, error) {
	tb, err := b.bindings()
	if err != nil {
		return Binding{}, err
	}
	bd := Binding{Store: store, Key: key, Target: fencegate.ObjectTarget(store, key)}
	bd.Resource, err = tb.Binding(ctx, bd.Target)
	return bd, err
}

// Clear removes the binding of key in store. It is refused, changing
// nothing, while a live lease holds any resource covering the key
// (LEASE_HELD: the key's own resource, the bound one, or any ancestor), or
// an effect on the bound resource is in flight (RESOURCE_BUSY). The store
// removes the binding only if it is still to the resource read here (else
// BACKEND_CONFLICT); fence
// state, receipts and the key's version are kept.
func (b *Bindings) Clear(ctx context.Context, store, key, operator string) (Binding, error) {
	bd, err := b.Get(ctx, store, key)
	if err != nil {
		return bd, err
	}
	if b.Leases == nil {
		return bd, fencegate.Errorf(fencegate.CodeUnsupported, "clearing a binding needs the in-process registry, to know no live lease covers the key")
	}
	if err := b.noLiveLease(ctx, fencegate.ObjectResource(store, key)); err != nil {
		b.Log.Info("binding clear refused", "operator", operator, "target", bd.Target, "resource", bd.Resource, "err", err)
		return bd, err
	}
	tb, _ := b.bindings()
	err = tb.Unbind(ctx, bd.Target, bd.Resource)
	if fencegate.ErrorCode(err) == fencegate.CodeResourceMismatch {
		err = fencegate.Wrap(err, fencegate.CodeBackendConflict, "the binding changed meanwhile; read it again")
	}
	if err != nil {
		b.Log.Info("binding clear refused", "operator", operator, "target", bd.Target, "resource", bd.Resource, "err", err)
		return bd, err
	}
	b.Log.Warn("binding cleared", "operator", operator, "target", bd.Target, "resource", bd.Resource)
	return bd, nil
}

// noLiveLease checks resource and every ancestor for a live lease.
func (b *Bindings) noLiveLease(ctx context.Context, resource string) error {
	for i := len(resource); i > 0; i-- {
		if i < len(resource) && resource[i] != '/' {
			continue
		}
		res := resource[:i]
		l, err := b.Leases.Holder(ctx, res)
		switch fencegate.ErrorCode(err) {
		case fencegate.CodeNotFound:
			continue
		case "":
			return fencegate.Errorf(fencegate.CodeLeaseHeld, "lease %s of %q on %q covers the key: release it or let it expire first", l.ID, l.Owner, res)
		}
		return err
	}
	return nil
}

func (b *Bindings) bindings() (fencegate.TargetBindings, error) {
	tb, ok := b.Store.(fencegate.TargetBindings)
	if !ok {
		return nil, fencegate.Errorf(fencegate.CodeUnsupported, "the fence store cannot inspect bindings")
	}
	return tb, nil
}
