package main

import (
	"context"
	"flag"
	"runtime/debug"
	"strconv"
)

func init() {
	register("version", verb{usage: "version", help: "print fencectl's module version, Go version and VCS revision", flags: versionFlags})
}

// readBuildInfo is debug.ReadBuildInfo; tests replace it.
var readBuildInfo = debug.ReadBuildInfo

// versionInfo is what `fencectl version` prints: the build's own record
// (runtime/debug.BuildInfo), nothing stamped by hand.
type versionInfo struct {
	Module    string `json:"module"`
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Revision  string `json:"vcsRevision,omitempty"`
	Time      string `json:"vcsTime,omitempty"`
	Modified  bool   `json:"vcsModified,omitempty"`
}

func buildVersion() versionInfo {
	bi, ok := readBuildInfo()
	if !ok {
		return versionInfo{Version: "unknown"}
	}
	v := versionInfo{Module: bi.Main.Path, Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified, _ = strconv.ParseBool(s.Value)
		}
	}
	return v
}

func versionFlags(*flag.FlagSet) func(context.Context, *cmd) error {
	return func(_ context.Context, c *cmd) error {
		v := buildVersion()
		if c.g.json {
			return emit(c.out, v)
		}
		rev := v.Revision
		if rev != "" && v.Modified {
			rev += " (modified)"
		}
		table(c.out, [2]string{"fencectl", v.Version}, [2]string{"module", v.Module}, [2]string{"go", v.GoVersion},
			[2]string{"revision", rev}, [2]string{"built from", v.Time})
		return nil
	}
}
