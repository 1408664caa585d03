// Command gen-domain-aliases writes domain_aliases.go: the root package
// fencegate re-exports every exported name of package domain, so the gateway's
// packages keep their import path while the worker client shares the domain
// module alone. Run from the repository root:
//
//	go run ./scripts/gen-domain-aliases domain > domain_aliases.go
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// main prints the root package's re-export of package domain (the directory
// named by its argument) on standard output.
func main() {
	dir := os.Args[1]
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	types := map[string]bool{}
	var parsed []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			panic(err)
		}
		parsed = append(parsed, af)
		for _, d := range af.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					types[s.(*ast.TypeSpec).Name.Name] = true
				}
			}
		}
	}
	var tys, consts, vars, funcs []string
	for _, af := range parsed {
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							tys = append(tys, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								if d.Tok == token.CONST {
									consts = append(consts, n.Name)
								} else {
									vars = append(vars, n.Name)
								}
							}
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv != nil || !d.Name.IsExported() {
					continue
				}
				ft := d.Type
				ast.Inspect(ft, func(n ast.Node) bool {
					switch x := n.(type) {
					case *ast.Field:
						x.Type = qual(x.Type, types)
					case *ast.StarExpr:
						x.X = qual(x.X, types)
					case *ast.ArrayType:
						x.Elt = qual(x.Elt, types)
					case *ast.Ellipsis:
						x.Elt = qual(x.Elt, types)
					}
					return true
				})
				var args []string
				for _, p := range ft.Params.List {
					for _, n := range p.Names {
						a := n.Name
						if _, ok := p.Type.(*ast.Ellipsis); ok {
							a += "..."
						}
						args = append(args, a)
					}
				}
				var b bytes.Buffer
				printer.Fprint(&b, fset, ft)
				sig := strings.TrimPrefix(b.String(), "func")
				funcs = append(funcs, fmt.Sprintf("// %s is domain.%s.\nfunc %s%s { return domain.%s(%s) }\n", d.Name.Name, d.Name.Name, d.Name.Name, sig, d.Name.Name, strings.Join(args, ", ")))
			}
		}
	}
	sort.Strings(tys)
	sort.Strings(consts)
	sort.Strings(vars)
	sort.Strings(funcs)
	var o bytes.Buffer
	o.WriteString("// Code generated from domain/ by the generator in scripts/gen-domain-aliases; DO NOT EDIT.\n\npackage fencegate\n\nimport (\n\"context\"\n\"time\"\n\n\"github.com/fencegate/fencegate/domain\"\n)\n\n")
	o.WriteString("// The domain's types, each the same type as domain's (an alias).\ntype (\n")
	for _, t := range tys {
		fmt.Fprintf(&o, "%s = domain.%s\n", t, t)
	}
	o.WriteString(")\n\n// The domain's constants.\nconst (\n")
	for _, c := range consts {
		fmt.Fprintf(&o, "%s = domain.%s\n", c, c)
	}
	o.WriteString(")\n\n// The domain's variables: the same values (a sentinel error is the same error, errors.Is holds across both names).\nvar (\n")
	for _, v := range vars {
		fmt.Fprintf(&o, "%s = domain.%s\n", v, v)
	}
	o.WriteString(")\n\n")
	for _, f := range funcs {
		o.WriteString(f + "\n")
	}
	src, err := format.Source(o.Bytes())
	if err != nil {
		os.Stdout.Write(o.Bytes())
		panic(err)
	}
	os.Stdout.Write(src)
}

func qual(e ast.Expr, types map[string]bool) ast.Expr {
	if id, ok := e.(*ast.Ident); ok && types[id.Name] {
		return &ast.SelectorExpr{X: ast.NewIdent("domain"), Sel: ast.NewIdent(id.Name)}
	}
	return e
}
