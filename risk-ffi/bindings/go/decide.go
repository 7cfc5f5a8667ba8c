// Deciding: one transaction, one as JSON, a batch (in chunks of MaxBatch); a model's
// reasons on request.

package risk

/*
#include "gorisk.h"

static gorisk_res gorisk_decide(void *e, const risk_txn *t, risk_decision *d) {
	return gorisk_done(risk_engine_decide((const risk_engine *)e, t, d));
}

static gorisk_res gorisk_explain(void *e, const risk_txn *t, risk_reason *out, uint32_t *n) {
	return gorisk_done(risk_engine_explain((const risk_engine *)e, t, out, n));
}

static gorisk_res gorisk_decide_json(void *e, const char *json, size_t len, risk_decision *d) {
	return gorisk_done(risk_engine_decide_json((const risk_engine *)e, (const uint8_t *)json, len, d));
}

// On RISK_OK, n is the number of failed items; when exactly one failed, err is its message
// (the library keeps one message per thread, so with several failures it is ambiguous).
static gorisk_res gorisk_decide_batch(void *e, const risk_txn *t, size_t n, risk_decision *out,
                                      risk_result *results) {
	risk_result rc = risk_engine_decide_batch((const risk_engine *)e, t, n, out, results);
	gorisk_res r = gorisk_done(rc);
	if (rc == RISK_OK) {
		size_t failed = 0;
		for (size_t i = 0; i < n; i++) failed += results[i] != RISK_OK;
		r.n = failed;
		if (failed == 1) {
			const char *m = risk_last_error();
			r.err = strdup(m ? m : "");
		}
	}
	return r;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Decide decides one transaction.
func (e *Engine) Decide(t Txn) (Decision, error) {
	extra, err := txnExtra(&t)
	if err != nil {
		return Decision{}, err
	}
	a := getArena(sizeofDecision + sizeofTxn + extra)
	defer putArena(a)
	d := (*C.risk_decision)(a.alloc(sizeofDecision, 8))
	ct := (*C.risk_txn)(a.alloc(sizeofTxn, 8))
	a.fillTxn(ct, &t)
	if _, err := e.call(func(h unsafe.Pointer) C.gorisk_res { return C.gorisk_decide(h, ct, d) }); err != nil {
		return Decision{}, err
	}
	return fromC(d), nil
}

// Explain returns the fast tier's reasons for t, on request (a case tool, a dispute): the
// model version t is routed to computes them whatever its decisions carry (a tree model's
// exact SHAP contributions), most important first. The features are used as given. Empty
// when no model serves t or its explanation failed; a bad transaction fails as in Decide.
func (e *Engine) Explain(t Txn) ([]Reason, error) {
	extra, err := txnExtra(&t)
	if err != nil {
		return nil, err
	}
	a := getArena(C.RISK_MAX_REASONS*C.sizeof_risk_reason + 16 + sizeofTxn + extra)
	defer putArena(a)
	why := (*[C.RISK_MAX_REASONS]C.risk_reason)(a.alloc(C.RISK_MAX_REASONS*C.sizeof_risk_reason, 8))
	n := (*C.uint32_t)(a.alloc(4, 4))
	ct := (*C.risk_txn)(a.alloc(sizeofTxn, 8))
	a.fillTxn(ct, &t)
	if _, err := e.call(func(h unsafe.Pointer) C.gorisk_res { return C.gorisk_explain(h, ct, &why[0], n) }); err != nil {
		return nil, err
	}
	out := make([]Reason, min(int(*n), C.RISK_MAX_REASONS))
	for i := range out {
		out[i] = Reason{Code: reasonName(uint32(why[i].code)), Weight: float32(why[i].weight)}
	}
	return out, nil
}

// DecideJSON decides a transaction given as JSON: {"id", "entity", "timestamp_ms",
// "amount", "currency", "mcc", "country", "channel", "device", "merchant", "ip", "email",
// "features": {name: number | string | null}}; amount and currency are required, unknown
// keys rejected.
func (e *Engine) DecideJSON(js string) (Decision, error) {
	a := getArena(sizeofDecision)
	defer putArena(a)
	d := (*C.risk_decision)(a.alloc(sizeofDecision, 8))
	_, err := e.call(func(h unsafe.Pointer) C.gorisk_res {
		return C.gorisk_decide_json(h, nonNil(js), C.size_t(len(js)), d)
	})
	runtime.KeepAlive(js)
	if err != nil {
		return Decision{}, err
	}
	return fromC(d), nil
}

// DecideBatch decides many transactions. Both slices have len(txns) elements: errs[i] is
// nil when decisions[i] is valid. A failure of the whole call (a closed engine) is reported
// in every errs[i]. Batches larger than MaxBatch are split.
//
// The C ABI keeps a single error message per call: when several items of one chunk fail,
// their errors carry the right Code but a generic Message.
func (e *Engine) DecideBatch(txns []Txn) ([]Decision, []error) {
	decs := make([]Decision, len(txns))
	errs := make([]error, len(txns))
	if len(txns) == 0 {
		return decs, errs
	}
	err := e.with(func(h unsafe.Pointer) error {
		for start := 0; start < len(txns); start += MaxBatch {
			end := min(start+MaxBatch, len(txns))
			decideChunk(h, txns[start:end], decs[start:end], errs[start:end], start)
		}
		return nil
	})
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
	}
	return decs, errs
}

func decideChunk(h unsafe.Pointer, txns []Txn, decs []Decision, errs []error, base int) {
	idx := make([]int, 0, len(txns))
	var extra uintptr
	for i := range txns {
		x, err := txnExtra(&txns[i])
		if err != nil {
			errs[i] = err
			continue
		}
		idx = append(idx, i)
		extra += x
	}
	m := uintptr(len(idx))
	if m == 0 {
		return
	}
	a := getArena(m*(sizeofDecision+sizeofTxn+sizeofResult) + extra + 16)
	defer putArena(a)
	outs := unsafe.Slice((*C.risk_decision)(a.alloc(m*sizeofDecision, 8)), m)
	cts := unsafe.Slice((*C.risk_txn)(a.alloc(m*sizeofTxn, 8)), m)
	results := unsafe.Slice((*C.risk_result)(a.alloc(m*sizeofResult, 8)), m)
	for j, i := range idx {
		a.fillTxn(&cts[j], &txns[i])
	}
	r := C.gorisk_decide_batch(h, &cts[0], C.size_t(m), &outs[0], &results[0])
	if err := check(r); err != nil {
		for _, i := range idx {
			errs[i] = err
		}
		return
	}
	only := takeMsg(r) // set when exactly one item failed
	for j, i := range idx {
		code := int(results[j])
		if code == codeOK {
			decs[i] = fromC(&outs[j])
			continue
		}
		msg := only
		if r.n > 1 {
			msg = fmt.Sprintf("batch item %d rejected (%d items failed; the C ABI reports one "+
				"message per call, decide the item alone for details)", base+i, int(r.n))
		}
		errs[i] = newError(code, msg)
	}
}

// decideRaw calls risk_engine_decide with any handle value, a freed one too (for the test
// that the library itself refuses freed handles).
func decideRaw(h unsafe.Pointer, t Txn) error {
	extra, err := txnExtra(&t)
	if err != nil {
		return err
	}
	a := getArena(sizeofDecision + sizeofTxn + extra)
	defer putArena(a)
	d := (*C.risk_decision)(a.alloc(sizeofDecision, 8))
	ct := (*C.risk_txn)(a.alloc(sizeofTxn, 8))
	a.fillTxn(ct, &t)
	return check(C.gorisk_decide(h, ct, d))
}
