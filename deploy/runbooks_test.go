package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const runbookBase = "https://github.com/fencegate/fencegate/blob/main/docs/runbooks/"

// TestAlertRunbookLinksNameRunbooksThatNameTheAlert: every runbook_url of
// deploy/prometheus/alerts.yaml is a file in docs/runbooks that names the
// alert, and every alert a runbook names exists in alerts.yaml.
func TestAlertRunbookLinksNameRunbooksThatNameTheAlert(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	decodeYAML(t, filepath.Join("prometheus", "alerts.yaml"), &rules)
	alerts := map[string]bool{}
	linked := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			u, ok := r.Annotations["runbook_url"]
			if !ok {
				continue
			}
			linked++
			name, found := strings.CutPrefix(u, runbookBase)
			if !found {
				t.Errorf("%s: runbook_url %s is not under %s", r.Alert, u, runbookBase)
				continue
			}
			b, err := os.ReadFile(filepath.Join("..", "docs", "runbooks", name))
			if err != nil {
				t.Errorf("%s: %v", r.Alert, err)
			} else if !strings.Contains(string(b), "`"+r.Alert+"`") {
				t.Errorf("%s: docs/runbooks/%s does not name it", r.Alert, name)
			}
		}
	}
	if linked == 0 {
		t.Fatal("no alert links a runbook")
	}
	files, _ := filepath.Glob(filepath.Join("..", "docs", "runbooks", "*.md"))
	named := regexp.MustCompile("`(Fencegate[A-Za-z0-9]+)`")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, m := range named.FindAllStringSubmatch(string(b), -1) {
			if !alerts[m[1]] {
				t.Errorf("%s names %s, which alerts.yaml does not define", f, m[1])
			}
		}
	}
}
