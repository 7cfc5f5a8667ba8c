// Deciding: one transaction, JSON, batches, bad inputs, concurrency, code names, and the
// decide benchmarks.

package risk

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

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

func TestExplainOnRequest(t *testing.T) {
	e := openEngineNoDeadline(t)
	tx := baseTxn(1)
	d, err := e.Decide(tx)
	if err != nil {
		t.Fatal(err)
	}
	why, err := e.Explain(tx)
	if err != nil {
		t.Fatal(err)
	}
	if len(why) == 0 || len(why) > 8 {
		t.Fatalf("want the model's reasons, got %v", why)
	}
	for _, r := range why {
		if !strings.HasPrefix(r.Code, "xgb:") {
			t.Errorf("not a model reason: %+v", r)
		}
	}
	// The decision's model reasons, when it carried them, are the same ones in order.
	k := 0
	for _, r := range d.Reasons {
		if strings.HasPrefix(r.Code, "xgb:") {
			if k >= len(why) || why[k] != r {
				t.Errorf("decision reason %d %+v, explain gave %v", k, r, why)
			}
			k++
		}
	}
	bad := baseTxn(2)
	bad.Amount = math.NaN()
	_, err = e.Explain(bad)
	if re := wantCode(t, "explain NaN amount", err, ErrTransaction); !strings.Contains(re.Message, "amount") {
		t.Errorf("message %q does not mention amount", re.Message)
	}
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
