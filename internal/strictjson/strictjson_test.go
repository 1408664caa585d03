package strictjson_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/strictjson"
)

type body struct {
	Resource string `json:"resource"`
	TTLMs    int64  `json:"ttlMs"`
	Wait     int64  `json:"waitMs,omitempty"`
}

var fields = strictjson.FieldsOf[body]()

// TestDecodeRefusesWhatEncodingJSONAccepts pins each rule of the package doc
// to a document encoding/json alone would take.
func TestDecodeRefusesWhatEncodingJSONAccepts(t *testing.T) {
	for name, c := range map[string]struct{ doc, want string }{
		"trailing brace":        {`{"resource":"a","ttlMs":1}}`, "trailing data"},
		"trailing bracket+junk": {`{"resource":"a","ttlMs":1}]junk`, "trailing data"},
		"second object":         {`{"resource":"a","ttlMs":1}{}`, "trailing data"},
		"duplicate member":      {`{"resource":"a","resource":"b","ttlMs":1}`, `duplicate JSON key "resource"`},
		"duplicate nested":      {`{"resource":"a","ttlMs":1,"waitMs":{"x":1,"x":2}}`, "duplicate JSON key"},
		"case-folded name":      {`{"Resource":"a","ttlMs":1}`, `unknown field "Resource"`},
		"unknown member":        {`{"resource":"a","ttlMs":1,"extra":1}`, `unknown field "extra"`},
		"null member":           {`{"resource":"a","ttlMs":null}`, "null is not allowed"},
		"required absent":       {`{"resource":"a"}`, `"ttlMs" is required`},
		"not an object":         {`["resource"]`, "single object"},
		"invalid UTF-8":         {"{\"resource\":\"\xff\",\"ttlMs\":1}", "UTF-8"},
		"fraction for integer":  {`{"resource":"a","ttlMs":1.5}`, "does not fit"},
		"too deep":              {`{"resource":"a","ttlMs":1,"waitMs":` + strings.Repeat("[", 20) + strings.Repeat("]", 20) + `}`, "nested too deeply"},
	} {
		t.Run(name, func(t *testing.T) {
			var v body
			_, err := strictjson.Decode([]byte(c.doc), &v, fields, "resource", "ttlMs")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Decode(%s) = %v (%+v), want an error containing %q", c.doc, err, v, c.want)
			}
		})
	}
}

func TestDecodeAcceptsAStrictDocument(t *testing.T) {
	var v body
	keys, err := strictjson.Decode([]byte(" {\"ttlMs\":30000, \"resource\":\"local/a\"}\n"), &v, fields, "resource", "ttlMs")
	if err != nil {
		t.Fatal(err)
	}
	if v != (body{Resource: "local/a", TTLMs: 30000}) || strings.Join(keys, ",") != "ttlMs,resource" {
		t.Errorf("decoded %+v keys %v", v, keys)
	}
}

func TestQuoteCutsLongStringsOnARuneBoundary(t *testing.T) {
	got := strictjson.Quote(strings.Repeat("é", 30))
	if !strings.HasSuffix(got, `"...`) || len(got) > 50 {
		t.Errorf("Quote = %s", got)
	}
}
