// Package sim is the deterministic simulation of the whole system: the lease
// registry (embedded backend), several gateway replicas (proof and query
// mode) over one fence store (memory, embedded or Postgres), the local object
// store and a third-party API (behind backends/httpapi, with an in-memory
// upstream), driven by many concurrent workers on many resources, some of
// whom hand segments to delegates.
//
// Every goroutine of a run is a task of one cooperative scheduler: exactly one
// runs at a time and it hands over only at interception points (each fence
// store, object store, upstream and registry call, and every sleep), where the
// seeded scheduler picks the next task, advances the simulated clock and
// injects faults. The same seed therefore replays the same run exactly:
//
//	go test ./internal/sim/ -run Sim -seed N -v
//
// The failure matrix of DESIGN §9 is injected at those points; the gates are
// counted as the run goes (accepted stale, forged, expired owner, skipped
// segment, regressed token or a regressed fence answered as its holder's
// write, authentication failures that touched state, two
// effects in flight, also in the store's commit order, a stale payout
// landing, a write landed after its receipt settled not applied, a final
// state that changes), and every client history is checked for
// linearizability against internal/history's fenced register. The tests live
// in the _test files; README.md lists what is injected and how often.
package sim
