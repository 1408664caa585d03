package openapi_test

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/handlers"
	"github.com/fencegate/fencegate/openapi"
)

// wildcards maps the prefix of a chi catch-all route ("prefix*") to the name
// of the spec's trailing path parameter that stands for it.
var wildcards = map[string]string{
	"/v1/objects/{store}/":        "key",
	"/v1/resources/":              "resource",
	"/v1/apis/{api}/":             "path",
	"/v1/admin/bindings/{store}/": "key",
}

func loadDoc(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(openapi.Spec)
	if err != nil {
		t.Fatalf("load spec: %v", err)
	}
	return doc
}

// routedOperations walks the chi router and returns "METHOD /spec/path" for
// every route, with a trailing catch-all mapped to its spec parameter.
func routedOperations(t *testing.T, h http.Handler) []string {
	t.Helper()
	routes, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("handlers.Router returned %T, not a chi router", h)
	}
	var ops []string
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if route == "/console" || strings.HasPrefix(route, "/console/") {
			return nil // the operator console's HTML pages, not the API (README, "Operator console")
		}
		if prefix, ok := strings.CutSuffix(route, "*"); ok {
			name, known := wildcards[prefix]
			if !known {
				t.Errorf("catch-all route %s %s has no spec parameter in wildcards", method, route)
				return nil
			}
			route = prefix + "{" + name + "}"
		}
		ops = append(ops, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(ops)
	return ops
}

// specOperations returns "METHOD /path" for every operation of doc.
func specOperations(doc *openapi3.T) []string {
	var ops []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(ops)
	return ops
}

func TestSpecValidates(t *testing.T) {
	doc := loadDoc(t)
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi version %q, want 3.1.0", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("spec does not validate: %v", err)
	}
}

func TestEveryRouteIsInTheSpec(t *testing.T) {
	e := newEnv(t)
	spec := specOperations(e.doc)
	for _, op := range routedOperations(t, e.h) {
		if !slices.Contains(spec, op) {
			t.Errorf("routed but not in openapi.yaml: %s", op)
		}
	}
}

func TestEverySpecOperationIsRouted(t *testing.T) {
	e := newEnv(t)
	routed := routedOperations(t, e.h)
	for _, op := range specOperations(e.doc) {
		if !slices.Contains(routed, op) {
			t.Errorf("in openapi.yaml but not routed: %s", op)
		}
	}
}

// problemCodes returns the code enum of a problem+json response schema
// (Problem itself or an allOf that narrows its code).
func problemCodes(s *openapi3.SchemaRef) []string {
	if s == nil || s.Value == nil {
		return nil
	}
	var out []string
	if c := s.Value.Properties["code"]; c != nil && c.Value != nil {
		for _, v := range c.Value.Enum {
			out = append(out, v.(string))
		}
	}
	for _, sub := range s.Value.AllOf {
		if sub.Ref == "#/components/schemas/Problem" {
			continue
		}
		out = append(out, problemCodes(sub)...)
	}
	return out
}

func TestProblemCodesMatchTheDomain(t *testing.T) {
	doc := loadDoc(t)
	code := doc.Components.Schemas["Code"]
	if code == nil || code.Value == nil {
		t.Fatal("no Code schema")
	}
	var enum []string
	for _, v := range code.Value.Enum {
		enum = append(enum, v.(string))
	}
	problem := doc.Components.Schemas["Problem"].Value.Properties["code"]
	if problem == nil || problem.Ref != "#/components/schemas/Code" {
		t.Fatal("Problem.code must be a $ref to Code")
	}
	for _, c := range fencegate.Codes {
		if !slices.Contains(enum, string(c)) {
			t.Errorf("code %s of fencegate.Codes is missing from the Problem code enum", c)
		}
	}
	for _, c := range enum {
		if !slices.Contains(fencegate.Codes, fencegate.Code(c)) {
			t.Errorf("code %s of the Problem code enum is not in fencegate.Codes", c)
		}
	}
}

// TestErrorResponsesMatchStatusOf checks that every error response of every
// operation lists its codes, that each code's handlers.StatusOf is the
// response's status, and that every domain code is documented somewhere.
func TestErrorResponsesMatchStatusOf(t *testing.T) {
	doc := loadDoc(t)
	seen := map[string]bool{}
	for _, op := range specOperations(doc) {
		method, path, _ := strings.Cut(op, " ")
		o := doc.Paths.Value(path).GetOperation(method)
		for status, resp := range o.Responses.Map() {
			n, err := strconv.Atoi(status)
			if err != nil || n < 400 {
				continue
			}
			mt := resp.Value.Content.Get("application/problem+json")
			if mt == nil {
				t.Errorf("%s: response %s is not problem+json", op, status)
				continue
			}
			codes := problemCodes(mt.Schema)
			if len(codes) == 0 {
				t.Errorf("%s: response %s lists no codes", op, status)
			}
			for _, c := range codes {
				seen[c] = true
				if got := handlers.StatusOf(fencegate.Code(c)); got != n {
					t.Errorf("%s: code %s documented under %d, StatusOf gives %d", op, c, n, got)
				}
			}
		}
	}
	for _, c := range fencegate.Codes {
		if !seen[string(c)] {
			t.Errorf("code %s is not documented on any operation", c)
		}
	}
}

// TestOperatorRoutesNeedTheAdminScheme checks that the operator routes, and
// only they, declare the admin credential, and that they document 401
// UNAUTHENTICATED and 403 FORBIDDEN.
func TestOperatorRoutesNeedTheAdminScheme(t *testing.T) {
	doc := loadDoc(t)
	if s := doc.Components.SecuritySchemes["admin"]; s == nil || s.Value == nil || s.Value.Scheme != "bearer" {
		t.Fatal("no bearer security scheme named admin")
	}
	for _, op := range specOperations(doc) {
		method, path, _ := strings.Cut(op, " ")
		o := doc.Paths.Value(path).GetOperation(method)
		operator := strings.HasPrefix(path, "/v1/admin/") || path == "/v1/unknown/{receiptId}/resolve"
		admin := o.Security != nil && len(*o.Security) == 1 && (*o.Security)[0]["admin"] != nil
		if operator != admin {
			t.Errorf("%s: operator route %v, but admin security %v", op, operator, admin)
		}
		if !operator {
			continue
		}
		for status, code := range map[string]string{"401": "UNAUTHENTICATED", "403": "FORBIDDEN"} {
			r := o.Responses.Value(status)
			if r == nil || r.Value.Content.Get("application/problem+json") == nil ||
				!slices.Contains(problemCodes(r.Value.Content.Get("application/problem+json").Schema), code) {
				t.Errorf("%s: no %s %s response", op, status, code)
			}
		}
	}
}
