package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

func init() {
	register("completion", verb{usage: "completion bash|zsh|fish", nargs: 1, flags: completionFlags,
		help: "print a shell completion script (bash: source <(fencectl completion bash); zsh: same after compinit; fish: fencectl completion fish | source)"})
}

// The scripts are generated from the verb table and each verb's flag set,
// so a new verb or flag completes without touching this file. fencectl
// parses with the standard flag package; a completion library would mean
// rewriting the CLI on it (cobra), so the three scripts are written here,
// each after its shell's documented completion interface:
// bash: https://www.gnu.org/software/bash/manual/html_node/Programmable-Completion-Builtins.html
// zsh: https://zsh.sourceforge.io/Doc/Release/Completion-System.html
// fish: https://fishshell.com/docs/current/completions.html

// completionFlag is one flag as a shell completes it.
type completionFlag struct {
	name, usage string
	value       bool // takes a value (not a boolean flag)
}

// completionVerb is one verb with its own flags (the globals excluded).
type completionVerb struct {
	name, help string
	flags      []completionFlag
}

// flagsOf lists the flags registered on fs, sorted by name.
func flagsOf(fs *flag.FlagSet, skip map[string]bool) []completionFlag {
	var out []completionFlag
	fs.VisitAll(func(f *flag.Flag) {
		if skip[f.Name] {
			return
		}
		b, isBool := f.Value.(interface{ IsBoolFlag() bool })
		_, usage := flag.UnquoteUsage(f) // without the `name` marks
		out = append(out, completionFlag{name: f.Name, usage: usage, value: !(isBool && b.IsBoolFlag())})
	})
	return out
}

// completionModel is the verb table as the scripts need it.
func completionModel() (gflags []completionFlag, vs []completionVerb) {
	gfs := flag.NewFlagSet("", flag.ContinueOnError)
	addGlobals(gfs, &globals{})
	gflags = flagsOf(gfs, nil)
	skip := map[string]bool{}
	for _, f := range gflags {
		skip[f.name] = true
	}
	names := make([]string, 0, len(verbs))
	for n := range verbs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fs := flag.NewFlagSet(n, flag.ContinueOnError)
		verbs[n].flags(fs) // registers the flags; the returned run is not called
		vs = append(vs, completionVerb{name: n, help: verbs[n].help, flags: flagsOf(fs, skip)})
	}
	return gflags, vs
}

func completionFlags(*flag.FlagSet) func(context.Context, *cmd) error {
	return func(_ context.Context, c *cmd) error {
		g, vs := completionModel()
		switch c.args[0] {
		case "bash":
			bashCompletion(c.out, g, vs)
		case "zsh":
			zshCompletion(c.out, g, vs)
		case "fish":
			fishCompletion(c.out, g, vs)
		default:
			return usageError{fmt.Sprintf("completion for bash, zsh or fish, not %q", c.args[0])}
		}
		return nil
	}
}

// valueFlags are the --names of the flags in fl that take a value.
func valueFlags(fl ...[]completionFlag) string {
	var out []string
	for _, l := range fl {
		for _, f := range l {
			if f.value {
				out = append(out, dash(f.name))
			}
		}
	}
	sort.Strings(out)
	return strings.Join(compactStrings(out), " ")
}

func compactStrings(s []string) []string {
	var out []string
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// dash is how a flag is written: -o for one letter, --name otherwise (the
// flag package takes either).
func dash(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func flagWords(fl []completionFlag) string {
	var out []string
	for _, f := range fl {
		out = append(out, dash(f.name))
	}
	return strings.Join(out, " ")
}

// oneLine makes s safe inside single quotes and on one line.
func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "'", "")
}

func bashCompletion(w io.Writer, g []completionFlag, vs []completionVerb) {
	names := make([]string, len(vs))
	for i, v := range vs {
		names[i] = v.name
	}
	var all [][]completionFlag
	for _, v := range vs {
		all = append(all, v.flags)
	}
	fmt.Fprintf(w, `# bash completion for fencectl: source <(fencectl completion bash)
_fencectl() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} verb="" w i
    local valflags=' %s '
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        case $w in
            --*=*|-*=*) ;;
            -*) [[ $valflags == *" $w "* || $valflags == *" -$w "* ]] && ((i++)) ;;
            *) verb=$w; break ;;
        esac
    done
    if [[ $prev == -* && ( $valflags == *" $prev "* || $valflags == *" -$prev "* ) ]]; then
        COMPREPLY=()
        return
    fi
    if [[ $verb == completion && $cur != -* ]]; then
        COMPREPLY=($(compgen -W 'bash zsh fish' -- "$cur"))
        return
    fi
    local words
    case $verb in
        "") if [[ $cur == -* ]]; then words='%s'; else words='%s'; fi ;;
`, valueFlags(append(all, g)...), flagWords(g), strings.Join(names, " "))
	for _, v := range vs {
		fmt.Fprintf(w, "        %s) words='%s' ;;\n", v.name, strings.TrimSpace(flagWords(v.flags)+" "+flagWords(g)))
	}
	fmt.Fprint(w, `        *) words='' ;;
    esac
    if [[ -z $verb || $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    else
        COMPREPLY=()
    fi
}
complete -o default -F _fencectl fencectl
`)
}

func zshCompletion(w io.Writer, g []completionFlag, vs []completionVerb) {
	var all [][]completionFlag
	for _, v := range vs {
		all = append(all, v.flags)
	}
	fmt.Fprintf(w, `#compdef fencectl
# zsh completion for fencectl: source <(fencectl completion zsh) after compinit,
# or save it as _fencectl in a directory of $fpath.
_fencectl() {
    local -a verbs valflags flags
    valflags=(%s)
    verbs=(
`, valueFlags(append(all, g)...))
	for _, v := range vs {
		fmt.Fprintf(w, "        '%s:%s'\n", v.name, oneLine(strings.ReplaceAll(v.help, ":", "\\:")))
	}
	fmt.Fprintf(w, `    )
    local verb="" i w cur=${words[CURRENT]}
    for ((i = 2; i < CURRENT; i++)); do
        w=${words[i]}
        case $w in
            --*=*|-*=*) ;;
            -*) (( ${valflags[(Ie)$w]} || ${valflags[(Ie)-$w]} )) && ((i++)) ;;
            *) verb=$w; break ;;
        esac
    done
    case $verb in
        "") flags=(%s) ;;
`, flagWords(g))
	for _, v := range vs {
		fmt.Fprintf(w, "        %s) flags=(%s) ;;\n", v.name, strings.TrimSpace(flagWords(v.flags)+" "+flagWords(g)))
	}
	fmt.Fprint(w, `    esac
    if [[ $cur == -* ]]; then
        compadd -- $flags
    elif [[ -z $verb ]]; then
        _describe 'fencectl command' verbs
    elif [[ $verb == completion ]]; then
        compadd -- bash zsh fish
    else
        _files
    fi
}
if (( $+functions[compdef] )); then
    compdef _fencectl fencectl
fi
`)
}

func fishCompletion(w io.Writer, g []completionFlag, vs []completionVerb) {
	fmt.Fprintln(w, "# fish completion for fencectl: fencectl completion fish | source")
	names := make([]string, len(vs))
	for i, v := range vs {
		names[i] = v.name
	}
	none := "not __fish_seen_subcommand_from " + strings.Join(names, " ")
	for _, v := range vs {
		fmt.Fprintf(w, "complete -c fencectl -f -n '%s' -a %s -d '%s'\n", none, v.name, oneLine(v.help))
	}
	fmt.Fprintln(w, "complete -c fencectl -f -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'")
	flagLine := func(cond string, f completionFlag) {
		req, opt := "", "-l"
		if f.value {
			req = " -r"
		}
		if len(f.name) == 1 {
			opt = "-s"
		}
		fmt.Fprintf(w, "complete -c fencectl%s %s %s -d '%s'%s\n", cond, opt, f.name, oneLine(f.usage), req)
	}
	for _, f := range g {
		flagLine("", f)
	}
	for _, v := range vs {
		for _, f := range v.flags {
			flagLine(" -n '__fish_seen_subcommand_from "+v.name+"'", f)
		}
	}
}
