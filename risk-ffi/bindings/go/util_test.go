// Helpers shared by the binding's tests: engines, the shared configurations, hang
// detectors, transactions and checks.

package risk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// configsDir holds the engine configurations shared with the Rust, Java and Python tests
// (testdata/configs of the repository; see its README.md).
var configsDir = filepath.Join("..", "..", "..", "testdata", "configs")

// loadConfig is testdata/configs/<name> with each {{KEY}} placeholder replaced by
// vars[KEY]. It panics (failing the test binary loudly) when the file is missing, a
// value names no placeholder or a placeholder is left without a value.
func loadConfig(name string, vars map[string]string) string {
	b, err := os.ReadFile(filepath.Join(configsDir, name))
	if err != nil {
		panic(fmt.Sprintf("engine config %s: %v", name, err))
	}
	text := string(b)
	for k, v := range vars {
		mark := "{{" + k + "}}"
		if !strings.Contains(text, mark) {
			panic(fmt.Sprintf("engine config %s has no placeholder %s", name, mark))
		}
		text = strings.ReplaceAll(text, mark, v)
	}
	if strings.Contains(text, "{{") {
		panic(fmt.Sprintf("engine config %s: a placeholder is left without a value:\n%s", name, text))
	}
	return text
}

// writeFile writes text to path (a rules or list file next to a test's config).
func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// configPath is examples/risk.toml of the repository (RISK_CONFIG overrides it).
func configPath(tb testing.TB) string {
	tb.Helper()
	p := os.Getenv("RISK_CONFIG")
	if p == "" {
		p = filepath.Join("..", "..", "..", "examples", "risk.toml")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		tb.Fatalf("engine config: %v (set RISK_CONFIG)", err)
	}
	return abs
}

func openEngine(tb testing.TB) *Engine {
	tb.Helper()
	e, err := NewFromPath(configPath(tb))
	if err != nil {
		tb.Fatalf("NewFromPath: %v", err)
	}
	tb.Cleanup(func() { _ = e.Close() })
	return e
}

// openEngineNoDeadline is examples/risk.toml with the largest fast-tier deadline the
// library allows (60 s) instead of 15 ms, so which tier decides does not depend on how
// loaded the machine is (a decision would have to stall for a minute to fall back).
func openEngineNoDeadline(tb testing.TB) *Engine {
	tb.Helper()
	path := configPath(tb)
	text, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	if strings.Count(string(text), "deadline_ms = 15\n") != 1 {
		tb.Fatalf("%s: no single 'deadline_ms = 15' line to raise", path)
	}
	e, err := NewFromTOML(strings.Replace(string(text), "deadline_ms = 15\n", "deadline_ms = 60000\n", 1), filepath.Dir(path))
	if err != nil {
		tb.Fatalf("NewFromTOML: %v", err)
	}
	tb.Cleanup(func() { _ = e.Close() })
	return e
}

// hangAfter is how long a call that must return at once, or as soon as the test releases
// it, may take before the test fails it as hung. A hang detector, not a performance limit:
// no assertion depends on how fast the machine is.
const hangAfter = 60 * time.Second

// noHang runs f on another goroutine and fails the test as hung if it has not returned
// within hangAfter.
func noHang(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(hangAfter):
		t.Fatalf("%s: hung (still running after %v)", what, hangAfter)
	}
}

type pollResult struct {
	v   Verdict
	ok  bool
	err error
}

// pollNoHang is sub.Poll(timeout) under noHang.
func pollNoHang(t *testing.T, what string, sub *Subscription, timeout time.Duration) pollResult {
	t.Helper()
	var r pollResult
	noHang(t, what, func() { r.v, r.ok, r.err = sub.Poll(timeout) })
	return r
}

// wantClosed checks that an hour-long Poll ends with ErrClosed: at once, or once the deep
// tier stops, never by its timeout (a Poll that waited it out is reported as hung).
func wantClosed(t *testing.T, what string, sub *Subscription) {
	t.Helper()
	r := pollNoHang(t, what, sub, time.Hour)
	if r.ok {
		t.Fatalf("%s: verdict %+v, want ErrClosed", what, r.v)
	}
	wantCode(t, what, r.err, ErrClosed)
}

// wantVerdict waits (hour-long Poll, under noHang) for the next verdict.
func wantVerdict(t *testing.T, what string, sub *Subscription) Verdict {
	t.Helper()
	r := pollNoHang(t, what, sub, time.Hour)
	if !r.ok || r.err != nil {
		t.Fatalf("%s: Poll = %v, %v; want a verdict", what, r.ok, r.err)
	}
	return r.v
}

// verdicts reads the gray-zone metrics: items enqueued, items queued now, and every deep
// verdict produced.
func verdicts(t *testing.T, e *Engine) (enqueued, queueLen, produced float64) {
	t.Helper()
	m, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	g := m["gray"].(map[string]any)
	n := func(k string) float64 {
		v, ok := g[k].(float64)
		if !ok {
			t.Fatalf("metrics gray.%s missing in %v", k, g)
		}
		return v
	}
	produced = n("completed") + n("timed_out") + n("failed") + n("saturated")
	if c, ok := g["circuit_open"].(float64); ok { // where the library reports it
		produced += c
	}
	return n("enqueued"), n("queue_len"), produced
}

var epoch = time.UnixMilli(1767571200000)

func baseTxn(id uint64) Txn {
	return Txn{
		ID:       id,
		Entity:   1000 + id%97,
		Time:     epoch.Add(time.Duration(id) * time.Second),
		Amount:   42.5,
		Currency: "USD",
		MCC:      5411,
		Country:  "US",
		Channel:  ChannelPOS,
		Device:   7,
		Features: map[string]Feature{
			"txn_count_1h": Num(3),
			"hour":         Num(23),
			"device_new":   Num(1),
		},
	}
}

// wantCode checks that err is an *Error with want's code (errors.Is and errors.As).
func wantCode(t *testing.T, what string, err error, want *Error) *Error {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %s", what, err, want.Name)
	}
	var re *Error
	if !errors.As(err, &re) || re.Code != want.Code || re.Name != want.Name {
		t.Fatalf("%s: errors.As gave %#v", what, re)
	}
	return re
}

func checkDecision(t *testing.T, d Decision, id uint64) {
	t.Helper()
	if d.TxnID != id {
		t.Errorf("TxnID = %d, want %d", d.TxnID, id)
	}
	switch d.Action {
	case ActionApprove, ActionReview, ActionDecline:
	default:
		t.Errorf("Action = %q", d.Action)
	}
	switch d.Tier {
	case TierRules, TierFast, TierStatic:
	default:
		t.Errorf("Tier = %q", d.Tier)
	}
	switch d.Escalation {
	case EscalationNone, EscalationEnqueued, EscalationShed:
	default:
		t.Errorf("Escalation = %q", d.Escalation)
	}
	if strings.HasPrefix(string(d.Fallback), "unknown") {
		t.Errorf("Fallback = %q", d.Fallback)
	}
	if !(d.Score >= 0 && d.Score <= 1) {
		t.Errorf("Score = %v", d.Score)
	}
	if len(d.Reasons) > 8 {
		t.Errorf("%d reasons", len(d.Reasons))
	}
	for _, r := range d.Reasons {
		if r.Code == "" || strings.HasPrefix(r.Code, "reason#") {
			t.Errorf("reason code %q", r.Code)
		}
	}
	if d.TotalTime <= 0 {
		t.Errorf("TotalTime = %v", d.TotalTime)
	}
}

// rulesOnlyTOML: a constant rule score (0.1) and no fast tier, so the rule tier decides
// every transaction and the exposition's per-tier counts are exact.
var rulesOnlyTOML = loadConfig("rules_only.toml", nil)

// deepCfg has a deep tier that always answers (fast score 0.5 is in the gray band).
// Nothing in it depends on how fast the machine is: the fast deadline is the largest
// allowed (60 s; an inline answer past it would fall back to the rule score 0.1, outside
// the band, and not be enqueued) and the deep budget an hour (no verdict falls back to a
// timeout).
var deepCfg = deepConfig("budget_ms = 3600000\n")

// deepConfig is gray_deep.toml (rules 0.1, fast 0.5 in the gray band [0.3, 0.7], deep
// 0.9) with the given [deep] table.
func deepConfig(deepTable string) string {
	return loadConfig("gray_deep.toml", map[string]string{"DEEP": deepTable})
}

// stuckDeepCfg is deepCfg with a deep dispatcher that never takes a batch during a test:
// it waits for maxBatch items or max_wait (an hour) after the oldest's enqueue. So fewer
// than maxBatch queued items stay queued until Shutdown, deterministically.
func stuckDeepCfg(maxBatch int) string {
	return deepConfig(fmt.Sprintf("budget_ms = 7200000\nmax_wait_ms = 3600000\nmax_batch = %d\n", maxBatch))
}
