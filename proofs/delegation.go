package proofs

import (
	"encoding/json"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/strictjson"
)

// TypDelegation is the typ header of a leaseDelegation.v1 JWS.
const TypDelegation = "leasedelegation+jws"

var (
	delegationKind   = docKind{name: "delegation", typ: TypDelegation, code: fencegate.CodeDelegationInvalid}
	delegationFields = strictjson.FieldsOf[fencegate.Delegation]()
)

// SignDelegation signs json.Marshal(d) as a compact JWS with typ
// leasedelegation+jws. It does not validate d: the registry does before it
// signs.
func (s *Signer) SignDelegation(d fencegate.Delegation) (string, error) {
	payload, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	return s.sign(payload, TypDelegation)
}

// VerifyDelegation verifies a compact leaseDelegation.v1 JWS under exactly
// the rules of a grant (size cap, compact form, strict header and JSON, kid
// in the fixed trust bundle, the key's own algorithm and window, typ) and
// checks that it is well formed (fencegate.Delegation.Validate), signed by a
// key of its issuerEpoch, and bound to the verified grant g
// (fencegate.Delegation.BindsGrant). Any failure is DELEGATION_INVALID (a
// key of a revoked epoch: EPOCH_REVOKED). Whether the delegation is revoked,
// and whether the lease is still held, is what its status proof says.
// Delegations are not cached: a delegated write verifies it once per check.
func (v *Verifier) VerifyDelegation(token string, g fencegate.VerifiedGrant) (fencegate.Delegation, error) {
	if err := v.checkSize(token, delegationKind); err != nil {
		return fencegate.Delegation{}, err
	}
	key, payload, err := v.verifyToken(token, delegationKind, v.bundle.Load(), v.now())
	if err != nil {
		return fencegate.Delegation{}, err
	}
	var d fencegate.Delegation
	if _, err := strictjson.Decode(payload, &d, delegationFields); err != nil {
		return fencegate.Delegation{}, delegationKind.errorf("payload: %v", err)
	}
	if err := d.Validate(); err != nil {
		return fencegate.Delegation{}, err
	}
	if d.IssuerEpoch != key.epoch {
		return fencegate.Delegation{}, delegationKind.errorf("issuerEpoch %d is not the epoch %d of key %s", d.IssuerEpoch, key.epoch, strictjson.Quote(key.kid))
	}
	if err := d.BindsGrant(g); err != nil {
		return fencegate.Delegation{}, err
	}
	return d, nil
}
