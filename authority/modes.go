package authority

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// openModes builds the modes in force at start: the configured rules with the
// operator's changes over them. Against the modes in force when the state was
// last saved, every downgrade (gateway.Downgrades) needs cfg.BreakGlass;
// without it the start is refused naming each, and with it each is logged
// and the use counted.
func (a *Authority) openModes(cfg Config, p persisted) error {
	m, err := gateway.NewModes(cfg.Modes...)
	if err != nil {
		return err
	}
	var kept []gateway.ModeRule
	for _, r := range p.OperatorModes {
		for _, c := range cfg.Modes {
			if c.Pattern == r.Pattern && c.Mode != r.Mode {
				a.log.Warn("an operator's mode overrides the configured one", "pattern", r.Pattern, "operator", r.Mode, "config", c.Mode)
			}
		}
		if err := m.Set(r.Pattern, r.Mode, true); err != nil {
			if fencegate.ErrorCode(err) == fencegate.CodeInvalidRequest && gateway.ValidMode(r.Mode) {
				// Saved before such patterns were refused: it never
				// matched a resource, so dropping it changes nothing.
				a.log.Warn("an operator's mode rule matching no resource is dropped", "pattern", r.Pattern, "mode", r.Mode, "err", err)
				continue
			}
			return fmt.Errorf("persisted operator mode: %w", err)
		}
		kept = append(kept, r)
	}
	a.modes, a.opModes = m, kept
	if p.ModesInForce == nil {
		return nil // first start: the config's modes are where rollout starts
	}
	down := gateway.Downgrades(*p.ModesInForce, m.Rules())
	if len(down) == 0 {
		return nil
	}
	if !cfg.BreakGlass {
		errs := []error{errors.New("the configured modes switch resource-side validation off; restore them, or start with --break-glass to allow it")}
		for _, d := range down {
			errs = append(errs, errors.New(d.String()))
		}
		return errors.Join(errs...)
	}
	for _, d := range down {
		a.log.Error("BREAK-GLASS: validation switched off at start", "change", d.String(), "pattern", d.Pattern)
	}
	a.alarm.BreakGlass("start")
	return nil
}

// SetMode sets a pattern's enforcement mode. Moving a pattern that resolves
// to enforce to shadow needs breakGlass (refused with FORBIDDEN otherwise,
// changing nothing); a break-glass change is logged and counted. The rule is
// persisted with the operator's other changes and survives restarts over the
// config's modes.
func (a *Authority) SetMode(_ context.Context, rule gateway.ModeRule, breakGlass bool) (State, error) {
	a.change.Lock()
	defer a.change.Unlock()
	before := a.modes.Rules()
	// The change is made on a copy first: it is persisted before the modes in
	// force move, so a failed save leaves memory and file as they were.
	next, err := gateway.NewModes(before...)
	if err != nil {
		return State{}, err
	}
	if err := next.Set(rule.Pattern, rule.Mode, breakGlass); err != nil {
		return State{}, err
	}
	if slices.Equal(next.Rules(), before) {
		// Nothing changes, so nothing is kept over the config: an operator
		// rule restating the config's shadow would otherwise outlive the
		// config's later move to enforce, with no break-glass asked.
		return a.state(), nil
	}
	p := a.snapshot()
	p.OperatorModes = slices.DeleteFunc(p.OperatorModes, func(r gateway.ModeRule) bool { return r.Pattern == rule.Pattern })
	p.OperatorModes = append(p.OperatorModes, rule)
	inForce := next.Rules()
	p.ModesInForce = &inForce
	if err := a.write(p); err != nil {
		return State{}, fencegate.Wrap(err, fencegate.CodeInternal, "mode change not persisted; nothing changed")
	}
	if err := a.modes.Set(rule.Pattern, rule.Mode, breakGlass); err != nil {
		return State{}, err // not reached: the copy took the same change under a.change
	}
	a.mu.Lock()
	a.opModes = p.OperatorModes
	a.mu.Unlock()
	if down := gateway.Downgrades(before, a.modes.Rules()); len(down) > 0 {
		for _, d := range down {
			a.log.Error("BREAK-GLASS: validation switched off by an operator", "change", d.String(), "pattern", d.Pattern)
		}
		a.alarm.BreakGlass("admin")
	}
	return a.state(), nil
}
