// Deep-tier verdicts: a subscription, polled in short slices so that Close interrupts it.

package risk

/*
#include "gorisk.h"

static gorisk_res gorisk_subscribe(void *e) {
	risk_subscription *s = NULL;
	gorisk_res r = gorisk_done(risk_engine_subscribe((const risk_engine *)e, &s));
	r.ptr = s;
	return r;
}

static gorisk_res gorisk_poll(void *s, uint32_t timeout_ms, risk_verdict *v) {
	return gorisk_done(risk_subscription_poll((const risk_subscription *)s, timeout_ms, v));
}

static void gorisk_subscription_free(void *s) { risk_subscription_free((risk_subscription *)s); }
*/
import "C"

import (
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// Subscribe subscribes to deep-tier verdicts from now on. A slow reader loses verdicts
// (the channel is bounded) rather than blocking the deep tier.
func (e *Engine) Subscribe() (*Subscription, error) {
	r, err := e.call(func(h unsafe.Pointer) C.gorisk_res { return C.gorisk_subscribe(h) })
	if err != nil {
		return nil, err
	}
	s := &Subscription{h: r.ptr, eng: e}
	s.cleanup = runtime.AddCleanup(s, func(h unsafe.Pointer) { C.gorisk_subscription_free(h) }, r.ptr)
	return s, nil
}

// Subscription receives deep-tier verdicts. It is safe for concurrent use.
type Subscription struct {
	mu sync.RWMutex
	h  unsafe.Pointer
	// eng keeps the engine reachable (an unreachable one is freed by its cleanup, which
	// would end the verdicts) while the subscription is.
	eng     *Engine
	cleanup runtime.Cleanup
}

// pollSlice bounds each risk_subscription_poll call. The library itself blocks nothing
// else during a poll; the slices only let Close (which waits for this Subscription's calls
// in flight) interrupt a waiting Poll promptly.
const pollSlice = 20 * time.Millisecond

// Poll waits up to timeout (0 = only look) for the next verdict:
//
//   - (v, true, nil): a verdict;
//   - (Verdict{}, false, nil): none came in time (RISK_ERR_EMPTY): poll again;
//   - (Verdict{}, false, err) with errors.Is(err, ErrClosed): none ever will (RISK_ERR_CLOSED,
//     returned at once): the engine has no deep tier, or was closed and the verdicts it had
//     already delivered have been read. Stop polling;
//   - (Verdict{}, false, err) with errors.Is(err, ErrHandle): the Subscription was closed
//     (also what a Poll waiting in another goroutine returns when Close interrupts it).
func (s *Subscription) Poll(timeout time.Duration) (v Verdict, ok bool, err error) {
	deadline := time.Now().Add(max(timeout, 0))
	for {
		wait := min(max(time.Until(deadline), 0), pollSlice)
		v, ok, err := s.pollOnce(wait)
		if ok || err != nil || wait <= 0 {
			return v, ok, err
		}
		if time.Until(deadline) <= 0 {
			return Verdict{}, false, nil
		}
	}
}

// pollOnce makes one risk_subscription_poll call of at most wait (rounded up to whole
// milliseconds).
func (s *Subscription) pollOnce(wait time.Duration) (v Verdict, ok bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.h == nil {
		return Verdict{}, false, errSubscriptionClosed
	}
	var cv C.risk_verdict
	r := C.gorisk_poll(s.h, millis(wait), &cv)
	switch r.rc {
	case C.RISK_OK:
		return verdictFromC(&cv), true, nil
	case C.RISK_ERR_EMPTY:
		takeMsg(r)
		return Verdict{}, false, nil
	default: // RISK_ERR_CLOSED included
		return Verdict{}, false, errorOf(r)
	}
}

// Close releases the subscription; a Poll waiting in another goroutine returns an
// ErrHandle error (within about 20 ms). Calling it again is a no-op.
func (s *Subscription) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == nil {
		return nil
	}
	s.cleanup.Stop()
	C.gorisk_subscription_free(s.h)
	s.h = nil
	return nil
}

// pollRaw makes one risk_subscription_poll call of ms milliseconds, not sliced (for the
// test that a long library poll blocks nothing else), and returns its result code.
func (s *Subscription) pollRaw(ms uint32) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var cv C.risk_verdict
	r := C.gorisk_poll(s.h, C.uint32_t(ms), &cv)
	takeMsg(r)
	return int(r.rc)
}
