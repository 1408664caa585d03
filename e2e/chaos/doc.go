// Package chaos runs three `gateway serve` replicas of the built binary on one
// Postgres fence store and one S3-compatible object store, with a `gateway
// registry` on a three-member etcd cluster, and injects faults while workers
// write through all three: kill -9 and restart of replicas and of the
// registry, latency, connection resets and cuts on the links from each
// replica to Postgres and to S3, Postgres crashes and restarts, an etcd
// member killed and the etcd leader moved.
//
// When the faults stop, the test waits for every unknown outcome to settle
// and checks what the clients observed: zero stale writes accepted, zero
// receipts lost for writes answered 2xx, zero objects holding a refused
// write's bytes, every UNKNOWN settled, and the history linearizable against
// a fenced register per resource. README.md says how to run it longer.
//
// The package holds tests only; this file exists for its documentation.
package chaos
