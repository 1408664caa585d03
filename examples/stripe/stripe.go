// Package stripeexample runs the official Stripe Go SDK (stripe-go, pinned in
// this module's go.mod), unmodified, through a Fencegate gateway: the only
// change is the SDK's HTTP client, whose transport is client.Transport.
//
// What that gives a worker: it never holds the Stripe secret (the gateway
// injects it); every create is fenced by the worker's lease, so a paused
// worker whose lease passed to another can never charge; each SDK
// idempotency key is one segment, so the SDK's own retries, a restarted
// worker and the next owner of the operation never charge twice; reads
// (Retrieve, List) go through the API's declared read routes.
//
// The test in this module runs it against the gateway binary and a
// Stripe-like upstream that follows Stripe's documented idempotency.
package stripeexample

import (
	"net/http"

	"github.com/stripe/stripe-go/v82"

	"github.com/fencegate/fencegate/client"
)

// NewClient returns a Stripe client whose calls go through the gateway to
// the API named api (declared in the gateway's `apis:`), fenced by lease.
// The SDK's own key is a placeholder: the gateway holds the real one.
func NewClient(lease *client.Lease, api string, opts ...func(*stripe.BackendConfig)) *stripe.Client {
	cfg := &stripe.BackendConfig{
		HTTPClient: &http.Client{Transport: &client.Transport{Lease: lease, API: api}},
	}
	for _, o := range opts {
		o(cfg)
	}
	return stripe.NewClient("sk_held_by_the_gateway", stripe.WithBackends(stripe.NewBackendsWithConfig(cfg)))
}
