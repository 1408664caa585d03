// Package fencegate holds the domain of a fencing gateway: grants and status
// proofs, the per-resource fence rules, receipts, the closed set of error codes,
// and the interfaces that stores, object backends and lease backends implement.
//
// It imports no driver, SDK or HTTP package. Adapters live in sub-packages named
// after what they adapt (fencestore/postgres, backends/s3, ...); the acceptance
// point that ties them together lives in package gateway.
package fencegate
