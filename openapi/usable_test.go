package openapi_test

import (
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// schemaType is the type a schema (or its allOf parts) declares, "" if none.
func schemaType(s *openapi3.SchemaRef) string {
	if s == nil || s.Value == nil {
		return ""
	}
	if s.Value.Type != nil && len(*s.Value.Type) > 0 {
		return (*s.Value.Type)[0]
	}
	for _, sub := range s.Value.AllOf {
		if t := schemaType(sub); t != "" {
			return t
		}
	}
	return ""
}

// TestEveryOperationHasExamples: a generated client's docs (and a person
// reading the spec) see an example of every JSON or byte body an operation
// takes and of every body its success answers carry. The examples are
// checked against their schemas by TestSpecValidates (kin-openapi validates
// examples).
func TestEveryOperationHasExamples(t *testing.T) {
	doc := loadDoc(t)
	for _, op := range specOperations(doc) {
		method, path, _ := strings.Cut(op, " ")
		o := doc.Paths.Value(path).GetOperation(method)
		if o.RequestBody != nil {
			for ct, mt := range o.RequestBody.Value.Content {
				if mt.Example == nil && len(mt.Examples) == 0 {
					t.Errorf("%s: request body %s has no example", op, ct)
				}
			}
		}
		for status, r := range o.Responses.Map() {
			if !strings.HasPrefix(status, "2") {
				continue
			}
			for ct, mt := range r.Value.Content {
				if mt.Example == nil && len(mt.Examples) == 0 {
					t.Errorf("%s: %s answer %s has no example", op, status, ct)
				}
			}
		}
	}
}

// TestEveryHeaderIsTyped: every header parameter and every response header
// has a schema with a type, and the numeric ones are integers, so generated
// clients take and give numbers, not strings.
func TestEveryHeaderIsTyped(t *testing.T) {
	doc := loadDoc(t)
	integers := map[string]bool{"Fence-Segment": true, "Fence-Token": true, "Retry-After": true}
	check := func(where, name string, s *openapi3.SchemaRef) {
		typ := schemaType(s)
		switch {
		case typ == "":
			t.Errorf("%s: header %s has no typed schema", where, name)
		case integers[name] && typ != "integer":
			t.Errorf("%s: header %s is %s, want integer", where, name, typ)
		}
	}
	for _, op := range specOperations(doc) {
		method, path, _ := strings.Cut(op, " ")
		item := doc.Paths.Value(path)
		o := item.GetOperation(method)
		for _, p := range append(append(openapi3.Parameters{}, item.Parameters...), o.Parameters...) {
			if p.Value.In == openapi3.ParameterInHeader {
				check(op, p.Value.Name, p.Value.Schema)
			}
		}
		for status, r := range o.Responses.Map() {
			for name, h := range r.Value.Headers {
				check(op+" "+status, name, h.Value.Schema)
			}
		}
	}
	seg := doc.Components.Parameters["FenceSegment"]
	if seg == nil || schemaType(seg.Value.Schema) != "integer" || seg.Value.Schema.Value.Min == nil || *seg.Value.Schema.Value.Min != 1 {
		t.Errorf("the Fence-Segment parameter must be an integer >= 1")
	}
}

// TestWorkloadRoutesTakeBearerOrMutualTLS: the document declares the mTLS
// scheme (OpenAPI 3.1 mutualTLS) beside bearer, as alternatives for every
// route that does not declare its own security.
func TestWorkloadRoutesTakeBearerOrMutualTLS(t *testing.T) {
	doc := loadDoc(t)
	if s := doc.Components.SecuritySchemes["mtls"]; s == nil || s.Value == nil || s.Value.Type != "mutualTLS" {
		t.Fatalf("no mutualTLS security scheme named mtls")
	}
	var bearer, mtls bool
	for _, req := range doc.Security {
		if len(req) != 1 {
			t.Errorf("a top-level security requirement names %d schemes, want one (alternatives)", len(req))
		}
		_, b := req["bearer"]
		_, m := req["mtls"]
		bearer, mtls = bearer || b, mtls || m
	}
	if !bearer || !mtls {
		t.Errorf("top-level security %v: want bearer or mtls", doc.Security)
	}
}
