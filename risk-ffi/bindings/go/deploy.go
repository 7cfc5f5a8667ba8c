package risk

/*
#include "gorisk.h"

static gorisk_res gorisk_deploy(void *e, const char *target, const char *cand, const char *plan,
                                const char *base_dir) {
	uint64_t id = 0;
	gorisk_res r = gorisk_done(risk_engine_deploy((const risk_engine *)e, target, cand, plan, base_dir, &id));
	r.a = id;
	return r;
}

static gorisk_res gorisk_deploy_status(void *e, const char *target, char *buf, size_t cap) {
	size_t len = 0;
	gorisk_res r = gorisk_done(risk_engine_deploy_status_json((const risk_engine *)e, target, buf, cap, &len));
	r.n = len;
	return r;
}

static gorisk_res gorisk_promote(void *e, const char *target) {
	return gorisk_done(risk_engine_promote((const risk_engine *)e, target));
}

static gorisk_res gorisk_rollback(void *e, const char *target, const char *reason) {
	return gorisk_done(risk_engine_rollback((const risk_engine *)e, target, reason));
}

static gorisk_res gorisk_deploy_tick(void *e) {
	return gorisk_done(risk_engine_deploy_tick((const risk_engine *)e));
}
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"unsafe"
)

// Model lifecycle. Engine.Deploy puts a candidate version into one part of a live engine
// (a target): it loads and warms the candidate, runs the validation gate on a sample of
// recent live transactions (every 16th decision is kept; by default the gate needs 32),
// then shadows it, canaries it on a sticky share of entities, or promotes it, as its
// rollout plan says. The engine's supervisor advances the stages and rolls a deploy back
// when a guard breaks; Promote and Rollback end one by hand. A refused candidate never
// serves (ErrDeploy, the message says why).
//
// A candidate is TOML: a [scorer] table as in risk.toml's [fast.scorer] (with an optional
// [calibration]: method = "platt", a, b), a [policy] table (approve_below, decline_at), or
// stored = "<16 hex key>" (a version in the model directory):
//
//	id, err := e.Deploy(risk.TargetFast, "[scorer]\nkind = \"constant\"\nprobability = 0.06\n",
//		"by = \"ci#42\"\n[[canary]]\nshare = 0.1\n", "")
//
// A plan is TOML too: by, [gate] (sample, min_sample, max_mean_abs_diff,
// min_action_agreement, max_p99_ms, min_auprc), [shadow] (sample, min_scored,
// min_duration_ms, budget_ms, queue), [[canary]] (share, min_decisions, min_duration_ms) and
// [guards]. A plan without [shadow] or [[canary]] promotes as soon as the gate passes.

// Deploy targets: the parts of an engine a deploy can replace.
const (
	TargetRules  = "rules"
	TargetFast   = "fast"
	TargetDeep   = "deep"
	TargetPolicy = "policy"
)

// ActiveDeploy.Phase values.
const (
	DeployPhaseShadow = "shadow"
	DeployPhaseCanary = "canary"
)

// DeployEvent.Kind values.
const (
	DeployEventStarted    = "started"
	DeployEventRefused    = "refused"
	DeployEventStage      = "stage"
	DeployEventPromoted   = "promoted"
	DeployEventRolledBack = "rolled_back"
)

// deployStatusCap is the first buffer for a deploy status's JSON (it holds up to 64
// history events).
const deployStatusCap = 4096

// DeployStatus is a target's state (risk_engine_deploy_status_json): what serves, what is
// deploying, what happened.
type DeployStatus struct {
	// Target is "rules", "fast", "deep" or "policy".
	Target string `json:"target"`
	// Epoch is the engine's routing epoch (it grows with every change of what serves).
	Epoch uint64 `json:"epoch"`
	// Serving is the version serving now; nil when the target has no tier (no deep tier).
	Serving *ModelVersion `json:"serving"`
	// Previous are the versions a Rollback returns to, most recent first.
	Previous []ModelVersion `json:"previous"`
	// Active is the deploy in progress, nil when none.
	Active *ActiveDeploy `json:"active"`
	// History holds the latest events, oldest first (at most 64).
	History []DeployEvent `json:"history"`
}

// ModelVersion is a version as deploy statuses show it.
type ModelVersion struct {
	// ID is "name@version#hash".
	ID string `json:"id"`
	// Name is the scorer's name ("constant", "xgboost", "policy", a rule file...).
	Name string `json:"name"`
	// Version is its human version (a rule set's version line, a constant's probability).
	Version string `json:"version"`
	// Hash is the content hash, 16 hex digits (the model directory's key).
	Hash string `json:"hash"`
}

// ActiveDeploy is a deploy in progress.
type ActiveDeploy struct {
	ID        uint64       `json:"id"`
	Candidate ModelVersion `json:"candidate"`
	// Phase is DeployPhaseShadow or DeployPhaseCanary.
	Phase string `json:"phase"`
	// Stage is the canary stage index (0 in shadow).
	Stage int `json:"stage"`
	// Share is the share of entities the candidate decides for (0 in shadow).
	Share float64 `json:"share"`
	// StartedMs is when the deploy started, Unix ms (engine clock).
	StartedMs int64 `json:"started_ms"`
	// Gate is what the validation gate measured.
	Gate GateReport `json:"gate"`
	// CandidateStats and ServingStats count the candidate's decisions (shadow: its
	// would-be outcomes) and the serving version's over the same window.
	CandidateStats DeployStats `json:"candidate_stats"`
	ServingStats   DeployStats `json:"serving_stats"`
	// ShadowShed counts shadow copies shed because the shadow queue was full.
	ShadowShed uint64 `json:"shadow_shed"`
}

// GateReport is what the validation gate measured on its sample.
type GateReport struct {
	// Sample is the transactions scored (recent live ones plus supplied ones); Supplied
	// of which supplied; Invalid the candidate's errors, NaN or out-of-range scores.
	Sample   int `json:"sample"`
	Supplied int `json:"supplied"`
	Invalid  int `json:"invalid"`
	// MeanAbsDiff is the mean |candidate - serving| score; ActionAgreement the share of
	// the sample with the same action from both.
	MeanAbsDiff     float64 `json:"mean_abs_diff"`
	ActionAgreement float64 `json:"action_agreement"`
	// Candidate latency on the timed pass, and the ceiling p99 was held to, microseconds.
	P50Us       float64 `json:"p50_us"`
	P99Us       float64 `json:"p99_us"`
	BudgetUs    float64 `json:"budget_us"`
	FirstCallUs float64 `json:"first_call_us"`
	// AUPRC on labelled supplied rows; nil when there were none.
	AUPRC *float64 `json:"auprc"`
}

// DeployStats counts one version's decisions during a deploy.
type DeployStats struct {
	// N decisions (or shadow scores), Failed of which failed.
	N      uint64 `json:"n"`
	Failed uint64 `json:"failed"`
	// Actions by action: approve, review, decline.
	Actions []uint64 `json:"actions"`
	// Scores is the score histogram (10 bins over [0, 1]).
	Scores []uint64 `json:"scores"`
	// Agree counts decisions whose model action agreed with the rules', of Compared.
	Agree    uint64 `json:"agree"`
	Compared uint64 `json:"compared"`
	// P99Ns is the latency p99, nanoseconds.
	P99Ns uint64 `json:"p99_ns"`
}

// DeployEvent is one entry of a target's history.
type DeployEvent struct {
	Target string `json:"target"`
	// Deploy is the deploy id (0 for a Rollback of a serving version outside a deploy).
	Deploy uint64 `json:"deploy"`
	// Epoch is the routing epoch after the change.
	Epoch uint64 `json:"epoch"`
	// AtMs is when, Unix ms (engine clock).
	AtMs int64 `json:"at_ms"`
	// Kind is one of the DeployEvent* constants.
	Kind string `json:"kind"`
	// Version is the version concerned (the candidate; for a rollback, the one restored).
	Version ModelVersion `json:"version"`
	// Share is the share of entities after the change (canary stages).
	Share float64 `json:"share"`
	// Detail says why: the broken guard, the gate's finding, the Rollback reason.
	Detail string `json:"detail"`
	// CandidateDecisions is what the candidate decided (or shadow-scored) before.
	CandidateDecisions uint64 `json:"candidate_decisions"`
	// Automatic is true when the supervisor (a guard) caused it rather than a call.
	Automatic bool `json:"automatic"`
}

// Deploy deploys candidateTOML to target (TargetRules, TargetFast, TargetDeep or
// TargetPolicy) under the rollout plan planTOML and returns the deploy id
// (risk_engine_deploy). planTOML "" is the standard plan (shadow, then canary 1% → 10% →
// 50% → 100%, a minute each). Relative paths in the candidate resolve against baseDir (""
// = the current directory).
//
// The gate runs on the calling goroutine; Deploy returns once the candidate shadows, is
// in canary or serves (see DeployStatus).
//
// Errors: ErrDeploy when refused (the gate, a candidate that does not load, a deploy of
// target in progress); ErrInvalid for an unknown target, a malformed plan, or a string
// holding a NUL byte; ErrShutDown after Shutdown.
func (e *Engine) Deploy(target, candidateTOML, planTOML, baseDir string) (uint64, error) {
	var cs cStrings
	defer cs.free()
	ct, err := cs.add("target", target, false)
	if err != nil {
		return 0, err
	}
	cc, err := cs.add("candidateTOML", candidateTOML, false)
	if err != nil {
		return 0, err
	}
	cp, err := cs.add("planTOML", planTOML, true)
	if err != nil {
		return 0, err
	}
	cd, err := cs.add("baseDir", baseDir, true)
	if err != nil {
		return 0, err
	}
	r, err := e.call(func(h unsafe.Pointer) C.gorisk_res { return C.gorisk_deploy(h, ct, cc, cp, cd) })
	if err != nil {
		return 0, err
	}
	return uint64(r.a), nil
}

// DeployStatus returns target's deploy status (risk_engine_deploy_status_json). ErrInvalid
// for an unknown target.
func (e *Engine) DeployStatus(target string) (DeployStatus, error) {
	text, err := e.DeployStatusJSON(target)
	if err != nil {
		return DeployStatus{}, err
	}
	var st DeployStatus
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		return DeployStatus{}, fmt.Errorf("risk: decoding deploy status JSON: %w", err)
	}
	return st, nil
}

// DeployStatusJSON returns target's deploy status as the library's JSON text (every field,
// including any newer than DeployStatus).
func (e *Engine) DeployStatusJSON(target string) (string, error) {
	var cs cStrings
	defer cs.free()
	ct, err := cs.add("target", target, false)
	if err != nil {
		return "", err
	}
	return e.textOf(deployStatusCap, "the deploy status", func(h unsafe.Pointer, buf *C.char, n C.size_t) C.gorisk_res {
		return C.gorisk_deploy_status(h, ct, buf, n)
	})
}

// Promote promotes the candidate of target's deploy in progress now, skipping its
// remaining stages (risk_engine_promote). ErrDeploy when none is in progress.
func (e *Engine) Promote(target string) error {
	var cs cStrings
	defer cs.free()
	ct, err := cs.add("target", target, false)
	if err != nil {
		return err
	}
	_, err = e.call(func(h unsafe.Pointer) C.gorisk_res { return C.gorisk_promote(h, ct) })
	return err
}

// Rollback ends target's deploy in progress (what serves stays), or, with none in
// progress, restores the version that served before the current one
// (risk_engine_rollback). reason is recorded in the history ("" = none given). ErrDeploy
// when there is nothing to roll back to.
func (e *Engine) Rollback(target, reason string) error {
	var cs cStrings
	defer cs.free()
	ct, err := cs.add("target", target, false)
	if err != nil {
		return err
	}
	cr, err := cs.add("reason", reason, true)
	if err != nil {
		return err
	}
	_, err = e.call(func(h unsafe.Pointer) C.gorisk_res { return C.gorisk_rollback(h, ct, cr) })
	return err
}

// DeployTick judges every deploy's guards and stages now (risk_engine_deploy_tick; the
// engine's supervisor also does, every [deploy] check_interval_ms).
func (e *Engine) DeployTick() error {
	_, err := e.call(func(h unsafe.Pointer) C.gorisk_res { return C.gorisk_deploy_tick(h) })
	return err
}
