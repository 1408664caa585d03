package proofs

// SignatureChecks returns how many times v ran a signature check.
func SignatureChecks(v *Verifier) uint64 { return v.sigChecks.Load() }

// CheckStrictJSON exposes the strict JSON walker to the external tests.
var CheckStrictJSON = checkStrictJSON
