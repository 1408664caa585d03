package kit

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

// composeSchema compiles the vendored compose specification schema
// (testdata/compose-spec.json; see testdata/README.md for its source).
func composeSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(readFile(t, filepath.Join("testdata", "compose-spec.json"))))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("compose_spec.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("compose_spec.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// composeDoc is a compose file as JSON (anchors and merge keys resolved, as
// docker compose reads them).
func composeDoc(t *testing.T, src []byte) any {
	t.Helper()
	j, err := yaml.YAMLToJSON(src)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestComposeFileValidatesAgainstTheComposeSpecSchema validates
// deploy/compose/compose.yaml against the compose specification's schema; a
// misspelt service key must fail the same validation.
func TestComposeFileValidatesAgainstTheComposeSpecSchema(t *testing.T) {
	s := composeSchema(t)
	src := readFile(t, filepath.Join(deploy, "compose", "compose.yaml"))
	if err := s.Validate(composeDoc(t, src)); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	bad := bytes.Replace(src, []byte("    depends_on:\n      postgres:"), []byte("    depend_on:\n      postgres:"), 1)
	if bytes.Equal(bad, src) {
		t.Fatal("mutation did not apply")
	}
	if err := s.Validate(composeDoc(t, bad)); err == nil {
		t.Fatal("a misspelt key validated")
	}
}

type composeFile struct {
	Services map[string]struct {
		Image   string   `json:"image"`
		Command []string `json:"command"`
		Volumes []any    `json:"volumes"`
		Deploy  struct {
			Replicas int `json:"replicas"`
		} `json:"deploy"`
		Healthcheck struct {
			Test []string `json:"test"`
		} `json:"healthcheck"`
	} `json:"services"`
}

// TestComposeFileMountsTheConfigsTheE2ETestRuns: the registry and the two
// gateway replicas run the config files beside compose.yaml, the very files
// e2e/deploykit_test.go starts; each keeps its data directory (its operator
// state, authority.json) on a named volume of its own, never a tmpfs or a
// volume another process writes; Redis fsyncs every write; the health check
// is the binary's own.
func TestComposeFileMountsTheConfigsTheE2ETestRuns(t *testing.T) {
	j, err := yaml.YAMLToJSON(readFile(t, filepath.Join(deploy, "compose", "compose.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := json.Unmarshal(j, &cf); err != nil {
		t.Fatal(err)
	}
	e2e := string(readFile(t, filepath.Join(repo, "e2e", "deploykit_test.go")))
	dataVolumes := map[string]string{} // named volume -> the service whose data directory it is
	for svc, run := range map[string]struct{ cmd, file string }{"registry": {"registry", "registry.yaml"},
		"gateway-1": {"serve", "gateway.yaml"}, "gateway-2": {"serve", "gateway.yaml"}} {
		s, ok := cf.Services[svc]
		if !ok {
			t.Fatalf("no service %s", svc)
		}
		cmd, file := run.cmd, run.file
		var data string
		for _, v := range s.Volumes {
			if m, ok := v.(string); ok && strings.HasSuffix(m, ":/var/lib/fencegate") && !strings.HasPrefix(m, ".") {
				data = strings.TrimSuffix(m, ":/var/lib/fencegate")
			}
		}
		if data == "" || dataVolumes[data] != "" {
			t.Errorf("%s: its data directory is not on a named volume of its own (%v; taken by %q)", svc, s.Volumes, dataVolumes[data])
		}
		dataVolumes[data] = svc
		if !slices.Equal(s.Command, []string{cmd, "--config", "/etc/fencegate/" + file}) {
			t.Errorf("%s command %q", svc, s.Command)
		}
		if !slices.Contains(s.Volumes, any("./"+file+":/etc/fencegate/"+file+":ro")) {
			t.Errorf("%s does not mount ./%s: %v", svc, file, s.Volumes)
		}
		if _, err := os.Stat(filepath.Join(deploy, "compose", file)); err != nil {
			t.Error(err)
		}
		if !strings.Contains(e2e, `"`+cmd+`", "--config", filepath.Join(kit, "`+file+`")`) {
			t.Errorf("e2e/deploykit_test.go does not start %s --config deploy/compose/%s", cmd, file)
		}
		if hc := s.Healthcheck.Test; len(hc) < 3 || hc[1] != "/usr/local/bin/gateway" || hc[2] != "healthcheck" {
			t.Errorf("%s healthcheck %q", svc, hc)
		}
	}
	if !slices.Equal(cf.Services["redis"].Command[1:5], []string{"--appendonly", "yes", "--appendfsync", "always"}) {
		t.Errorf("redis command %q: the registry needs appendfsync always", cf.Services["redis"].Command)
	}
}
