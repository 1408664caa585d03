package registry

import (
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fencegate/fencegate"
)

// MaxFieldLength bounds owner, request ID and the operation fields, in bytes.
const MaxFieldLength = 256

// AcquireParams is what a workload asks for. Resource must pass
// fencegate.CheckName; RequestID and OperationID are required; OperationRoot
// defaults to OperationRoot(OperationID, Resource, RequestID); TTL must lie
// within the registry's [MinTTL, MaxTTL]. Text fields are valid UTF-8 without
// control characters, at most MaxFieldLength bytes.
type AcquireParams struct {
	Resource          string
	RequestID         string
	OperationID       string
	OperationRoot     string
	OperationCategory string
	TTL               time.Duration
}

// checkAcquire validates p (filling in OperationRoot) or returns INVALID_REQUEST.
func (r *Registry) checkAcquire(owner string, p *AcquireParams) error {
	if err := fencegate.CheckName(p.Resource); err != nil {
		return err
	}
	for _, f := range []struct{ name, value string }{
		{"owner", owner}, {"requestId", p.RequestID}, {"operationId", p.OperationID},
	} {
		if f.value == "" {
			return fencegate.Errorf(fencegate.CodeInvalidRequest, "%s is required", f.name)
		}
	}
	for _, f := range []struct{ name, value string }{
		{"owner", owner}, {"requestId", p.RequestID}, {"operationId", p.OperationID},
		{"operationRoot", p.OperationRoot}, {"operationCategory", p.OperationCategory},
	} {
		if err := checkText(f.name, f.value); err != nil {
			return err
		}
	}
	if p.OperationRoot == "" {
		p.OperationRoot = OperationRoot(p.OperationID, p.Resource, p.RequestID)
	}
	return r.checkTTL(p.TTL)
}

func (r *Registry) checkTTL(ttl time.Duration) error {
	if ttl < r.minTTL || ttl > r.maxTTL {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "TTL %v outside [%v, %v]", ttl, r.minTTL, r.maxTTL)
	}
	return nil
}

func checkText(name, s string) error {
	if len(s) > MaxFieldLength {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "%s longer than %d bytes", name, MaxFieldLength)
	}
	if !utf8.ValidString(s) {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "%s is not valid UTF-8", name)
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return fencegate.Errorf(fencegate.CodeInvalidRequest, "%s contains a control character", name)
		}
	}
	return nil
}
