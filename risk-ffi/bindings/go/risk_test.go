package risk

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

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

func TestVersion(t *testing.T) {
	if v := Version(); v == "" {
		t.Fatal("empty version")
	}
}

func TestDecideOne(t *testing.T) {
	// (the 60 s fast deadline: the model decides whatever the machine's load, so the tier
	// and its score can be pinned)
	e := openEngineNoDeadline(t)
	d, err := e.Decide(baseTxn(1))
	if err != nil {
		t.Fatal(err)
	}
	checkDecision(t, d, 1)
	if d.Entity != 1000+1%97 {
		t.Errorf("Entity = %d", d.Entity)
	}
	if d.Tier != TierFast || d.Fallback != FallbackNone || math.IsNaN(float64(d.ModelScore)) {
		t.Errorf("want the fast tier to decide with a model score: %+v", d)
	}
	t.Logf("decision: %+v", d)

	// Optional fields unset, a categorical feature and an explicitly missing one.
	d, err = e.Decide(Txn{ID: 2, Amount: 10, Currency: "EUR", Features: map[string]Feature{
		"hour": Missing(), "country": Cat("DE"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	checkDecision(t, d, 2)
}

const goodJSON = `{"id": 9, "entity": 5, "timestamp_ms": 1767571200000, "amount": 12.5,
	"currency": "GBP", "country": "GB", "channel": "ecom",
	"features": {"txn_count_1h": 1, "hour": null}}`

func TestDecideJSON(t *testing.T) {
	e := openEngine(t)
	d, err := e.DecideJSON(goodJSON)
	if err != nil {
		t.Fatal(err)
	}
	checkDecision(t, d, 9)
	if d.Entity != 5 {
		t.Errorf("Entity = %d", d.Entity)
	}
}

func TestDecideBatch(t *testing.T) {
	e := openEngine(t)
	txns := make([]Txn, 4)
	for i := range txns {
		txns[i] = baseTxn(100 + uint64(i))
	}
	txns[2].Amount = -1
	decs, errs := e.DecideBatch(txns)
	if len(decs) != 4 || len(errs) != 4 {
		t.Fatalf("lengths %d %d", len(decs), len(errs))
	}
	for i := range txns {
		if i == 2 {
			re := wantCode(t, "item 2", errs[i], ErrTransaction)
			if !strings.Contains(re.Message, "amount") {
				t.Errorf("item 2 message %q does not name amount", re.Message)
			}
			if decs[i].TxnID != 0 {
				t.Errorf("failed item has a decision: %+v", decs[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Fatalf("item %d: %v", i, errs[i])
		}
		checkDecision(t, decs[i], 100+uint64(i))
	}

	// Several failures, one caught by the binding (NUL byte) and two by the library.
	txns = []Txn{baseTxn(200), baseTxn(201), baseTxn(202), baseTxn(203)}
	txns[0].Currency = "US\x00D"
	txns[1].Currency = "ZZZZ"
	txns[3].Amount = math.NaN()
	decs, errs = e.DecideBatch(txns)
	wantCode(t, "NUL item", errs[0], ErrInvalid)
	wantCode(t, "ZZZZ item", errs[1], ErrTransaction)
	wantCode(t, "NaN item", errs[3], ErrTransaction)
	if errs[2] != nil {
		t.Fatalf("good item: %v", errs[2])
	}
	checkDecision(t, decs[2], 202)

	decs, errs = e.DecideBatch(nil)
	if len(decs) != 0 || len(errs) != 0 {
		t.Fatalf("empty batch: %v %v", decs, errs)
	}
}

func TestBadInputs(t *testing.T) {
	e := openEngine(t)
	bad := func(name string, want *Error, mutate func(*Txn), mention string) {
		t.Run(name, func(t *testing.T) {
			tx := baseTxn(2)
			mutate(&tx)
			d, err := e.Decide(tx)
			re := wantCode(t, name, err, want)
			if mention != "" && !strings.Contains(re.Message, mention) {
				t.Errorf("message %q does not mention %q", re.Message, mention)
			}
			if d.TxnID != 0 || d.Action != "" {
				t.Errorf("decision on failure: %+v", d)
			}
		})
	}
	bad("nan amount", ErrTransaction, func(t *Txn) { t.Amount = math.NaN() }, "amount")
	bad("negative amount", ErrTransaction, func(t *Txn) { t.Amount = -5 }, "amount")
	bad("currency ZZZZ", ErrTransaction, func(t *Txn) { t.Currency = "ZZZZ" }, "")
	bad("empty currency", ErrTransaction, func(t *Txn) { t.Currency = "" }, "")
	bad("currency not utf8", ErrUTF8, func(t *Txn) { t.Currency = "\xff" }, "currency")
	bad("currency NUL", ErrInvalid, func(t *Txn) { t.Currency = "US\x00" }, "NUL")
	bad("channel", ErrTransaction, func(t *Txn) { t.Channel = "carrier-pigeon" }, "")
	bad("unknown feature", ErrTransaction, func(t *Txn) {
		t.Features = map[string]Feature{"no_such_field": Num(1)}
	}, "no_such_field")
	bad("unknown missing feature", ErrTransaction, func(t *Txn) {
		t.Features = map[string]Feature{"no_such_field": Missing()}
	}, "no_such_field")
	bad("feature above the float32 range", ErrTransaction, func(t *Txn) {
		t.Features["hour"] = Num(1e39)
	}, "hour")
	bad("feature below the float32 range", ErrTransaction, func(t *Txn) {
		t.Features["hour"] = Num(-math.MaxFloat64)
	}, "hour")
	bad("too many features", ErrInvalid, func(t *Txn) {
		t.Features = make(map[string]Feature, 5000)
		for i := range 5000 {
			t.Features[fmt.Sprintf("f%d", i)] = Num(1)
		}
	}, "n_features")

	t.Run("nan feature is missing", func(t *testing.T) {
		tx := baseTxn(3)
		tx.Features["txn_count_1h"] = Num(math.NaN())
		if _, err := e.Decide(tx); err != nil {
			t.Fatal(err)
		}
	})

	for i, js := range []string{
		"{", "[]", "", `{"amount": 1}`, `{"amount": 1, "currency": "USD", "bogus": 1}`,
		`{"amount": "x", "currency": "USD"}`,
		`{"amount": 1, "currency": "USD", "features": {"hour": [1]}}`,
	} {
		_, err := e.DecideJSON(js)
		wantCode(t, fmt.Sprintf("malformed JSON %d %q", i, js), err, ErrJSON)
	}
	_, err := e.DecideJSON(`{"amount": 1, "currency": "ZZZZ"}`)
	wantCode(t, "JSON currency ZZZZ", err, ErrTransaction)
	_, err = e.DecideJSON("{\"amount\": 1, \"currency\": \"\xff\"}")
	wantCode(t, "JSON not UTF-8", err, ErrUTF8)

	// One byte over RISK_MAX_INPUT (a valid JSON prefix padded with spaces).
	huge := `{"amount": 1, "currency": "USD"}` + strings.Repeat(" ", MaxInput)
	_, err = e.DecideJSON(huge)
	re := wantCode(t, "oversized JSON", err, ErrInvalid)
	t.Logf("oversized: %s", re.Message)
	// Exactly RISK_MAX_INPUT bytes is accepted.
	atMax := `{"amount": 1, "currency": "USD"}`
	atMax += strings.Repeat(" ", MaxInput-len(atMax))
	if _, err := e.DecideJSON(atMax); err != nil {
		t.Fatalf("JSON of exactly MaxInput bytes: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	_, err := NewFromPath("/nonexistent/risk.toml")
	re := wantCode(t, "missing file", err, ErrConfig)
	if !strings.Contains(re.Message, "/nonexistent/risk.toml") {
		t.Errorf("message %q does not name the file", re.Message)
	}
	_, err = NewFromPath("a\x00b")
	wantCode(t, "NUL path", err, ErrInvalid)

	const schema = "[schema]\nfields = [{ name = \"amount\", kind = \"numeric\", required = true }]\n" +
		"[rules.scorer]\nkind = \"constant\"\nprobability = 0.1\n"
	_, err = NewFromTOML(schema+"[gray]\nband = [0.7, 0.3]\n", "")
	re = wantCode(t, "bad band", err, ErrConfig)
	if !strings.Contains(re.Message, "gray.band") {
		t.Errorf("message %q does not name the key", re.Message)
	}
	_, err = NewFromTOML("", "")
	wantCode(t, "empty TOML", err, ErrConfig)

	e, err := NewFromTOML(schema, "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	wantCode(t, "reload without a rule file", e.ReloadRules(), ErrReload)
	d, err := e.Decide(Txn{ID: 5, Amount: 1, Currency: "USD"})
	if err != nil {
		t.Fatal(err)
	}
	checkDecision(t, d, 5)
	if d.Action != ActionApprove || d.Tier != TierRules {
		t.Errorf("constant 0.1 rules engine: %+v", d)
	}

	// The example config as text, relative paths resolved against its directory.
	path := configPath(t)
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	e2, err := NewFromTOML(string(text), filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if _, err := e2.Decide(baseTxn(6)); err != nil {
		t.Fatal(err)
	}
	if err := e2.ReloadRules(); err != nil {
		t.Fatalf("ReloadRules: %v", err)
	}
}

func TestMetricsAndReload(t *testing.T) {
	e := openEngine(t)
	for i := range 10 {
		if _, err := e.Decide(baseTxn(uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	m, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := m["decisions"].(float64); n != 10 {
		t.Errorf("decisions = %v in %v", m["decisions"], m)
	}
	if _, ok := m["latency"].(map[string]any); !ok {
		t.Errorf("no latency in %v", m)
	}
	if err := e.ReloadRules(); err != nil {
		t.Fatalf("ReloadRules: %v", err)
	}
}

// rulesOnlyTOML: a constant rule score (0.1) and no fast tier, so the rule tier decides
// every transaction and the exposition's per-tier counts are exact.
const rulesOnlyTOML = `
[schema]
fields = [{ name = "amount", kind = "numeric", required = true }]
[rules.scorer]
kind = "constant"
probability = 0.1
`

func TestMetricsText(t *testing.T) {
	e, err := NewFromTOML(rulesOnlyTOML, "")
	if err != nil {
		t.Fatalf("NewFromTOML: %v", err)
	}
	for i := range 3 {
		d, err := e.Decide(Txn{ID: uint64(i + 1), Amount: 10, Currency: "USD"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Tier != TierRules {
			t.Fatalf("Decide %d: tier %q, want rules", i+1, d.Tier)
		}
	}
	text, err := e.MetricsText()
	if err != nil {
		t.Fatalf("MetricsText: %v", err)
	}
	for _, want := range []string{
		"risk_decisions_by_tier_total{tier=\"rules\"} 3\n",
		"risk_decisions_total{action=\"approve\"} 3\n",
		"# TYPE risk_decide_latency_seconds histogram\n",
		"risk_decide_latency_seconds_bucket{le=\"+Inf\",stage=\"total\"} 3\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("MetricsText has no %q:\n%s", want, text)
		}
	}
	if !strings.HasSuffix(strings.TrimRight(text, "\n"), "# EOF") {
		t.Errorf("MetricsText does not end with # EOF: ...%q", text[max(0, len(text)-200):])
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = e.MetricsText()
	wantCode(t, "MetricsText after Close", err, ErrHandle)
}

func TestUseAfterClose(t *testing.T) {
	e, err := NewFromPath(configPath(t))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := e.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	stale := e.rawHandle()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = e.Decide(baseTxn(1))
	wantCode(t, "Decide", err, ErrHandle)
	if errors.Is(err, ErrClosed) {
		t.Errorf("Decide after Close: %v is ErrClosed (RISK_ERR_CLOSED is for subscriptions)", err)
	}
	_, err = e.DecideJSON(goodJSON)
	wantCode(t, "DecideJSON", err, ErrHandle)
	_, errs := e.DecideBatch([]Txn{baseTxn(1), baseTxn(2)})
	wantCode(t, "DecideBatch[0]", errs[0], ErrHandle)
	wantCode(t, "DecideBatch[1]", errs[1], ErrHandle)
	_, err = e.Metrics()
	wantCode(t, "Metrics", err, ErrHandle)
	_, err = e.MetricsText()
	wantCode(t, "MetricsText", err, ErrHandle)
	wantCode(t, "ReloadRules", e.ReloadRules(), ErrHandle)
	_, _, err = e.Shutdown(0)
	wantCode(t, "Shutdown", err, ErrHandle)
	_, err = e.Subscribe()
	wantCode(t, "Subscribe", err, ErrHandle)

	// The library itself refuses the freed pointer.
	re := wantCode(t, "freed handle in C", decideRaw(stale, baseTxn(1)), ErrHandle)
	if !strings.Contains(re.Message, "not a live engine") {
		t.Errorf("message %q", re.Message)
	}

	// Another engine created since is not reached through the stale handle either.
	e2 := openEngine(t)
	wantCode(t, "freed handle after a new engine", decideRaw(stale, baseTxn(1)), ErrHandle)
	if _, err := e2.Decide(baseTxn(2)); err != nil {
		t.Fatal(err)
	}

	// A subscription of a closed engine: RISK_ERR_CLOSED at once instead of waiting.
	wantClosed(t, "Poll after engine Close", sub)
}

func TestDoubleClose(t *testing.T) {
	e, err := NewFromPath(configPath(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := e.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
}

func TestShutdown(t *testing.T) {
	e := openEngine(t)
	if _, err := e.Decide(baseTxn(1)); err != nil {
		t.Fatal(err)
	}
	drained, abandoned, err := e.Shutdown(0)
	if err != nil {
		t.Fatal(err)
	}
	// examples/risk.toml has no deep tier: nothing can have been queued.
	if drained != 0 || abandoned != 0 {
		t.Errorf("Shutdown = drained %d, abandoned %d; want 0, 0", drained, abandoned)
	}
	_, err = e.Decide(baseTxn(2))
	wantCode(t, "Decide after Shutdown", err, ErrShutDown)
	_, err = e.DecideJSON(goodJSON)
	wantCode(t, "DecideJSON after Shutdown", err, ErrShutDown)
	// The handle stays valid until Close; refused decisions are not counted.
	m, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := m["decisions"].(float64); n != 1 {
		t.Errorf("decisions = %v, want 1", m["decisions"])
	}
	if d, a, err := e.Shutdown(time.Millisecond); err != nil || d != 0 || a != 0 {
		t.Fatalf("second Shutdown = %d, %d, %v; want 0, 0, nil", d, a, err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// stuckDeepCfg is deepCfg with a deep dispatcher that never takes a batch during a test:
// it waits for maxBatch items or max_wait (an hour) after the oldest's enqueue. So fewer
// than maxBatch queued items stay queued until Shutdown, deterministically.
func stuckDeepCfg(maxBatch int) string {
	return deepConfig(fmt.Sprintf("budget_ms = 7200000\nmax_wait_ms = 3600000\nmax_batch = %d\n", maxBatch))
}

// Shutdown(0) abandons exactly the items still queued and drains none.
func TestShutdownAbandonCountsExactly(t *testing.T) {
	e, err := NewFromTOML(stuckDeepCfg(64), "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	sub, err := e.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range uint64(5) {
		d, err := e.Decide(Txn{ID: 1 + i, Entity: 50 + i, Amount: 5, Currency: "USD"})
		if err != nil || d.Escalation != EscalationEnqueued {
			t.Fatalf("Decide %d: %+v, %v", i, d, err)
		}
	}
	if enq, qlen, prod := verdicts(t, e); enq != 5 || qlen != 5 || prod != 0 {
		t.Fatalf("before Shutdown: enqueued %v, queued %v, verdicts %v; want 5, 5, 0", enq, qlen, prod)
	}
	drained, abandoned, err := e.Shutdown(0)
	if err != nil || drained != 0 || abandoned != 5 {
		t.Fatalf("Shutdown(0) = drained %d, abandoned %d, %v; want 0, 5", drained, abandoned, err)
	}
	if enq, qlen, prod := verdicts(t, e); enq != 5 || qlen != 0 || prod != 0 {
		t.Errorf("after Shutdown: enqueued %v, queued %v, verdicts %v; want 5, 0, 0", enq, qlen, prod)
	}
	if d, a, err := e.Shutdown(0); err != nil || d != 0 || a != 0 {
		t.Errorf("second Shutdown = %d, %d, %v; want 0, 0 (nothing counted twice)", d, a, err)
	}
	wantClosed(t, "Poll after an abandoning Shutdown", sub)
}

// max_batch 4 and six items: the first four go as one batch the moment the fourth is
// queued, the last two wait for two more or an hour. A 50 ms drain finds them still
// queued and abandons them: exact counts whatever the machine's speed (the 50 ms only
// decides how long the drain waits, not what it finds).
func TestShutdownDrainThatTimesOutAbandonsTheRest(t *testing.T) {
	e, err := NewFromTOML(stuckDeepCfg(4), "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	sub, err := e.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	firstFour := map[uint64]bool{}
	for i := range uint64(6) {
		d, err := e.Decide(Txn{ID: 1 + i, Entity: 50 + i, Amount: 5, Currency: "USD"})
		if err != nil || d.Escalation != EscalationEnqueued {
			t.Fatalf("Decide %d: %+v, %v", i, d, err)
		}
		if i < 4 {
			firstFour[d.Ticket] = true
		}
	}
	for k := range 4 {
		v := wantVerdict(t, fmt.Sprintf("verdict %d of the first batch", k), sub)
		if !firstFour[v.Ticket] {
			t.Fatalf("verdict for ticket %d, not one of the first four %v", v.Ticket, firstFour)
		}
		delete(firstFour, v.Ticket)
	}
	if _, qlen, _ := verdicts(t, e); qlen != 2 {
		t.Fatalf("queued %v, want 2", qlen)
	}
	drained, abandoned, err := e.Shutdown(50 * time.Millisecond)
	if err != nil || drained != 0 || abandoned != 2 {
		t.Fatalf("Shutdown(50ms) = drained %d, abandoned %d, %v; want 0, 2", drained, abandoned, err)
	}
	if enq, qlen, prod := verdicts(t, e); enq != 6 || qlen != 0 || prod != 4 {
		t.Errorf("after Shutdown: enqueued %v, queued %v, verdicts %v; want 6, 0, 4", enq, qlen, prod)
	}
	wantClosed(t, "Poll after the drain", sub)
}

// A drain that completes: nothing abandoned, each enqueued item gets exactly one verdict,
// and the report counts at most those produced after the shutdown began.
func TestShutdownDrainFinishesQueuedWork(t *testing.T) {
	e, err := NewFromTOML(deepCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	sub, err := e.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	tickets := map[uint64]bool{}
	for i := range uint64(5) {
		d, err := e.Decide(Txn{ID: 1 + i, Entity: 50 + i, Amount: 5, Currency: "USD"})
		if err != nil || d.Escalation != EscalationEnqueued {
			t.Fatalf("Decide %d: %+v, %v", i, d, err)
		}
		tickets[d.Ticket] = true
	}
	_, _, before := verdicts(t, e) // verdicts the shutdown cannot count as drained
	var drained, abandoned uint64
	// An hour-long drain: it must end because the queue emptied (else: hung).
	noHang(t, "draining Shutdown", func() { drained, abandoned, err = e.Shutdown(time.Hour) })
	if err != nil || abandoned != 0 || float64(drained) > 5-before {
		t.Fatalf("Shutdown(1h) = drained %d, abandoned %d, %v; want at most %v drained, 0 abandoned",
			drained, abandoned, err, 5-before)
	}
	if enq, qlen, prod := verdicts(t, e); enq != 5 || qlen != 0 || prod != 5 {
		t.Errorf("after Shutdown: enqueued %v, queued %v, verdicts %v; want 5, 0, 5", enq, qlen, prod)
	}
	for k := range 5 {
		v := wantVerdict(t, fmt.Sprintf("verdict %d", k), sub)
		if !tickets[v.Ticket] {
			t.Fatalf("verdict for ticket %d: unknown or repeated", v.Ticket)
		}
		delete(tickets, v.Ticket)
	}
	wantClosed(t, "Poll after the five verdicts", sub)
}

func TestConcurrentDecide(t *testing.T) {
	e := openEngine(t)
	const goroutines, perG = 64, 500
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := uint64(g+1) * 1_000_000
			tx := baseTxn(base)
			for i := range uint64(perG) {
				tx.ID = base + i
				tx.Features["txn_count_1h"] = Num(float64(i % 7))
				d, err := e.Decide(tx)
				if err != nil {
					errc <- fmt.Errorf("goroutine %d item %d: %w", g, i, err)
					return
				}
				if d.TxnID != tx.ID {
					errc <- fmt.Errorf("goroutine %d: got txn %d, want %d", g, d.TxnID, tx.ID)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	m, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := m["decisions"].(float64); n != goroutines*perG {
		t.Errorf("decisions = %v, want %d", m["decisions"], goroutines*perG)
	}
	t.Logf("by_tier %v fallbacks %v", m["by_tier"], m["fallbacks"])
}

// Close while goroutines are deciding: every call either succeeds or reports ErrHandle.
func TestCloseDuringDecides(t *testing.T) {
	e, err := NewFromPath(configPath(t))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	started := make(chan struct{}, 8)
	errc := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			ready := func() { once.Do(func() { started <- struct{}{} }) }
			defer ready()
			tx := baseTxn(uint64(g))
			for i := 0; ; i++ {
				_, err := e.Decide(tx)
				if i == 10 {
					ready()
				}
				if errors.Is(err, ErrHandle) {
					return
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	for range 8 {
		<-started
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func TestSubscriptionPoll(t *testing.T) {
	e := openEngine(t)
	sub, err := e.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	// This engine has no deep tier: RISK_ERR_CLOSED, at once even for a long Poll.
	v, ok, err := sub.Poll(0)
	if ok {
		t.Fatalf("Poll(0) = %+v", v)
	}
	re := wantCode(t, "Poll(0) without a deep tier", err, ErrClosed)
	if re.Name != "RISK_ERR_CLOSED" || re.Code != 13 || re.Message == "" {
		t.Errorf("ErrClosed error %#v", re)
	}
	if errors.Is(err, ErrHandle) || errors.Is(err, ErrEmpty) {
		t.Errorf("%v matches ErrHandle or ErrEmpty", err)
	}
	wantClosed(t, "Poll(1h) without a deep tier", sub)
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, _, err = sub.Poll(0)
	wantCode(t, "Poll after Close", err, ErrHandle)
}

// deepCfg has a deep tier that always answers (fast score 0.5 is in the gray band).
// Nothing in it depends on how fast the machine is: the fast deadline is the largest
// allowed (60 s; an inline answer past it would fall back to the rule score 0.1, outside
// the band, and not be enqueued) and the deep budget an hour (no verdict falls back to a
// timeout).
var deepCfg = deepConfig("budget_ms = 3600000\n")

// deepConfig is that engine with the given [deep] table.
func deepConfig(deepTable string) string {
	return `
[schema]
fields = [{ name = "amount", kind = "numeric", required = true }]
[rules.scorer]
kind = "constant"
probability = 0.1
[fast]
deadline_ms = 60000
[fast.scorer]
kind = "constant"
probability = 0.5
[gray]
band = [0.3, 0.7]
[deep]
` + deepTable + `[deep.scorer]
kind = "constant"
probability = 0.9
`
}

// A deep tier that always answers: a gray-zone decision is enqueued and its verdict
// arrives on the subscription (Poll blocks until then, bounded by its timeout).
func TestSubscriptionVerdict(t *testing.T) {
	e, err := NewFromTOML(deepCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	sub, err := e.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	d, err := e.Decide(Txn{ID: 77, Entity: 8, Amount: 5, Currency: "USD"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Escalation != EscalationEnqueued || d.Ticket == 0 {
		t.Fatalf("not escalated: %+v", d)
	}
	v := wantVerdict(t, "Poll for the verdict", sub) // returns when it arrives
	if v.Ticket != d.Ticket || v.TxnID != 77 || v.Entity != 8 {
		t.Errorf("verdict %+v for decision %+v", v, d)
	}
	if v.Source != SourceModel || v.Failure != FailureNone || math.Abs(float64(v.Score)-0.9) > 1e-6 {
		t.Errorf("verdict %+v", v)
	}
	t.Logf("verdict: %+v", v)
	if _, _, err := sub.Poll(0); err != nil {
		t.Fatalf("Poll(0) after the only verdict: %v", err)
	}
	// The one verdict was counted before it was sent, so before this Shutdown began:
	// nothing is left to drain or abandon.
	var drained, abandoned uint64
	noHang(t, "Shutdown(1h) with nothing queued", func() { drained, abandoned, err = e.Shutdown(time.Hour) })
	if err != nil || drained != 0 || abandoned != 0 {
		t.Fatalf("Shutdown = drained %d, abandoned %d, %v; want 0, 0", drained, abandoned, err)
	}
}

// Nothing in time is ok=false with a nil error, after waiting out the timeout (at least
// the timeout: a floor no machine's speed can break; there is no ceiling).
func TestSubscriptionPollTimeout(t *testing.T) {
	e, err := NewFromTOML(deepCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	sub, err := e.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if v, ok, err := sub.Poll(0); ok || err != nil {
		t.Fatalf("Poll(0) = %+v, %v, %v; want nothing", v, ok, err)
	}
	start := time.Now()
	if v, ok, err := sub.Poll(120 * time.Millisecond); ok || err != nil {
		t.Fatalf("Poll(120ms) = %+v, %v, %v; want nothing", v, ok, err)
	}
	if d := time.Since(start); d < 120*time.Millisecond {
		t.Errorf("Poll(120ms) returned after %v, before its timeout", d)
	}
}

// Verdicts delivered before the engine is closed are still read, then ErrClosed. Knowing
// the verdict is buffered without sleeping: a second subscription (waiter) blocks until it
// receives it. The deep tier hands a verdict to every subscriber under one lock that
// shutdown also takes, so once waiter has it, sub has it too.
func TestSubscriptionBufferedThenClosed(t *testing.T) {
	e, err := NewFromTOML(deepCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := e.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	waiter, err := e.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	d, err := e.Decide(Txn{ID: 78, Entity: 9, Amount: 5, Currency: "USD"})
	if err != nil || d.Escalation != EscalationEnqueued {
		t.Fatalf("Decide: %+v, %v", d, err)
	}
	if w := wantVerdict(t, "waiting for the verdict", waiter); w.Ticket != d.Ticket {
		t.Fatalf("waiter got %+v for decision %+v", w, d)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	v, ok, err := sub.Poll(0) // already buffered: no waiting needed
	if !ok || err != nil || v.Ticket != d.Ticket {
		t.Fatalf("buffered verdict: %+v, %v, %v", v, ok, err)
	}
	wantClosed(t, "Poll after the buffered verdict", sub)
	wantClosed(t, "the other subscription after its verdict", waiter)
}

// After Shutdown (the engine not yet closed) no verdict will ever come: ErrClosed, at
// once, for a Poll made after it and for one already waiting (an hour) when it happened.
// The waiting goroutine signals right before its Poll; whether Shutdown then lands while
// it waits inside the library or just before it gets there, the answer is the same.
func TestPollAfterShutdown(t *testing.T) {
	e, err := NewFromTOML(deepCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	sub, err := e.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	sub2, err := e.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Close()
	polling := make(chan struct{})
	res := make(chan pollResult, 1)
	go func() {
		close(polling)
		var r pollResult
		r.v, r.ok, r.err = sub2.Poll(time.Hour)
		res <- r
	}()
	<-polling
	if d, a, err := e.Shutdown(0); err != nil || d != 0 || a != 0 {
		t.Fatalf("Shutdown(0) = %d, %d, %v; want 0, 0 (nothing was queued)", d, a, err)
	}
	select {
	case r := <-res:
		if r.ok {
			t.Fatalf("waiting Poll: verdict %+v after Shutdown", r.v)
		}
		wantCode(t, "Poll waiting during Shutdown", r.err, ErrClosed)
	case <-time.After(hangAfter):
		t.Fatalf("Poll(1h) waiting during Shutdown: hung (still running after %v)", hangAfter)
	}
	wantClosed(t, "Poll after Shutdown", sub)
	wantClosed(t, "Poll again after Shutdown", sub2)
}

// A Poll already waiting (an hour) when the engine is closed ends with ErrClosed once the
// deep tier stops (same reasoning as TestPollAfterShutdown: no timing involved).
func TestPollWaitingWhenTheEngineIsClosed(t *testing.T) {
	e, err := NewFromTOML(deepCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := e.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	polling := make(chan struct{})
	res := make(chan pollResult, 1)
	go func() {
		close(polling)
		var r pollResult
		r.v, r.ok, r.err = sub.Poll(time.Hour)
		res <- r
	}()
	<-polling
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		if r.ok {
			t.Fatalf("verdict %+v from an engine that decided nothing", r.v)
		}
		wantCode(t, "Poll waiting during Close", r.err, ErrClosed)
	case <-time.After(hangAfter):
		t.Fatalf("Poll(1h) waiting during engine Close: hung (still running after %v)", hangAfter)
	}
}

// A long poll straight through the C ABI (not sliced, an hour) holds up nothing else: the
// library takes no global lock during calls, so building, using and freeing other engines
// completes while it waits (else: reported as hung), and the poll itself ends only when
// its engine is closed (RISK_ERR_CLOSED).
//
// The poller signals right before its call; the test cannot see it enter the library. If
// the other work ran before it got there, the test would pass without testing anything,
// never fail spuriously; the work is repeated so that the poll is in the library for
// nearly all of it.
func TestLongLibraryPollBlocksNothing(t *testing.T) {
	e, err := NewFromTOML(deepCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	sub, err := e.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	res := make(chan int, 1)
	polling := make(chan struct{})
	go func() {
		close(polling)
		res <- sub.pollRaw(3_600_000)
	}()
	<-polling
	path := configPath(t)
	var workErr error
	noHang(t, "building, using and freeing engines during a long poll", func() {
		for i := range 20 {
			other, err := NewFromPath(path)
			if err != nil {
				workErr = err
				return
			}
			s2, err := other.Subscribe()
			if err == nil {
				_, err = other.Decide(baseTxn(uint64(i)))
			}
			if err == nil {
				if _, _, perr := s2.Poll(0); !errors.Is(perr, ErrClosed) {
					err = fmt.Errorf("Poll(0) without a deep tier: %v, want ErrClosed", perr)
				}
			}
			if s2 != nil {
				_ = s2.Close()
			}
			_ = other.Close()
			if err != nil {
				workErr = err
				return
			}
		}
	})
	if workErr != nil {
		t.Fatal(workErr)
	}
	select {
	case rc := <-res:
		t.Fatalf("the hour-long raw poll returned %s before its engine was closed", CodeName(rc))
	default: // still waiting: only closing its engine ends it
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case rc := <-res:
		if rc != codeClosed {
			t.Errorf("raw poll after engine Close: %s, want RISK_ERR_CLOSED", CodeName(rc))
		}
	case <-time.After(hangAfter):
		t.Fatalf("raw poll(1h) after engine Close: hung (still running after %v)", hangAfter)
	}
}

func TestUnknownCodes(t *testing.T) {
	if CodeUnknown != 255 || MaxFeatures != 4096 || MaxBatch != 65536 {
		t.Fatalf("constants %d %d %d", CodeUnknown, MaxFeatures, MaxBatch)
	}
	if got := tierName(CodeUnknown); got != TierUnknown {
		t.Errorf("tier 255 = %q", got)
	}
	if got := fallbackName(CodeUnknown); got != FallbackUnknown {
		t.Errorf("fallback 255 = %q", got)
	}
	if got := sourceName(CodeUnknown); got != SourceUnknown {
		t.Errorf("source 255 = %q", got)
	}
	if got := failureName(CodeUnknown); got != FailureUnknown {
		t.Errorf("failure 255 = %q", got)
	}
	// The binding's fallback names are the library's (risk_fallback_name), 255 included.
	for code := range uint8(8) {
		if got, want := fallbackName(code), Fallback(libFallbackName(code)); got != want {
			t.Errorf("fallback %d = %q, library says %q", code, got, want)
		}
	}
	if got := libFallbackName(CodeUnknown); got != string(FallbackUnknown) {
		t.Errorf("library fallback 255 = %q", got)
	}
	if tierName(2) != TierStatic || sourceName(2) != SourceGlobalPrior || failureName(3) != FailureSaturated || failureName(4) != FailureCircuitOpen {
		t.Error("known codes")
	}
	if CodeName(13) != "RISK_ERR_CLOSED" || CodeName(14) != "RISK_ERR_AUDIT" || CodeName(15) != "RISK_ERR_DEPLOY" || CodeName(16) != "RISK_ERR_STATE" || CodeName(17) != "RISK_ERR_UNKNOWN(17)" {
		t.Errorf("CodeName: %q %q %q %q %q", CodeName(13), CodeName(14), CodeName(15), CodeName(16), CodeName(17))
	}
	if ErrAudit.Code != 14 || ErrAudit.Name != "RISK_ERR_AUDIT" {
		t.Errorf("ErrAudit = %+v", ErrAudit)
	}
}

// Closing a subscription interrupts a Poll waiting on it. The goroutine signals right
// before its Poll; whether Close lands while the Poll waits or just before it starts, the
// Poll reports an ErrHandle error, so the outcome does not depend on timing.
func TestSubscriptionCloseInterruptsPoll(t *testing.T) {
	e, err := NewFromTOML(deepCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	sub, err := e.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	polling := make(chan struct{})
	res := make(chan pollResult, 1)
	go func() {
		close(polling)
		var r pollResult
		r.v, r.ok, r.err = sub.Poll(time.Hour)
		res <- r
	}()
	<-polling
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		if r.ok {
			t.Fatalf("verdict %+v from an engine that decided nothing", r.v)
		}
		wantCode(t, "Poll interrupted by Close", r.err, ErrHandle)
	case <-time.After(hangAfter):
		t.Fatalf("Poll(1h) kept waiting after Close: hung (still running after %v)", hangAfter)
	}
}

func TestMillis(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want uint64
	}{
		{-time.Second, 0}, {0, 0}, {time.Nanosecond, 1}, {time.Millisecond, 1},
		{1500 * time.Microsecond, 2}, {time.Second, 1000}, {100 * 24 * time.Hour, math.MaxUint32},
	} {
		if got := uint64(millis(c.d)); got != c.want {
			t.Errorf("millis(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

// benchTxn is the transaction of the Rust criterion bench (benches/ffi.rs), so that the
// numbers compare: BenchmarkDecide ~ ffi/c_abi_decide, BenchmarkDecideJSON ~
// ffi/c_abi_decide_json, same engine (examples/risk.toml, unchanged).
func benchTxn() Txn {
	return Txn{
		ID:       7,
		Entity:   42,
		Time:     time.UnixMilli(1767571200000),
		Amount:   42.5,
		Currency: "USD",
		MCC:      5411,
		Country:  "US",
		Channel:  ChannelPOS,
		Device:   9,
		Features: map[string]Feature{
			"txn_count_1h": Num(3),
			"hour":         Num(14),
			"device_new":   Num(0),
		},
	}
}

const benchJSON = `{"id": 7, "entity": 42, "timestamp_ms": 1767571200000, "amount": 42.5, ` +
	`"currency": "USD", "mcc": 5411, "country": "US", "channel": "pos", "device": 9, ` +
	`"features": {"txn_count_1h": 3, "hour": 14, "device_new": 0}}`

// Both benchmarks report engine-ns/op, the engine's own mean total time per call
// (Decision.TotalTime), so the binding's and the C ABI's overhead is ns/op - engine-ns/op.

func BenchmarkDecide(b *testing.B) {
	e := openEngine(b)
	tx := benchTxn()
	var engineNs time.Duration
	n := 0
	for b.Loop() {
		d, err := e.Decide(tx)
		if err != nil {
			b.Fatal(err)
		}
		engineNs += d.TotalTime
		n++
	}
	b.ReportMetric(float64(engineNs.Nanoseconds())/float64(n), "engine-ns/op")
}

func BenchmarkDecideJSON(b *testing.B) {
	e := openEngine(b)
	var engineNs time.Duration
	n := 0
	for b.Loop() {
		d, err := e.DecideJSON(benchJSON)
		if err != nil {
			b.Fatal(err)
		}
		engineNs += d.TotalTime
		n++
	}
	b.ReportMetric(float64(engineNs.Nanoseconds())/float64(n), "engine-ns/op")
}
