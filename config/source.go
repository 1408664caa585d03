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

// locate splits err (an errors.Join of problems) into its problems and
// prefixes each *httpapi.FieldError with the file and line of its field (or
// of the nearest enclosing value present in the file). Without a file (a
// config built in code) problems are returned as they are.
func (s *source) locate(err error) []error {
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	out := make([]error, 0, len(list))
	for _, e := range list {
		var fe *httpapi.FieldError
		if s == nil || !errors.As(e, &fe) {
			out = append(out, e)
			continue
		}
		out = append(out, &located{file: s.path, line: s.line(fe.Field), err: e})
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
// the file resolves to the line of the value that should hold it.
func (s *source) line(field string) int {
	n := s.root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	best := n.Line
	for _, step := range pathSteps(field) {
		next, line := child(n, step)
		if next == nil {
			break
		}
		n, best = next, line
	}
	return best
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
