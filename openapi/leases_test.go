package openapi_test

import (
	"testing"

	"github.com/fencegate/fencegate"
)

// TestS3CredentialsWithoutS3ChangeNothing: on a registry that issues no S3
// credentials, asking for them is UNSUPPORTED before anything is done (a
// renew leaves the lease's expiry as it was), and a bad s3Credentials query
// value is INVALID_REQUEST; every answer is the spec's.
func TestS3CredentialsWithoutS3ChangeNothing(t *testing.T) {
	e := newEnv(t)
	json := map[string]string{"Content-Type": "application/json"}
	_, lease := e.call("POST", "/v1/leases", tokA, json, `{"resource":"local/inv/8","requestId":"r8","ttlMs":30000,"operationId":"op"}`, 201)
	id := lease["lease"].(string)

	_, p := e.call("GET", "/v1/leases/"+id+"?s3Credentials=yes", tokA, nil, "", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("GET", "/v1/leases/"+id+"?s3Credentials=true", tokA, nil, "", 501)
	wantCode(t, p, fencegate.CodeUnsupported)
	_, p = e.call("POST", "/v1/leases/"+id+"/renew", tokA, json, `{"ttlMs":600000,"s3Credentials":true}`, 501)
	wantCode(t, p, fencegate.CodeUnsupported)
	_, p = e.call("POST", "/v1/leases", tokA, json, `{"resource":"local/inv/9","requestId":"r9","ttlMs":30000,"operationId":"op","s3Credentials":true}`, 501)
	wantCode(t, p, fencegate.CodeUnsupported)

	_, now := e.call("GET", "/v1/leases/"+id, tokA, nil, "", 200)
	if now["expiresAt"] != lease["expiresAt"] || now["state"] != "HELD" {
		t.Errorf("lease after refused requests: %s until %v, was HELD until %v", now["state"], now["expiresAt"], lease["expiresAt"])
	}
	_, other := e.call("POST", "/v1/leases", tokB, json, `{"resource":"local/inv/9","requestId":"r9b","ttlMs":30000,"operationId":"op"}`, 201)
	if other["fenceToken"] != float64(1) {
		t.Errorf("local/inv/9 after a refused acquire: %v", other)
	}
}
