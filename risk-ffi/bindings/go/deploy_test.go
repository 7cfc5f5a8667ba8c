package risk

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// deployTOML: a constant rule tier (0.1) and a constant fast tier (0.05) with the largest
// deadline the library allows, so every decision is the fast tier's whatever the load.
var deployTOML = loadConfig("fast_constant.toml", map[string]string{"FAST_SCORE": "0.05"})

// warmDecisions are decided before a deploy: the gate validates on the recent sample
// (every 16th decision, by a hash of the txn id) and by default needs 32; 1500 leave ~94.
const warmDecisions = 1500

const (
	// planImmediate: the default gate, no stages (promoted once the gate passes).
	planImmediate = `by = "test"`
	// planCanary: one canary stage that never ends by itself during a test.
	planCanary = "by = \"test\"\n[gate]\nmin_sample = 0\n[[canary]]\nshare = 0.5\nmin_decisions = 1000000\n"
	// planNoSample: no gate sample needed (tests not about the gate).
	planNoSample = "by = \"test\"\n[gate]\nmin_sample = 0\n"
)

func fastCandidate(p float64) string {
	return fmt.Sprintf("[scorer]\nkind = \"constant\"\nprobability = %v\n", p)
}

func deployTxn(id uint64) Txn {
	return Txn{ID: id, Entity: id % 53, Amount: 5 + float64(id%400)*1.25, Currency: "USD"}
}

// deployEngine builds an engine from deployTOML (closed by the test's cleanup) and, with
// warm, decides warmDecisions transactions first.
func deployEngine(t *testing.T, warm bool) *Engine {
	t.Helper()
	e, err := NewFromTOML(deployTOML, "")
	if err != nil {
		t.Fatalf("NewFromTOML: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	if warm {
		for i := uint64(1); i <= warmDecisions; i++ {
			d, err := e.Decide(deployTxn(i))
			if err != nil {
				t.Fatalf("Decide %d: %v", i, err)
			}
			if d.Tier != TierFast {
				t.Fatalf("Decide %d: tier %q", i, d.Tier)
			}
		}
	}
	return e
}

func status(t *testing.T, e *Engine, target string) DeployStatus {
	t.Helper()
	st, err := e.DeployStatus(target)
	if err != nil {
		t.Fatalf("DeployStatus(%q): %v", target, err)
	}
	if st.Target != target {
		t.Fatalf("DeployStatus(%q).Target = %q", target, st.Target)
	}
	return st
}

func serving(t *testing.T, e *Engine, target string) string {
	t.Helper()
	st := status(t, e, target)
	if st.Serving == nil {
		t.Fatalf("%s: nothing serves", target)
	}
	return st.Serving.Version
}

func wantServing(t *testing.T, e *Engine, target, version string) {
	t.Helper()
	if got := serving(t, e, target); got != version {
		t.Fatalf("%s serves %q, want %q", target, got, version)
	}
}

func versions(vs []ModelVersion) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, v.Version)
	}
	return out
}

func lastEvent(t *testing.T, st DeployStatus) DeployEvent {
	t.Helper()
	if len(st.History) == 0 {
		t.Fatalf("%s: no history", st.Target)
	}
	return st.History[len(st.History)-1]
}

// wantModelScore decides one transaction and checks the fast tier's score.
func wantModelScore(t *testing.T, e *Engine, id uint64, want float32) {
	t.Helper()
	d, err := e.Decide(deployTxn(id))
	if err != nil {
		t.Fatalf("Decide %d: %v", id, err)
	}
	if d.Tier != TierFast || d.ModelScore != want {
		t.Fatalf("Decide %d: tier %q, model score %v, want fast %v", id, d.Tier, d.ModelScore, want)
	}
}

// wantDeployErr checks err is ErrDeploy with msg in its message.
func wantDeployErr(t *testing.T, what string, err error, msg string) *Error {
	t.Helper()
	re := wantCode(t, what, err, ErrDeploy)
	if !strings.Contains(re.Message, msg) {
		t.Fatalf("%s: message %q does not mention %q", what, re.Message, msg)
	}
	return re
}

func TestDeployPromotesThenRollbackRestores(t *testing.T) {
	e := deployEngine(t, true)
	st := status(t, e, TargetFast)
	if st.Serving == nil || st.Serving.Version != "0.05" || st.Serving.Name != "constant" ||
		st.Active != nil || len(st.Previous) != 0 || len(st.History) != 0 {
		t.Fatalf("initial status %+v", st)
	}
	epoch := st.Epoch

	id, err := e.Deploy(TargetFast, fastCandidate(0.06), planImmediate, "")
	if err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	if id == 0 {
		t.Fatal("Deploy returned id 0")
	}
	st = status(t, e, TargetFast)
	if st.Serving.Version != "0.06" || len(st.Serving.Hash) != 16 ||
		st.Serving.ID != "constant@0.06#"+st.Serving.Hash {
		t.Fatalf("serving %+v", st.Serving)
	}
	if got := versions(st.Previous); !slices.Equal(got, []string{"0.05"}) {
		t.Fatalf("previous %v", got)
	}
	if st.Active != nil || st.Epoch <= epoch {
		t.Fatalf("active %+v, epoch %d (was %d)", st.Active, st.Epoch, epoch)
	}
	if ev := lastEvent(t, st); ev.Kind != DeployEventPromoted || ev.Deploy != id || ev.Version.Version != "0.06" {
		t.Fatalf("last event %+v", ev)
	}
	wantModelScore(t, e, 10_001, 0.06)

	if err := e.Rollback(TargetFast, "test rollback"); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	st = status(t, e, TargetFast)
	if st.Serving.Version != "0.05" || len(st.Previous) != 0 {
		t.Fatalf("after rollback: serving %+v, previous %v", st.Serving, versions(st.Previous))
	}
	if ev := lastEvent(t, st); ev.Kind != DeployEventRolledBack || ev.Detail != "test rollback" {
		t.Fatalf("last event %+v", ev)
	}
	wantModelScore(t, e, 10_002, 0.05)

	// Nothing left to roll back to.
	err = e.Rollback(TargetFast, "")
	re := wantDeployErr(t, "second Rollback", err, "no previous version")
	if re.Name != "RISK_ERR_DEPLOY" || !strings.HasPrefix(re.Error(), "risk: RISK_ERR_DEPLOY: ") {
		t.Errorf("error %q", re.Error())
	}
	if errors.Is(err, ErrAudit) || errors.Is(err, ErrInvalid) {
		t.Error("ErrDeploy matches another sentinel")
	}
	wantServing(t, e, TargetFast, "0.05")
}

func TestRollbackWithoutReasonRecordsTheDefault(t *testing.T) {
	e := deployEngine(t, true)
	if _, err := e.Deploy(TargetFast, fastCandidate(0.06), planImmediate, ""); err != nil {
		t.Fatal(err)
	}
	if err := e.Rollback(TargetFast, ""); err != nil { // "": NULL
		t.Fatal(err)
	}
	if ev := lastEvent(t, status(t, e, TargetFast)); ev.Kind != DeployEventRolledBack || ev.Detail != "rollback requested" {
		t.Fatalf("last event %+v", ev)
	}
}

func TestDeployIDsGrowAndPreviousStacks(t *testing.T) {
	e := deployEngine(t, true)
	a, err := e.Deploy(TargetFast, fastCandidate(0.06), planImmediate, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Deploy(TargetFast, fastCandidate(0.07), planImmediate, "")
	if err != nil {
		t.Fatal(err)
	}
	if !(b > a && a > 0) {
		t.Fatalf("ids %d then %d", a, b)
	}
	st := status(t, e, TargetFast)
	if st.Serving.Version != "0.07" || !slices.Equal(versions(st.Previous), []string{"0.06", "0.05"}) {
		t.Fatalf("serving %q, previous %v", st.Serving.Version, versions(st.Previous))
	}
}

func TestGateRefusesAWildlyDifferentCandidate(t *testing.T) {
	e := deployEngine(t, true)
	id, err := e.Deploy(TargetFast, fastCandidate(0.95), planImmediate, "")
	wantDeployErr(t, "Deploy 0.95", err, "gate")
	wantDeployErr(t, "Deploy 0.95", err, "Disagreement")
	if id != 0 {
		t.Errorf("refused Deploy returned id %d", id)
	}
	st := status(t, e, TargetFast)
	if st.Serving.Version != "0.05" || st.Active != nil { // a refused candidate never serves
		t.Fatalf("serving %q, active %+v", st.Serving.Version, st.Active)
	}
	ev := lastEvent(t, st)
	if ev.Kind != DeployEventRefused || ev.Version.Version != "0.95" || !strings.Contains(ev.Detail, "gate") {
		t.Fatalf("last event %+v", ev)
	}
	wantModelScore(t, e, 10_003, 0.05)
}

func TestGateNeedsRecentTraffic(t *testing.T) {
	e := deployEngine(t, false)
	_, err := e.Deploy(TargetFast, fastCandidate(0.06), planImmediate, "")
	re := wantDeployErr(t, "Deploy before any decision", err, "gate")
	if !strings.Contains(re.Message, "32") {
		t.Errorf("message %q does not give the needed sample", re.Message)
	}
	wantServing(t, e, TargetFast, "0.05")
	// min_sample = 0: validated on what there is (nothing), promoted.
	if _, err := e.Deploy(TargetFast, fastCandidate(0.06), planNoSample, ""); err != nil {
		t.Fatal(err)
	}
	wantServing(t, e, TargetFast, "0.06")
}

func TestCanaryStaysActiveUntilPromoted(t *testing.T) {
	e := deployEngine(t, true)
	id, err := e.Deploy(TargetFast, fastCandidate(0.06), planCanary, "")
	if err != nil {
		t.Fatalf("Deploy canary: %v", err)
	}
	st := status(t, e, TargetFast)
	a := st.Active
	if a == nil || a.ID != id || a.Phase != DeployPhaseCanary || a.Stage != 0 || a.Share != 0.5 ||
		a.Candidate.Version != "0.06" || a.Gate.Invalid != 0 {
		t.Fatalf("active %+v", a)
	}
	if len(a.CandidateStats.Actions) != 3 || len(a.CandidateStats.Scores) == 0 {
		t.Errorf("candidate stats %+v", a.CandidateStats)
	}
	if st.Serving.Version != "0.05" || lastEvent(t, st).Kind != DeployEventStarted {
		t.Fatalf("serving %q, last event %+v", st.Serving.Version, lastEvent(t, st))
	}

	// One deploy per target at a time.
	_, err = e.Deploy(TargetFast, fastCandidate(0.07), planNoSample, "")
	wantDeployErr(t, "second Deploy", err, "in progress")
	// A tick does not end a stage short of its min_decisions.
	if err := e.DeployTick(); err != nil {
		t.Fatal(err)
	}
	if a := status(t, e, TargetFast).Active; a == nil || a.Phase != DeployPhaseCanary {
		t.Fatalf("after a tick: active %+v", a)
	}

	if err := e.Promote(TargetFast); err != nil {
		t.Fatalf("Promote: %v", err)
	}
	st = status(t, e, TargetFast)
	if st.Serving.Version != "0.06" || st.Active != nil || !slices.Equal(versions(st.Previous), []string{"0.05"}) {
		t.Fatalf("after promote: serving %q, active %+v, previous %v", st.Serving.Version, st.Active, versions(st.Previous))
	}
	if ev := lastEvent(t, st); ev.Kind != DeployEventPromoted {
		t.Fatalf("last event %+v", ev)
	}
	wantModelScore(t, e, 10_004, 0.06)
	wantDeployErr(t, "second Promote", e.Promote(TargetFast), "no deploy in progress")
}

func TestRollbackEndsACanary(t *testing.T) {
	e := deployEngine(t, true)
	if _, err := e.Deploy(TargetFast, fastCandidate(0.06), planCanary, ""); err != nil {
		t.Fatal(err)
	}
	if err := e.Rollback(TargetFast, "abandoned"); err != nil {
		t.Fatal(err)
	}
	st := status(t, e, TargetFast)
	if st.Active != nil || st.Serving.Version != "0.05" {
		t.Fatalf("active %+v, serving %q", st.Active, st.Serving.Version)
	}
	if ev := lastEvent(t, st); ev.Kind != DeployEventRolledBack || ev.Detail != "abandoned" {
		t.Fatalf("last event %+v", ev)
	}
	// The target is free again.
	if _, err := e.Deploy(TargetFast, fastCandidate(0.07), planImmediate, ""); err != nil {
		t.Fatal(err)
	}
	wantServing(t, e, TargetFast, "0.07")
}

func TestPolicyDeployChangesTheThresholds(t *testing.T) {
	e := deployEngine(t, true)
	const policy = "[policy]\napprove_below = 0.02\ndecline_at = 0.04\n"
	if d, err := e.Decide(deployTxn(20_001)); err != nil || d.Action != ActionApprove {
		t.Fatalf("before: %+v, %v", d, err)
	}
	// Every recent decision would change action: the default agreement check refuses it.
	_, err := e.Deploy(TargetPolicy, policy, planImmediate, "")
	wantDeployErr(t, "Deploy policy", err, "gate")
	if _, err := e.Deploy(TargetPolicy, policy, "[gate]\nmin_action_agreement = 0.0\n", ""); err != nil {
		t.Fatal(err)
	}
	if v := serving(t, e, TargetPolicy); !strings.Contains(v, "0.04") {
		t.Errorf("policy version %q", v)
	}
	if d, err := e.Decide(deployTxn(20_002)); err != nil || d.Action != ActionDecline {
		t.Fatalf("after: %+v, %v", d, err)
	}
}

func TestCandidatePathsResolveAgainstBaseDir(t *testing.T) {
	e := deployEngine(t, true)
	dir := t.TempDir()
	rules := "version \"v2\"\nrule BIG { when amount > 100 score 0.3 reason \"BIG\" }\n"
	if err := os.WriteFile(filepath.Join(dir, "cand.rules"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	const cand = "[scorer]\nkind = \"rules\"\npath = \"cand.rules\"\n"
	// Not about the gate: BIG changes many recent actions, so the gate lets anything pass.
	const plan = planNoSample + "max_mean_abs_diff = 1.0\nmin_action_agreement = 0.0\n"
	// baseDir "": the working directory (the package directory), which has no cand.rules.
	_, err := e.Deploy(TargetRules, cand, plan, "")
	wantDeployErr(t, "Deploy without baseDir", err, "cand.rules")
	wantServing(t, e, TargetRules, "0.1")
	if _, err := e.Deploy(TargetRules, cand, plan, dir); err != nil {
		t.Fatalf("Deploy with baseDir: %v", err)
	}
	wantServing(t, e, TargetRules, "v2")
	d, err := e.Decide(Txn{ID: 20_003, Amount: 500, Currency: "USD"})
	if err != nil {
		t.Fatal(err)
	}
	if d.RuleScore != 0.3 || len(d.Reasons) == 0 || d.Reasons[0].Code != "BIG" {
		t.Fatalf("decision %+v", d)
	}
}

func TestEveryTargetHasAStatus(t *testing.T) {
	e := deployEngine(t, false)
	for _, target := range []string{TargetRules, TargetFast, TargetDeep, TargetPolicy} {
		if st := status(t, e, target); st.Active != nil {
			t.Errorf("%s: active %+v", target, st.Active)
		}
		text, err := e.DeployStatusJSON(target)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(text), &m); err != nil || m["target"] != target {
			t.Fatalf("DeployStatusJSON(%q) = %q (%v)", target, text, err)
		}
	}
	wantServing(t, e, TargetRules, "0.1")
	if st := status(t, e, TargetDeep); st.Serving != nil { // no deep tier
		t.Errorf("deep serving %+v", st.Serving)
	}
	_, err := e.Deploy(TargetDeep, fastCandidate(0.5), planNoSample, "")
	wantDeployErr(t, "Deploy deep", err, "no deep tier")
}

func TestDeployBadArguments(t *testing.T) {
	e := deployEngine(t, true)
	// An unknown target is the library's ErrInvalid, not a refused deploy.
	for what, err := range map[string]error{
		"Deploy nope":         func() error { _, err := e.Deploy("nope", fastCandidate(0.06), planImmediate, ""); return err }(),
		"Deploy empty target": func() error { _, err := e.Deploy("", fastCandidate(0.06), planImmediate, ""); return err }(),
		"DeployStatus nope":   func() error { _, err := e.DeployStatus("nope"); return err }(),
		"Promote nope":        e.Promote("nope"),
		"Rollback Fast":       e.Rollback("Fast", "reason"),
	} {
		re := wantCode(t, what, err, ErrInvalid)
		if !strings.Contains(re.Message, "is not rules, fast, deep or policy") {
			t.Errorf("%s: message %q", what, re.Message)
		}
	}
	// Candidates that do not parse, or give no single table: refused.
	for _, cand := range []string{"[scorer", "", "probability = 0.06\n",
		fastCandidate(0.06) + "[policy]\napprove_below = 0.1\ndecline_at = 0.9\n",
		"[scorer]\nkind = \"nope\"\n"} {
		_, err := e.Deploy(TargetFast, cand, planNoSample, "")
		wantDeployErr(t, fmt.Sprintf("Deploy %q", cand), err, "candidate failed to load")
	}
	// A malformed plan: ErrInvalid.
	for _, plan := range []string{"[gate]\nbogus = 1\n", "[[canary]]\nshare = 1.5\n", "by = "} {
		_, err := e.Deploy(TargetFast, fastCandidate(0.06), plan, "")
		if re := wantCode(t, fmt.Sprintf("plan %q", plan), err, ErrInvalid); !strings.Contains(re.Message, "rollout plan") {
			t.Errorf("plan %q: message %q", plan, re.Message)
		}
	}
	// NUL bytes are refused before C (they would cut the string).
	_, err := e.Deploy(TargetFast, fastCandidate(0.06)+"\x00", planNoSample, "")
	if re := wantCode(t, "NUL in candidate", err, ErrInvalid); !strings.Contains(re.Message, "NUL") {
		t.Errorf("message %q", re.Message)
	}
	_, err = e.Deploy(TargetFast, fastCandidate(0.06), planNoSample, "dir\x00")
	wantCode(t, "NUL in baseDir", err, ErrInvalid)
	wantCode(t, "NUL in reason", e.Rollback(TargetFast, "a\x00b"), ErrInvalid)
	_, err = e.DeployStatus("fast\x00")
	wantCode(t, "NUL in target", err, ErrInvalid)

	st := status(t, e, TargetFast)
	if st.Serving.Version != "0.05" || st.Active != nil {
		t.Fatalf("after bad calls: serving %q, active %+v", st.Serving.Version, st.Active)
	}
}

func TestDeployOnAShutDownOrClosedEngine(t *testing.T) {
	e := deployEngine(t, false)
	if _, _, err := e.Shutdown(0); err != nil {
		t.Fatal(err)
	}
	_, err := e.Deploy(TargetFast, fastCandidate(0.06), planNoSample, "")
	wantCode(t, "Deploy after Shutdown", err, ErrShutDown)
	wantServing(t, e, TargetFast, "0.05")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"Deploy":       func() error { _, err := e.Deploy(TargetFast, fastCandidate(0.06), planNoSample, ""); return err }(),
		"DeployStatus": func() error { _, err := e.DeployStatus(TargetFast); return err }(),
		"Promote":      e.Promote(TargetFast),
		"Rollback":     e.Rollback(TargetFast, ""),
		"DeployTick":   e.DeployTick(),
	} {
		wantCode(t, what+" after Close", err, ErrHandle)
	}
}

func TestErrDeploy(t *testing.T) {
	if ErrDeploy.Code != 15 || ErrDeploy.Name != "RISK_ERR_DEPLOY" || CodeName(codeDeploy) != "RISK_ERR_DEPLOY" {
		t.Fatalf("ErrDeploy = %+v", ErrDeploy)
	}
	err := fmt.Errorf("wrapped: %w", newError(codeDeploy, "why"))
	if !errors.Is(err, ErrDeploy) || errors.Is(err, ErrAudit) {
		t.Fatal("errors.Is")
	}
}
