// Package strictjson is Fencegate's one strict JSON decoder, used for every
// JSON document taken from outside: signed tokens and trust bundles (package
// proofs) and request bodies (package handlers). It refuses what
// encoding/json would silently accept: invalid UTF-8, a top level that is not
// one object, a duplicate member name (RFC 8259 §4 leaves their meaning
// undefined; encoding/json keeps the last), null, member names that match a
// field only case-insensitively, unknown members, absent required members,
// and anything after the object but white space.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"
)

// MaxDepth bounds nesting in any document parsed here. The documents are
// flat; the bound only stops a hostile input from recursing.
const MaxDepth = 16

// Check walks data token by token and refuses invalid UTF-8, a top level that
// is not one object, a duplicate key in any object at any depth, null
// anywhere, nesting beyond MaxDepth, and anything after the object but white
// space. It returns the top-level keys in document order.
func Check(data []byte) ([]string, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("JSON is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("malformed JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("JSON must be a single object")
	}
	keys, err := walkObject(dec, 1)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	return keys, nil
}

// walkObject consumes the members of an object whose '{' has been read, up to
// and including its '}'.
func walkObject(dec *json.Decoder, depth int) ([]string, error) {
	if depth > MaxDepth {
		return nil, errors.New("JSON nested too deeply")
	}
	seen := make(map[string]struct{})
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("malformed JSON: %w", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("malformed JSON: object key is not a string")
		}
		if _, dup := seen[key]; dup {
			return nil, fmt.Errorf("duplicate JSON key %s", Quote(key))
		}
		seen[key] = struct{}{}
		keys = append(keys, key)
		if err := walkValue(dec, depth); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, fmt.Errorf("malformed JSON: %w", err)
	}
	return keys, nil
}

func walkValue(dec *json.Decoder, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("malformed JSON: %w", err)
	}
	switch v := tok.(type) {
	case nil:
		return errors.New("JSON null is not allowed")
	case json.Delim:
		switch v {
		case '{':
			_, err := walkObject(dec, depth+1)
			return err
		case '[':
			if depth+1 > MaxDepth {
				return errors.New("JSON nested too deeply")
			}
			for dec.More() {
				if err := walkValue(dec, depth+1); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil { // the closing ']'
				return fmt.Errorf("malformed JSON: %w", err)
			}
			return nil
		default:
			return fmt.Errorf("malformed JSON: unexpected %q", v)
		}
	}
	return nil
}

// Fields is the set of member names a document may have at its top level.
type Fields map[string]struct{}

// Decode checks data with Check, requires every top-level key to be one of
// fields byte for byte (encoding/json alone would match names
// case-insensitively) and each of required to be present, then decodes it
// into dst refusing unknown fields and out-of-range or fractional numbers
// for integer fields. It returns the top-level keys in document order.
func Decode(data []byte, dst any, fields Fields, required ...string) ([]string, error) {
	keys, err := Check(data)
	if err != nil {
		return nil, err
	}
	present := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if _, ok := fields[k]; !ok {
			return nil, fmt.Errorf("unknown field %s", Quote(k))
		}
		present[k] = struct{}{}
	}
	for _, k := range required {
		if _, ok := present[k]; !ok {
			return nil, fmt.Errorf("%s is required", Quote(k))
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("field %s: value %s does not fit %s", Quote(te.Field), te.Value, te.Type)
		}
		return nil, fmt.Errorf("malformed JSON: %w", err)
	}
	return keys, nil
}

// FieldsOf returns the JSON member names of struct type T, from its json
// tags. Only flat structs are used here.
func FieldsOf[T any]() Fields {
	return FieldsOfType(reflect.TypeFor[T]())
}

// FieldsOfType returns the JSON member names of struct type t (or of the
// struct t points to), from its json tags.
func FieldsOfType(t reflect.Type) Fields {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	out := make(Fields, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = struct{}{}
	}
	return out
}

// Quote quotes s for an error message, cut to a sane length so that a
// hostile token cannot make the message large.
func Quote(s string) string {
	const max = 40
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q...", s[:cut])
	}
	return fmt.Sprintf("%q", s)
}
