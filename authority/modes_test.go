package authority_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/gateway"
)

func rule(p string, m gateway.Mode) gateway.ModeRule { return gateway.ModeRule{Pattern: p, Mode: m} }

func TestStartThatSwitchesValidationOffNeedsBreakGlassAndIsCounted(t *testing.T) {
	e := newEnv(t, true)
	e.cfg.Modes = []gateway.ModeRule{rule("roll/*", gateway.Shadow), rule("pay/*", gateway.Enforce)}
	e.open() // first start: the config's shadow is where rollout starts

	cases := map[string][]gateway.ModeRule{
		"enforce to shadow":    {rule("roll/*", gateway.Shadow), rule("pay/*", gateway.Shadow)},
		"an enforce rule gone": {rule("roll/*", gateway.Shadow)},
		"a new shadow pattern": {rule("roll/*", gateway.Shadow), rule("pay/*", gateway.Enforce), rule("new/*", gateway.Shadow)},
	}
	state := e.read("authority.json")
	for name, modes := range cases {
		e.cfg.Modes = modes
		_, err := authority.Open(e.cfg)
		if err == nil || !strings.Contains(err.Error(), "--break-glass") {
			t.Fatalf("%s: start not refused: %v", name, err)
		}
		if !bytes.Equal(state, e.read("authority.json")) {
			t.Fatalf("%s: a refused start changed the stored state", name)
		}
	}
	if len(e.alarm.uses) != 0 {
		t.Fatalf("refused starts counted as break-glass: %v", e.alarm.uses)
	}
	// Moving forward (shadow to enforce, a new enforce rule) needs nothing.
	e.cfg.Modes = []gateway.ModeRule{rule("roll/*", gateway.Enforce), rule("pay/*", gateway.Enforce), rule("more/*", gateway.Enforce)}
	if a := e.open(); a.Modes().For("roll/x") != gateway.Enforce {
		t.Fatal("upgrade to enforce not applied")
	}
	// Break-glass: allowed, logged, counted, and then the new modes are in force.
	e.cfg.Modes = []gateway.ModeRule{rule("roll/*", gateway.Shadow)}
	e.cfg.BreakGlass = true
	a := e.open()
	if a.Modes().For("roll/x") != gateway.Shadow || len(e.alarm.uses) != 1 || e.alarm.uses[0] != "start" {
		t.Fatalf("break-glass start: modes %v, alarms %v", a.Modes().Rules(), e.alarm.uses)
	}
	for _, want := range []string{"pattern=roll/*", "pattern=pay/*", "pattern=more/*", "goes from enforce to shadow", "is removed"} {
		if !strings.Contains(e.logs.String(), want) {
			t.Fatalf("break-glass log lacks %q:\n%s", want, e.logs.String())
		}
	}
	// The same config again is no downgrade: no break-glass needed.
	e.cfg.BreakGlass = false
	e.open()
	if len(e.alarm.uses) != 1 {
		t.Fatalf("an unchanged start counted: %v", e.alarm.uses)
	}
}

func TestOperatorModesApplyOverTheConfigAcrossRestarts(t *testing.T) {
	e := newEnv(t, true)
	e.cfg.Modes = []gateway.ModeRule{rule("roll/*", gateway.Shadow)}
	a := e.open()
	if _, err := a.SetMode(ctx, rule("roll/*", gateway.Enforce), false); err != nil {
		t.Fatal(err)
	}
	state := e.read("authority.json")
	_, err := a.SetMode(ctx, rule("roll/*", gateway.Shadow), false)
	if fencegate.ErrorCode(err) != fencegate.CodeForbidden || a.Modes().For("roll/x") != gateway.Enforce ||
		!bytes.Equal(state, e.read("authority.json")) {
		t.Fatalf("enforce -> shadow without break-glass: %v, state changed: %v", err, !bytes.Equal(state, e.read("authority.json")))
	}
	// The unchanged config still says shadow; the operator's enforce stays.
	if b := e.open(); b.Modes().For("roll/x") != gateway.Enforce {
		t.Fatal("a restart returned an enforced pattern to shadow")
	}
	if _, err := a.SetMode(ctx, rule("roll/*", gateway.Shadow), true); err != nil || len(e.alarm.uses) != 1 || e.alarm.uses[0] != "admin" {
		t.Fatalf("admin break-glass: %v %v", err, e.alarm.uses)
	}
}

// Rule: setting a pattern to the mode it already has changes nothing and
// keeps nothing over the config: a restated shadow used to be saved as the
// operator's, and once the config moved the pattern to enforce, the
// restart kept it shadow, with no break-glass asked and nothing logged.
func TestRestatingAModeKeepsNothingOverTheConfig(t *testing.T) {
	e := newEnv(t, true)
	e.cfg.Modes = []gateway.ModeRule{rule("roll/*", gateway.Shadow)}
	a := e.open()
	state := e.read("authority.json")
	if _, err := a.SetMode(ctx, rule("roll/*", gateway.Shadow), false); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(state, e.read("authority.json")) {
		t.Fatal("a restated mode was saved")
	}
	e.cfg.Modes = []gateway.ModeRule{rule("roll/*", gateway.Enforce)} // the rollout is done
	if b := e.open(); b.Modes().For("roll/x") != gateway.Enforce {
		t.Fatal("the config's enforce did not take over after a restated shadow")
	}
}

// Rule: an operator mode rule saved before patterns matching no resource
// were refused (it never matched anything) is dropped at start with a
// warning, not a start refused for good.
func TestAnOperatorModeMatchingNoResourceIsDroppedAtStart(t *testing.T) {
	e := newEnv(t, true)
	e.open()
	var p map[string]any
	readJSON(t, e.cfg.Files.State, &p)
	p["operatorModes"] = []map[string]string{{"pattern": "roll/inv/", "mode": "enforce"}, {"pattern": "roll/*", "mode": "enforce"}}
	data, _ := json.Marshal(p)
	if err := os.WriteFile(e.cfg.Files.State, data, 0o600); err != nil {
		t.Fatal(err)
	}
	a := e.open()
	rules := a.Modes().Rules()
	if len(rules) != 1 || rules[0].Pattern != "roll/*" {
		t.Fatalf("modes after the start: %+v; want roll/* alone", rules)
	}
	if !strings.Contains(e.logs.String(), "matching no resource is dropped") {
		t.Fatalf("no warning logged:\n%s", e.logs.String())
	}
}
