// Deep-tier verdicts through a Subscription: polling, timeouts, buffered verdicts, Close
// and Shutdown while polling.

package risk

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
)

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
