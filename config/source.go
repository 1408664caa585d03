package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/backends/httpapi"
)

// source is a loaded configuration file: its path and its YAML tree, used to
// turn a problem's field path into "FILE:LINE: problem".
type source struct {
	path string
	root *yaml.Node
}

// fieldError is a problem of one field of the file, at a YAML path
// ("registry.backend", "stores.s3a").
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

// locate prefixes each problem of one field (a *fieldError or an
// *httpapi.FieldError) with the file and line of its field, or of the
// nearest enclosing value present in the file. Without a file (a config
// built in code), or for a problem of no one field, it is left as it is.
func (s *source) locate(list []error) []error {
	out := make([]error, 0, len(list))
	for _, e := range list {
		field := ""
		var fe *httpapi.FieldError
		var ce *fieldError
		switch {
		case errors.As(e, &fe):
			field = fe.Field
		case errors.As(e, &ce):
			field = ce.field
		}
		line, ok := 0, false
		if s != nil && field != "" {
			line, ok = s.line(field)
		}
		if !ok {
			out = append(out, e)
			continue
		}
		out = append(out, &located{file: s.path, line: line, err: e})
	}
	return out
}

// located is a problem with its place in the file; it unwraps to the problem.
type located struct {
	file string
	line int
	err  error
}

func (l *located) Error() string { return fmt.Sprintf("%s:%d: %s", l.file, l.line, l.err) }
func (l *located) Unwrap() error { return l.err }

// line finds the line of field, a path like "apis[0].contract.idempotency":
// map keys separated by dots, sequence indexes in brackets. A key absent from
// the file resolves to the line of the value that should hold it; ok is
// false when not even the field's top-level key is in the file (the value
// came from a default or a flag).
func (s *source) line(field string) (line int, ok bool) {
	n := s.root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for i, step := range pathSteps(field) {
		next, l := child(n, step)
		if next == nil {
			return line, i > 0
		}
		n, line = next, l
	}
	return line, true
}

// pathSteps splits "apis[0].routes[1].path" into apis, 0, routes, 1, path
// (indexes as "[0]").
func pathSteps(field string) []string {
	var out []string
	for _, part := range strings.Split(field, ".") {
		name, rest, _ := strings.Cut(part, "[")
		if name != "" {
			out = append(out, name)
		}
		for rest != "" {
			idx, more, _ := strings.Cut(rest, "]")
			out = append(out, "["+idx+"]")
			rest = strings.TrimPrefix(more, "[")
		}
	}
	return out
}

// child is the value under step in n (a mapping key, or "[i]" of a
// sequence) and the line where it is written: a key's line for a mapping.
func child(n *yaml.Node, step string) (*yaml.Node, int) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if idx, ok := strings.CutPrefix(step, "["); ok {
		i, err := strconv.Atoi(strings.TrimSuffix(idx, "]"))
		if n.Kind != yaml.SequenceNode || err != nil || i < 0 || i >= len(n.Content) {
			return nil, 0
		}
		return n.Content[i], n.Content[i].Line
	}
	if n.Kind != yaml.MappingNode {
		return nil, 0
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == step {
			return n.Content[i+1], n.Content[i].Line
		}
	}
	return nil, 0
}
