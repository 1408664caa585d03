// Package deploy holds the shipped deployment files; its tests check them:
// the Prometheus alert rules with promtool (check and unit tests, one firing
// and one quiet case for every alert) and the Grafana dashboard's shape.
// e2e/metrics_test.go checks that both name only metrics the binary exports.
package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
	"gopkg.in/yaml.v3"
)

// promtool finds promtool (Debian's prometheus package; scripts/services.sh
// ensure_promtool installs it). Under CI=true its absence fails the test.
func promtool(t *testing.T) string {
	t.Helper()
	return testenv.Tool(t, "promtool", "apt-get install prometheus, or scripts/services.sh ensure_promtool")
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// TestAlertRulesPassPromtoolCheckAndTheirUnitTests runs promtool check rules
// and promtool test rules over deploy/prometheus.
func TestAlertRulesPassPromtoolCheckAndTheirUnitTests(t *testing.T) {
	p := promtool(t)
	run(t, "prometheus", p, "check", "rules", "alerts.yaml")
	run(t, "prometheus", p, "test", "rules", "alerts_test.yaml")
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert  string `yaml:"alert"`
			Record string `yaml:"record"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func decodeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestEveryAlertHasAFiringAndAQuietUnitTest: alerts_test.yaml evaluates each
// alert of alerts.yaml at least once expecting it to fire and once expecting
// silence, so no rule ships untested.
func TestEveryAlertHasAFiringAndAQuietUnitTest(t *testing.T) {
	var rules ruleFile
	decodeYAML(t, filepath.Join("prometheus", "alerts.yaml"), &rules)
	var tests ruleTests
	decodeYAML(t, filepath.Join("prometheus", "alerts_test.yaml"), &tests)
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !firing[r.Alert] || !quiet[r.Alert] {
				t.Errorf("alert %s: firing case %v, quiet case %v; want both in alerts_test.yaml", r.Alert, firing[r.Alert], quiet[r.Alert])
			}
		}
	}
	if n < 8 {
		t.Fatalf("only %d alerts in alerts.yaml", n)
	}
}

// TestDashboardIsGrafanaJSONWithAQueryPerPanel: the dashboard decodes, has a
// uid, and each panel has a unique id and at least one PromQL target.
func TestDashboardIsGrafanaJSONWithAQueryPerPanel(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("grafana", "fencegate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || len(d.Panels) < 10 {
		t.Fatalf("uid %q, %d panels", d.UID, len(d.Panels))
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if len(p.Targets) == 0 || p.Targets[0].Expr == "" {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
}
