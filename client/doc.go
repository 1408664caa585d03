// Package client is Fencegate's worker-side Go SDK.
//
// It offers low-level calls for every gateway route (leases, fenced object
// writes, fenced API calls, receipts and admin verbs) and, on top of them, the
// lease state machine of DESIGN §8 with segment writers:
//
//   - Errors answered by the gateway come back as *domain.Error with the
//     problem's stable code, detail and receiptId; errors where the request may
//     or may not have reached the gateway (transport failures, timeouts,
//     garbled or non-Fencegate 5xx answers) are *UncertainError (IsUncertain).
//   - A Lease moves REQUESTED → HELD ⇄ RENEWING; an uncertain renewal or status
//     answer, or a local deadline passed without a confirmed renewal, moves it
//     to OWNERSHIP_UNKNOWN, where no new effect is sent. Only the registry
//     confirms EXPIRED; a voluntary release is RELEASED.
//   - Segment writers number commits 1, 2, 3, ... under one grant, send every
//     commit with the current grant and a fresh status proof, and resolve an
//     unknown outcome through receipts before submitting anything new.
//   - Lost is closed, and Context's context cancelled, the moment a lease
//     stops allowing effects; OnStateChange reports every transition.
//   - Lease.Delegate mints a delegation of the lease for a downstream
//     identity and a segment range or set; the delegate writes with a
//     DelegatedWriter under the owner's grant, refused exactly as the owner
//     once a newer fence is accepted.
//   - Transport is an http.RoundTripper for an unmodified SDK of a fronted
//     API: base URL rewrite, the workload credential instead of the SDK's,
//     reads to the API's read routes, writes fenced with one segment per SDK
//     idempotency key (Fence-Effect-Key), recovered from the operation's
//     receipts after a restart or a change of owner; refusals are errors.
//
// Time is injected (WithClock); nothing in this package sleeps except Run and
// the acquisition retry wait (WithSleep).
package client
