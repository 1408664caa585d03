package proofs

// SignatureChecks returns how many times v ran a signature check.
func SignatureChecks(v *Verifier) uint64 { return v.sigChecks.Load() }
