// The engine's lifecycle: configuration errors, metrics and reload, use after Close,
// Shutdown (abandon, drain), Close during decides.

package risk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestConfigErrors(t *testing.T) {
	_, err := NewFromPath("/nonexistent/risk.toml")
	re := wantCode(t, "missing file", err, ErrConfig)
	if !strings.Contains(re.Message, "/nonexistent/risk.toml") {
		t.Errorf("message %q does not name the file", re.Message)
	}
	_, err = NewFromPath("a\x00b")
	wantCode(t, "NUL path", err, ErrInvalid)

	schema := rulesOnlyTOML
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

// TestNoSecretReachesAnError: a Redis password in a URL or in its own key, and a
// pseudonymisation key too short to be one, fail the build with an error that names the
// key or the server and never the value (message, Error() and %+v).
func TestNoSecretReachesAnError(t *testing.T) {
	const secret = "Go-Secret-Value-Never-Shown-5"
	cases := []string{
		"[state]\n[state.redis]\nurl = \"redis://risk:" + secret + "@127.0.0.1:1/\"\ntimeout_ms = 200\n",
		"[state]\n[state.redis]\nurl = \"redis://127.0.0.1:1/\"\nusername = \"risk\"\npassword = \"" + secret + "\"\ntimeout_ms = 200\n",
		"[privacy]\nkey = \"" + secret[:12] + "\"\n",
	}
	for i, extra := range cases {
		_, err := NewFromTOML(rulesOnlyTOML+"\n"+extra, "")
		re := wantCode(t, "secret case", err, ErrConfig)
		text := re.Message + err.Error() + fmt.Sprintf("%+v %#v", err, err)
		if strings.Contains(text, secret[:12]) {
			t.Errorf("case %d leaks the secret: %s", i, text)
		}
	}
}
