package risk

/*
#include "gorisk.h"

static gorisk_res gorisk_health(void *e, char *buf, size_t cap) {
	size_t len = 0;
	gorisk_res r = gorisk_done(risk_engine_health_json((const risk_engine *)e, buf, cap, &len));
	r.n = len;
	return r;
}

static gorisk_res gorisk_force_open(void *e, const char *tier, bool open) {
	return gorisk_done(risk_engine_force_open((const risk_engine *)e, tier, open));
}

static gorisk_res gorisk_monitor_json(void *e, char *buf, size_t cap) {
	size_t len = 0;
	gorisk_res r = gorisk_done(risk_engine_monitor_json((const risk_engine *)e, buf, cap, &len));
	r.n = len;
	return r;
}

static gorisk_res gorisk_monitor_tick(void *e) {
	uint32_t raised = 0;
	gorisk_res r = gorisk_done(risk_engine_monitor_tick((const risk_engine *)e, &raised));
	r.a = raised;
	return r;
}

static gorisk_res gorisk_drill(void *e, const char *fault, const char *txns, const char *labels) {
	return gorisk_done(risk_engine_drill((const risk_engine *)e, fault, txns, labels));
}

static gorisk_res gorisk_drill_report(void *e, char *buf, size_t cap) {
	size_t len = 0;
	gorisk_res r = gorisk_done(risk_engine_drill_report_json((const risk_engine *)e, buf, cap, &len));
	r.n = len;
	return r;
}
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"unsafe"
)

// Operations of a live engine: Health (ready, degraded with reasons, or shut down, and
// each model tier's breaker and kill-switch state), ForceOpen (the per-tier kill switch),
// the monitors of an engine with a [monitor] table (MonitorReport, MonitorTick) and
// fallback drills (Drill: inject a fault, replay transactions, report how the rules took
// over).

// Health.Status values.
const (
	HealthReady    = "ready"
	HealthDegraded = "degraded"
	HealthShutDown = "shut_down"
)

// TierHealth.State values.
const (
	StateClosed     = "closed"
	StateOpen       = "open"
	StateHalfOpen   = "half_open"
	StateForcedOpen = "forced_open"
	StateAbsent     = "absent"
)

// Faults for Drill (and DrillFault.Kind); FaultFastSlow(ms) builds the slow one.
const (
	FaultFastDown = "fast_down"
	FaultFastNaN  = "fast_nan"
	FaultDeepDown = "deep_down"
)

// FaultFastSlow is the fault that adds ms milliseconds to every fast-tier call (past the
// fast tier's deadline, the calls time out).
func FaultFastSlow(ms uint64) string { return fmt.Sprintf("fast_slow:%d", ms) }

// First buffers: a health answer is small; a monitor report holds up to 32 recent alerts
// and a drift row per feature.
const (
	healthCap  = 1024
	monitorCap = 4096
	drillCap   = 1024
)

// Health is the engine's health (risk_engine_health_json).
type Health struct {
	// Status is HealthReady, HealthDegraded or HealthShutDown.
	Status string `json:"status"`
	// Reasons say why it is degraded (empty when ready).
	Reasons []string `json:"reasons"`
	// Fast and Deep are the model tiers.
	Fast TierHealth `json:"fast"`
	Deep TierHealth `json:"deep"`
	// Deploying lists the targets with a deploy in progress (TargetFast, ...).
	Deploying []string `json:"deploying"`
	// Pseudonymised is whether identifiers the engine writes or sends are keyed
	// pseudonyms ([privacy] key set; see SECURITY.md).
	Pseudonymised bool `json:"pseudonymised"`
}

// TierHealth is one model tier's state.
type TierHealth struct {
	// Present is whether the tier is configured.
	Present bool `json:"present"`
	// State is one of the State* constants.
	State string `json:"state"`
	// Serving is the version serving, nil when none.
	Serving *ModelVersion `json:"serving"`
}

// MonitorReport is the monitors' latest values (risk_engine_monitor_json).
type MonitorReport struct {
	// Windows judged so far.
	Windows uint64 `json:"windows"`
	// Agreement of the model's and the rules' actions in the last judged window; nil
	// before one.
	Agreement *Agreement `json:"agreement"`
	// Drift per feature and of the score ("score") in the last judged window.
	Drift []Drift `json:"drift"`
	// DeepFallbackShare is the share of deep verdicts that were fallbacks in the last
	// window; nil without deep verdicts.
	DeepFallbackShare *float64 `json:"deep_fallback_share"`
	// Firing lists the alerts firing now as "kind:subject", e.g. "agreement:agreement"
	// (note: Kind as in the Rust enum, not the snake_case of Alert.Kind).
	Firing []string `json:"firing"`
	// Baseline is whether a drift baseline is in force.
	Baseline bool `json:"baseline"`
	// Recent holds the latest alerts (firing and resolved), oldest first, at most 32.
	Recent []Alert `json:"recent"`
}

// Agreement is a share of decisions on which the model and the rules agreed, of Samples.
type Agreement struct {
	Share   float64
	Samples uint64
}

// UnmarshalJSON reads the library's [share, samples] pair.
func (a *Agreement) UnmarshalJSON(b []byte) error {
	var pair [2]json.Number
	if err := json.Unmarshal(b, &pair); err != nil {
		return fmt.Errorf("agreement: %w", err)
	}
	share, err := pair[0].Float64()
	if err != nil {
		return fmt.Errorf("agreement share: %w", err)
	}
	var n uint64
	if _, err := fmt.Sscan(pair[1].String(), &n); err != nil {
		return fmt.Errorf("agreement samples: %w", err)
	}
	*a = Agreement{Share: share, Samples: n}
	return nil
}

// Drift is one feature's (or the score's) drift from the baseline.
type Drift struct {
	// Subject is the feature name or "score".
	Subject string `json:"subject"`
	// KS is the Kolmogorov-Smirnov statistic, PSI the population stability index.
	KS  float64 `json:"ks"`
	PSI float64 `json:"psi"`
	// N is the values in the window.
	N uint64 `json:"n"`
}

// Alert is one monitor alert: a monitor went bad (Firing) or recovered.
type Alert struct {
	// Kind is "agreement", "feature_drift", "score_drift" or "deep_health".
	Kind string `json:"kind"`
	// Subject is the feature name, "score", "agreement" or "deep".
	Subject string `json:"subject"`
	// Value is the measured value, Threshold the one it crossed.
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	Firing    bool    `json:"firing"`
	// AtMs is when, Unix ms (engine clock).
	AtMs int64 `json:"at_ms"`
	// Detail holds details (PSI, sample size).
	Detail string `json:"detail"`
}

// DrillReport is a fallback drill's report (risk_engine_drill_report_json).
type DrillReport struct {
	// Fault is the fault injected.
	Fault DrillFault `json:"fault"`
	// Decisions made under it, and Errors: decisions that failed (bad input; should be 0).
	Decisions uint64 `json:"decisions"`
	Errors    uint64 `json:"errors"`
	// ByTier counts decisions by deciding tier ("rules", "fast", "static").
	ByTier Counts `json:"by_tier"`
	// Fallbacks counts fallback causes ("timeout", "error", ...); zero counts are absent.
	Fallbacks Counts `json:"fallbacks"`
	// SwitchTime is the time from a decision's start to the rules' answer.
	SwitchTime SwitchTime `json:"switch_time"`
	// CircuitAfter is the fast tier's breaker after the drill (a StateClosed, ...).
	CircuitAfter string `json:"circuit_after"`
	// ModelQuality is the decisions on the same rows before the fault, DrillQuality under
	// it; both nil without labels.
	ModelQuality *Quality `json:"model_quality"`
	DrillQuality *Quality `json:"drill_quality"`
	// DeepVerdicts are the deep verdicts delivered during the drill and, of them, the
	// fallbacks.
	DeepVerdicts [2]uint64 `json:"deep_verdicts"`
	// DurationMs is the drill's wall time.
	DurationMs float64 `json:"duration_ms"`
}

// DrillFault is a drill's fault: Kind is FaultFastDown, FaultFastNaN, FaultDeepDown or
// "fast_slow" (with DelayMs).
type DrillFault struct {
	Kind    string `json:"kind"`
	DelayMs uint64 `json:"delay_ms,omitempty"`
}

// SwitchTime holds percentiles of the time to the rules' answer, microseconds.
type SwitchTime struct {
	P50Us float64 `json:"p50_us"`
	P99Us float64 `json:"p99_us"`
	MaxUs float64 `json:"max_us"`
}

// Quality is the quality of decisions against labels.
type Quality struct {
	// Recall is the share of fraud declined or sent to review; Precision the share of
	// declined or reviewed that was fraud; AUPRC the area under the precision-recall curve
	// of the deciding score.
	Recall    float64 `json:"recall"`
	Precision float64 `json:"precision"`
	AUPRC     float64 `json:"auprc"`
}

// Counts are counts by name.
type Counts map[string]uint64

// UnmarshalJSON reads the library's [[name, count], ...] pairs.
func (c *Counts) UnmarshalJSON(b []byte) error {
	var pairs [][2]json.RawMessage
	if err := json.Unmarshal(b, &pairs); err != nil {
		return fmt.Errorf("counts: %w", err)
	}
	m := make(Counts, len(pairs))
	for _, p := range pairs {
		var name string
		var n uint64
		if err := json.Unmarshal(p[0], &name); err != nil {
			return fmt.Errorf("counts name: %w", err)
		}
		if err := json.Unmarshal(p[1], &n); err != nil {
			return fmt.Errorf("counts %q: %w", name, err)
		}
		m[name] = n
	}
	*c = m
	return nil
}

func decodeInto[T any](text, what string) (T, error) {
	var v T
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return v, fmt.Errorf("risk: decoding %s JSON: %w", what, err)
	}
	return v, nil
}

// Health returns the engine's health (risk_engine_health_json).
func (e *Engine) Health() (Health, error) {
	text, err := e.HealthJSON()
	if err != nil {
		return Health{}, err
	}
	return decodeInto[Health](text, "health")
}

// HealthJSON returns the engine's health as the library's JSON text.
func (e *Engine) HealthJSON() (string, error) {
	return e.textOf(healthCap, "health", func(h unsafe.Pointer, buf *C.char, n C.size_t) C.gorisk_res {
		return C.gorisk_health(h, buf, n)
	})
}

// ForceOpen sets (open true) or clears the kill switch of tier, TargetFast ("fast") or
// TargetDeep ("deep") (risk_engine_force_open): while set, the fast tier is not called and
// the rules decide (FallbackCircuitOpen), or the deep tier is not called and gray-zone
// verdicts come from its fallback. Effective on the next decision; Health reports the tier
// StateForcedOpen. ErrInvalid for another tier name.
func (e *Engine) ForceOpen(tier string, open bool) error {
	var cs cStrings
	defer cs.free()
	ct, err := cs.add("tier", tier, false)
	if err != nil {
		return err
	}
	_, err = e.call(func(h unsafe.Pointer) C.gorisk_res { return C.gorisk_force_open(h, ct, C.bool(open)) })
	return err
}

// MonitorReport returns the monitors' latest values (risk_engine_monitor_json). ErrInvalid
// when the engine has no [monitor] table.
func (e *Engine) MonitorReport() (MonitorReport, error) {
	text, err := e.MonitorReportJSON()
	if err != nil {
		return MonitorReport{}, err
	}
	return decodeInto[MonitorReport](text, "monitor report")
}

// MonitorReportJSON returns the monitor report as the library's JSON text.
func (e *Engine) MonitorReportJSON() (string, error) {
	return e.textOf(monitorCap, "the monitor report", func(h unsafe.Pointer, buf *C.char, n C.size_t) C.gorisk_res {
		return C.gorisk_monitor_json(h, buf, n)
	})
}

// MonitorTick judges every monitor now and returns how many alerts that raised
// (risk_engine_monitor_tick; the engine's monitor thread does so every [monitor]
// interval_ms, 0: only on these calls). Alerts are edge-triggered (one when a monitor goes
// bad, one when it recovers) and appear in MonitorReport's Recent. An engine without
// [monitor] raises none.
func (e *Engine) MonitorTick() (uint32, error) {
	r, err := e.call(func(h unsafe.Pointer) C.gorisk_res { return C.gorisk_monitor_tick(h) })
	if err != nil {
		return 0, err
	}
	return uint32(r.a), nil
}

// Drill runs a fallback drill (risk_engine_drill) and returns its report. fault is
// FaultFastDown, FaultFastNaN, FaultDeepDown or FaultFastSlow(ms); txnsJSON a JSON array
// of transactions (the objects DecideJSON takes) replayed under it; labels nil, or one
// bool (fraud) per transaction for the quality comparison. Live traffic on the engine is
// affected while the drill runs.
//
// Errors: ErrInvalid for an unknown fault, a label count that does not match, or a
// string holding a NUL byte; ErrJSON or ErrTransaction for a transaction the library
// refuses (the message names its index).
func (e *Engine) Drill(fault, txnsJSON string, labels []bool) (DrillReport, error) {
	text, err := e.DrillJSON(fault, txnsJSON, labels)
	if err != nil {
		return DrillReport{}, err
	}
	return decodeInto[DrillReport](text, "drill report")
}

// DrillJSON is Drill with the report as the library's JSON text (every field, including
// any newer than DrillReport).
func (e *Engine) DrillJSON(fault, txnsJSON string, labels []bool) (string, error) {
	var cs cStrings
	defer cs.free()
	cf, err := cs.add("fault", fault, false)
	if err != nil {
		return "", err
	}
	ct, err := cs.add("txnsJSON", txnsJSON, false)
	if err != nil {
		return "", err
	}
	var cl *C.char
	if labels != nil {
		lj, _ := json.Marshal(labels) // []bool always marshals
		if cl, err = cs.add("labels", string(lj), false); err != nil {
			return "", err
		}
	}
	var text []byte
	err = e.with(func(h unsafe.Pointer) error {
		if err := check(C.gorisk_drill(h, cf, ct, cl)); err != nil {
			return err
		}
		// Read back under the same lock (a drill on another goroutine may still replace it).
		var err error
		text, err = readText(drillCap, "the drill report", func(buf []byte) C.gorisk_res {
			return C.gorisk_drill_report(h, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
		})
		return err
	})
	if err != nil {
		return "", err
	}
	return string(text), nil
}

// LastDrillReport returns the last drill's report (risk_engine_drill_report_json).
// ErrEmpty before any drill on this engine.
func (e *Engine) LastDrillReport() (DrillReport, error) {
	text, err := e.textOf(drillCap, "the drill report", func(h unsafe.Pointer, buf *C.char, n C.size_t) C.gorisk_res {
		return C.gorisk_drill_report(h, buf, n)
	})
	if err != nil {
		return DrillReport{}, err
	}
	return decodeInto[DrillReport](text, "drill report")
}
