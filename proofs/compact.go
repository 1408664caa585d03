package proofs

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// b64 decodes a segment: unpadded base64url with zero trailing bits. It
// still skips '\r' and '\n' (Go's decoders do, even strict), so a segment
// is scanned for its bytes before it is decoded (splitCompact).
var b64 = base64.RawURLEncoding.Strict()

// splitCompact is the one structural check of a compact JWS, shared by
// tokens (verifyToken) and trust bundle signatures (verifyBundleJWS). It
// guarantees, in this order: exactly two dots; no empty header or signature
// segment, and a payload segment that is empty when detached (RFC 7515
// Appendix F) and non-empty otherwise; no byte outside unpadded base64url and
// '.' (no padding, no standard alphabet, no white space for the decoder to
// skip); and every segment strict base64url. It returns the decoded header
// and payload (nil when detached); the signature is decoded only to check
// it, the caller's jws.Verify checking it again over the same bytes. Errors
// are plain, for the caller to give its code and prefix.
func splitCompact(token string, detached bool) (hdrJSON, payload []byte, err error) {
	if n := strings.Count(token, "."); n != 2 {
		return nil, nil, fmt.Errorf("compact JWS must have exactly two dots, not %d", n)
	}
	hSeg, rest, _ := strings.Cut(token, ".")
	pSeg, sSeg, _ := strings.Cut(rest, ".")
	switch {
	case detached && pSeg != "":
		return nil, nil, errors.New("the payload is attached: the signature must be detached (a grant or status proof is not)")
	case hSeg == "" || sSeg == "" || !detached && pSeg == "":
		return nil, nil, errors.New("compact JWS has an empty segment")
	}
	for i := 0; i < len(token); i++ {
		c := token[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return nil, nil, errors.New("token has a byte outside unpadded base64url")
		}
	}
	if hdrJSON, err = b64.DecodeString(hSeg); err != nil {
		return nil, nil, errors.New("header is not base64url")
	}
	if !detached {
		if payload, err = b64.DecodeString(pSeg); err != nil {
			return nil, nil, errors.New("payload is not base64url")
		}
	}
	if _, err := b64.DecodeString(sSeg); err != nil {
		return nil, nil, errors.New("signature is not base64url")
	}
	return hdrJSON, payload, nil
}
