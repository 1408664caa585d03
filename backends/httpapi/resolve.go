package httpapi

import (
	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

var _ gateway.Resolver = (*API)(nil)

// Resolvers maps receipt targets to the API that settles them, by name.
type Resolvers map[string]*API

// For returns the API resolving target, or nil when target is not an API
// target of a configured API; use it as gateway.Reconciler.Resolver.
func (rs Resolvers) For(target string) gateway.Resolver {
	name, _, ok := fencegate.SplitAPITarget(target)
	if !ok {
		return nil
	}
	if a := rs[name]; a != nil {
		return a
	}
	return nil
}

// Or returns a resolver picker trying rs first, then next (nil for none).
func (rs Resolvers) Or(next func(target string) gateway.Resolver) func(target string) gateway.Resolver {
	return func(target string) gateway.Resolver {
		if r := rs.For(target); r != nil {
			return r
		}
		if next != nil {
			return next(target)
		}
		return nil
	}
}
