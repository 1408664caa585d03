// Package fencegate is the domain (package domain, its own small module at
// domain/) under the import path the gateway's packages use: every exported
// name here is domain's own (type aliases, the same constants and sentinel
// errors, functions that call domain's), so a value made through either path
// is the same value of the same type.
//
// The domain lives in a module of its own so that the worker client (module
// github.com/fencegate/fencegate/client) can share its types, its error
// type and its closed set of codes without pulling this module's drivers
// and SDKs into a worker's build. domain_aliases.go is generated from
// domain/ (scripts/gen-domain-aliases); TestRootReExportsEveryDomainName
// fails when a name is missing.
package fencegate
