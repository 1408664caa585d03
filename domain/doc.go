// Package domain holds the domain of a fencing gateway: grants and status
// proofs, receipts, the closed set of error codes, and the interfaces that
// stores, object backends and lease backends implement (FenceStore states the
// fence rules as a contract).
//
// Start with the rules themselves: fencestore/internal/fencerules/rules.go
// decides, with no I/O, what a segment's admission does (accept, replay,
// quarantine, or refuse with STALE_OWNER, FENCE_REGRESSION, RESOURCE_BUSY,
// SEGMENT_OUT_OF_ORDER) and what settling a receipt does to the resource;
// every store calls it inside its transaction, and rules_test.go is the
// table of those rules (the gateway asks the first of them, FenceOrder,
// through package fencestore before admission). Next to them stands the rule
// that makes NOT_APPLIED final for a write still in the network: every effect
// carries its expiry to the store (gateway.EffectExpiry, WithLandBy), the
// store refuses it later, and gateway.ObjectResolver waits a grace past it.
// internal/sim simulates the whole system against these rules and kills a
// mutant of each, and model/ is the protocol as a spin model.
//
// It imports no driver, SDK or HTTP package. Adapters live in sub-packages named
// after what they adapt (fencestore/postgres, backends/s3, ...); the acceptance
// point that ties them together lives in package gateway.
package domain
