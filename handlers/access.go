package handlers

import (
	"github.com/fencegate/fencegate"
)

// checkRead is mayRead as an error: FORBIDDEN, naming caller and resource.
func (s *Server) checkRead(caller, resource string) error {
	if s.mayRead(caller, resource) {
		return nil
	}
	return fencegate.Errorf(fencegate.CodeForbidden, "the access policy does not let %q read %q", caller, resource)
}

// checkReadName is checkRead of a resource named in a query: a canonical
// name (fencegate.CheckName) the caller may read.
func (s *Server) checkReadName(caller, resource string) error {
	if err := fencegate.CheckName(resource); err != nil {
		return err
	}
	return s.checkRead(caller, resource)
}

// readableReceipts keeps the receipts (and with them any stored upstream
// answer) of resources caller may read; the others are left out of a list.
func (s *Server) readableReceipts(caller string, list []fencegate.Receipt) []fencegate.Receipt {
	return readable(s, caller, list, func(rc fencegate.Receipt) string { return rc.Resource })
}

// readableQuarantine keeps the quarantine records of resources caller may read.
func (s *Server) readableQuarantine(caller string, list []fencegate.Quarantine) []fencegate.Quarantine {
	return readable(s, caller, list, func(q fencegate.Quarantine) string { return q.Resource })
}

// readable keeps, in order, the items of list whose resource caller may read
// (mayRead); the result is never nil.
func readable[T any](s *Server, caller string, list []T, resource func(T) string) []T {
	out := make([]T, 0, len(list))
	for _, v := range list {
		if s.mayRead(caller, resource(v)) {
			out = append(out, v)
		}
	}
	return out
}

// mayRead applies the read policy: MayRead when set, else every
// authenticated workload may read (as receipts and objects are read).
func (s *Server) mayRead(caller, resource string) bool {
	if s.MayRead == nil {
		return true
	}
	return s.MayRead(caller, resource)
}
