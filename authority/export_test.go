package authority

import "context"

// OfferBundle is FollowBundle without a chain to fetch (a replica that
// cannot walk its registry's chain): the offer path alone, for the tests
// of what a fetched bundle is checked against.
func (a *Authority) OfferBundle(data []byte, signature string) (installed bool, version uint64, err error) {
	return a.FollowBundle(context.Background(), data, signature, nil)
}
