package risk

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// opsTOML: a constant rule tier (0.1: approve) and a constant fast tier (0.9: decline)
// with the largest deadline the library allows, so every decision is the fast tier's
// whatever the load, unless a switch or a fault takes it out.
var opsTOML = loadConfig("fast_constant.toml", map[string]string{"FAST_SCORE": "0.9"})

// monitorTOML adds monitors judged only on MonitorTick, on every decision: the rules and
// the model never agree.
var monitorTOML = opsTOML + "[monitor]\nsample_every = 1\nmin_samples = 10\ninterval_ms = 0\n"

func opsEngine(t *testing.T, toml string) *Engine {
	t.Helper()
	e, err := NewFromTOML(toml, "")
	if err != nil {
		t.Fatalf("NewFromTOML: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func opsTxn(id uint64) Txn {
	return Txn{ID: id, Entity: id % 7, Amount: 10 + float64(id), Currency: "USD"}
}

func opsTxnsJSON(ids ...uint64) string {
	rows := make([]map[string]any, len(ids))
	for i, id := range ids {
		rows[i] = map[string]any{"id": id, "entity": id % 7, "amount": 10 + float64(id), "currency": "USD"}
	}
	b, _ := json.Marshal(rows)
	return string(b)
}

func health(t *testing.T, e *Engine) Health {
	t.Helper()
	h, err := e.Health()
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	return h
}

func decideTier(t *testing.T, e *Engine, id uint64) Decision {
	t.Helper()
	d, err := e.Decide(opsTxn(id))
	if err != nil {
		t.Fatalf("Decide %d: %v", id, err)
	}
	return d
}

func TestHealthReady(t *testing.T) {
	e := opsEngine(t, opsTOML)
	h := health(t, e)
	if h.Status != HealthReady || len(h.Reasons) != 0 {
		t.Fatalf("health %+v, want ready without reasons", h)
	}
	if !h.Fast.Present || h.Fast.State != StateClosed || h.Fast.Serving == nil ||
		h.Fast.Serving.Name != "constant" || h.Fast.Serving.Version != "0.9" {
		t.Fatalf("fast tier %+v (serving %+v)", h.Fast, h.Fast.Serving)
	}
	if h.Deep.Present || h.Deep.State != StateAbsent || h.Deep.Serving != nil {
		t.Fatalf("deep tier %+v", h.Deep)
	}
	if len(h.Deploying) != 0 {
		t.Fatalf("deploying %v", h.Deploying)
	}
	text, err := e.HealthJSON()
	if err != nil || !strings.Contains(text, `"status":"ready"`) {
		t.Fatalf("HealthJSON = %q, %v", text, err)
	}
}

func TestForceOpenFast(t *testing.T) {
	e := opsEngine(t, opsTOML)
	if d := decideTier(t, e, 1); d.Tier != TierFast || d.Action != ActionDecline {
		t.Fatalf("before: tier %q action %q", d.Tier, d.Action)
	}
	if err := e.ForceOpen(TargetFast, true); err != nil {
		t.Fatalf("ForceOpen(fast, true): %v", err)
	}
	for id := uint64(2); id < 6; id++ {
		if d := decideTier(t, e, id); d.Tier != TierRules || d.Fallback != FallbackCircuitOpen || d.Action != ActionApprove {
			t.Fatalf("forced open: decision %d tier %q fallback %q action %q", id, d.Tier, d.Fallback, d.Action)
		}
	}
	h := health(t, e)
	if h.Status != HealthDegraded || h.Fast.State != StateForcedOpen {
		t.Fatalf("forced open: health %+v", h)
	}
	if !slices.ContainsFunc(h.Reasons, func(r string) bool { return strings.Contains(r, "force_open") }) {
		t.Fatalf("forced open: reasons %q", h.Reasons)
	}

	if err := e.ForceOpen(TargetFast, false); err != nil {
		t.Fatalf("ForceOpen(fast, false): %v", err)
	}
	if h := health(t, e); h.Status != HealthReady || h.Fast.State != StateClosed || len(h.Reasons) != 0 {
		t.Fatalf("cleared: health %+v", h)
	}
	if d := decideTier(t, e, 6); d.Tier != TierFast || d.Fallback != FallbackNone {
		t.Fatalf("cleared: tier %q fallback %q", d.Tier, d.Fallback)
	}
}

func TestForceOpenUnknownTier(t *testing.T) {
	e := opsEngine(t, opsTOML)
	for _, tier := range []string{"rules", "FAST", "", "fast "} {
		wantCode(t, fmt.Sprintf("ForceOpen(%q)", tier), e.ForceOpen(tier, true), ErrInvalid)
	}
	wantCode(t, "ForceOpen with a NUL", e.ForceOpen("fast\x00", true), ErrInvalid)
	if h := health(t, e); h.Status != HealthReady {
		t.Fatalf("nothing was switched, yet health %+v", h)
	}
}

func TestHealthAfterShutdownAndClose(t *testing.T) {
	e := opsEngine(t, opsTOML)
	if _, _, err := e.Shutdown(0); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if h := health(t, e); h.Status != HealthShutDown {
		t.Fatalf("after Shutdown: %+v", h)
	}
	_ = e.Close()
	_, err := e.Health()
	wantCode(t, "Health after Close", err, ErrHandle)
	wantCode(t, "ForceOpen after Close", e.ForceOpen(TargetFast, true), ErrHandle)
	_, err = e.MonitorTick()
	wantCode(t, "MonitorTick after Close", err, ErrHandle)
	_, err = e.Drill(FaultFastDown, opsTxnsJSON(1), nil)
	wantCode(t, "Drill after Close", err, ErrHandle)
}

func TestMonitorFiresOnDisagreement(t *testing.T) {
	e := opsEngine(t, monitorTOML)
	r, err := e.MonitorReport()
	if err != nil {
		t.Fatalf("MonitorReport: %v", err)
	}
	if r.Windows != 0 || len(r.Firing) != 0 || r.Agreement != nil {
		t.Fatalf("fresh report %+v", r)
	}
	for id := uint64(1); id <= 50; id++ {
		if d := decideTier(t, e, id); d.Tier != TierFast {
			t.Fatalf("decision %d: tier %q", id, d.Tier)
		}
	}
	raised, err := e.MonitorTick()
	if err != nil || raised < 1 {
		t.Fatalf("MonitorTick = %d, %v; want >= 1", raised, err)
	}
	r, err = e.MonitorReport()
	if err != nil {
		t.Fatalf("MonitorReport: %v", err)
	}
	if !slices.Contains(r.Firing, "agreement:agreement") {
		t.Fatalf("firing %q, want agreement:agreement", r.Firing)
	}
	if r.Agreement == nil || r.Agreement.Share >= 0.95 || r.Agreement.Samples < 10 {
		t.Fatalf("agreement %+v", r.Agreement)
	}
	i := slices.IndexFunc(r.Recent, func(a Alert) bool { return a.Subject == "agreement" })
	if i < 0 || r.Recent[i].Kind != "agreement" || !r.Recent[i].Firing || r.Recent[i].Threshold != 0.95 {
		t.Fatalf("recent %+v", r.Recent)
	}
	if r.Windows < 1 {
		t.Fatalf("windows %d", r.Windows)
	}
	// Edge-triggered: judging again raises nothing new while it stays bad.
	if raised, err := e.MonitorTick(); err != nil || raised != 0 {
		t.Fatalf("second MonitorTick = %d, %v; want 0", raised, err)
	}
	text, err := e.MonitorReportJSON()
	if err != nil || !strings.Contains(text, `"agreement:agreement"`) {
		t.Fatalf("MonitorReportJSON = %q, %v", text, err)
	}
}

func TestMonitorReportWithoutMonitor(t *testing.T) {
	e := opsEngine(t, opsTOML)
	_, err := e.MonitorReport()
	wantCode(t, "MonitorReport without [monitor]", err, ErrInvalid)
	_, err = e.MonitorReportJSON()
	wantCode(t, "MonitorReportJSON without [monitor]", err, ErrInvalid)
	if raised, err := e.MonitorTick(); err != nil || raised != 0 {
		t.Fatalf("MonitorTick without [monitor] = %d, %v", raised, err)
	}
}

func TestDrillFastDown(t *testing.T) {
	e := opsEngine(t, opsTOML)
	r, err := e.Drill(FaultFastDown, opsTxnsJSON(1, 2), []bool{false, true})
	if err != nil {
		t.Fatalf("Drill: %v", err)
	}
	if r.Fault != (DrillFault{Kind: FaultFastDown}) || r.Decisions != 2 || r.Errors != 0 {
		t.Fatalf("report %+v", r)
	}
	if r.ByTier["rules"] != 2 || r.ByTier["fast"] != 0 || len(r.ByTier) != 3 {
		t.Fatalf("by tier %v", r.ByTier)
	}
	if len(r.Fallbacks) != 1 || r.Fallbacks["error"] != 2 {
		t.Fatalf("fallbacks %v", r.Fallbacks)
	}
	if r.SwitchTime.MaxUs < r.SwitchTime.P50Us || r.SwitchTime.P50Us < 0 {
		t.Fatalf("switch time %+v", r.SwitchTime)
	}
	// Labelled: the model (decline both) against the rules (approve both).
	if r.ModelQuality == nil || r.DrillQuality == nil || r.ModelQuality.Recall != 1 || r.DrillQuality.Recall != 0 {
		t.Fatalf("quality %+v / %+v", r.ModelQuality, r.DrillQuality)
	}
	if r.DeepVerdicts != [2]uint64{0, 0} || r.CircuitAfter == "" {
		t.Fatalf("deep verdicts %v, circuit after %q", r.DeepVerdicts, r.CircuitAfter)
	}
	last, err := e.LastDrillReport()
	if err != nil {
		t.Fatalf("LastDrillReport: %v", err)
	}
	if last.Decisions != 2 || last.Fallbacks["error"] != 2 || last.DurationMs != r.DurationMs {
		t.Fatalf("last report %+v, drill returned %+v", last, r)
	}
}

func TestDrillOtherFaults(t *testing.T) {
	e := opsEngine(t, opsTOML)
	r, err := e.Drill(FaultFastNaN, opsTxnsJSON(1, 2, 3), nil)
	if err != nil {
		t.Fatalf("Drill(fast_nan): %v", err)
	}
	if r.Fault.Kind != FaultFastNaN || r.ByTier["rules"] != 3 || r.Fallbacks["invalid_score"] != 3 || len(r.Fallbacks) != 1 {
		t.Fatalf("fast_nan report %+v", r)
	}
	if r.ModelQuality != nil || r.DrillQuality != nil {
		t.Fatalf("no labels, yet quality %+v / %+v", r.ModelQuality, r.DrillQuality)
	}
	r, err = e.Drill(FaultFastSlow(1), opsTxnsJSON(4), nil)
	if err != nil {
		t.Fatalf("Drill(fast_slow:1): %v", err)
	}
	if r.Fault != (DrillFault{Kind: "fast_slow", DelayMs: 1}) || r.ByTier["fast"] != 1 || len(r.Fallbacks) != 0 {
		t.Fatalf("fast_slow:1 (within the 60 s deadline) report %+v", r)
	}
}

func TestDrillBadArguments(t *testing.T) {
	e := opsEngine(t, opsTOML)
	_, err := e.LastDrillReport()
	wantCode(t, "LastDrillReport before any drill", err, ErrEmpty)
	for _, fault := range []string{"fast_up", "fast_slow", "fast_slow:abc", ""} {
		_, err := e.Drill(fault, opsTxnsJSON(1), nil)
		wantCode(t, fmt.Sprintf("Drill(%q)", fault), err, ErrInvalid)
	}
	_, err = e.Drill(FaultFastDown, opsTxnsJSON(1, 2), []bool{true})
	if re := wantCode(t, "Drill with 1 label for 2 transactions", err, ErrInvalid); !strings.Contains(re.Message, "labels") {
		t.Fatalf("message %q", re.Message)
	}
	_, err = e.Drill(FaultFastDown, `[{"id": 1, "currency": "USD"}]`, nil) // no amount
	var re *Error
	if !errors.As(err, &re) || (re.Code != codeJSON && re.Code != codeTransaction) || !strings.Contains(re.Message, "txns_json[0]") {
		t.Fatalf("Drill of a transaction without amount: %v", err)
	}
	_, err = e.Drill(FaultFastDown, "[{", nil)
	wantCode(t, "Drill of malformed JSON", err, ErrJSON)
	_, err = e.Drill(FaultFastDown, "[]\x00", nil)
	wantCode(t, "Drill with a NUL", err, ErrInvalid)
	// None of these ran a drill.
	_, err = e.LastDrillReport()
	wantCode(t, "LastDrillReport after refused drills", err, ErrEmpty)
}
