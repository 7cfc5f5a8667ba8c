package risk

/*
#include "gorisk.h"

static gorisk_res gorisk_report_label(void *e, uint64_t txn, bool fraud, int64_t at_ms) {
	size_t reached = 0;
	gorisk_res r = gorisk_done(risk_engine_report_label((const risk_engine *)e, txn, fraud, at_ms, &reached));
	r.n = reached;
	return r;
}

static gorisk_res gorisk_list_add(void *e, const char *list, const char *value, int64_t expires_at_ms) {
	return gorisk_done(risk_engine_list_add((const risk_engine *)e, list, value, expires_at_ms));
}

static gorisk_res gorisk_list_remove(void *e, const char *list, const char *value) {
	bool removed = false;
	gorisk_res r = gorisk_done(risk_engine_list_remove((const risk_engine *)e, list, value, &removed));
	r.a = removed;
	return r;
}

static gorisk_res gorisk_list_contains(void *e, const char *list, const char *value) {
	bool hit = false;
	gorisk_res r = gorisk_done(risk_engine_list_contains((const risk_engine *)e, list, value, &hit));
	r.a = hit;
	return r;
}

static gorisk_res gorisk_lists_reload(void *e) {
	return gorisk_done(risk_engine_lists_reload((const risk_engine *)e));
}

static gorisk_res gorisk_state_snapshot(void *e, const char *path) {
	return gorisk_done(risk_engine_state_snapshot((const risk_engine *)e, path));
}

static gorisk_res gorisk_state_json(void *e, char *buf, size_t cap) {
	size_t len = 0;
	gorisk_res r = gorisk_done(risk_engine_state_json((const risk_engine *)e, buf, cap, &len));
	r.n = len;
	return r;
}
*/
import "C"

import (
	"time"
	"unsafe"
)

// Entity state. An engine whose risk.toml has a [state] section computes velocity and
// label features ([[state.features]], e.g. a card's transactions in the hour before)
// from the raw transactions it decides, before the rules run, on its own copy of each
// transaction (a value the caller set in such a field is replaced; the caller's Txn is
// never modified). Windows follow Txn.Time: a transaction with the zero Time reads and
// writes no state. Keys are Txn.Entity (card), Device, Merchant, IP and Email.
//
// Lists ([state.lists.<name>], key = "device", "merchant", "ip", "email", ...) are read by
// rules as `device in list.blocked_devices`; ListAdd and ListRemove change them for the
// next decision. A list of device or card ids holds decimal ids ("7").
//
// Every refusal is ErrState (RISK_ERR_STATE) with the library's reason, on an engine
// without [state] too.

// First buffer for the state report (a few counters, a row per key source, a count per
// list).
const stateCap = 1024

// StateReport is the entity state's counters (risk_engine_state_json).
type StateReport struct {
	// Stats are the counters since the engine started.
	Stats StateStats `json:"stats"`
	// Memory has one row per key source that holds features.
	Memory []StateMemory `json:"memory"`
	// PendingLabels is the transactions remembered for ReportLabel.
	PendingLabels uint64 `json:"pending_labels"`
	// Lists holds the live entries of each list, by name.
	Lists map[string]uint64 `json:"lists"`
}

// StateStats are the entity state's counters.
type StateStats struct {
	// Updates is the transactions that read and wrote state (those with a Time).
	Updates uint64 `json:"updates"`
	// NoTime is the transactions without an event time (no state read or written).
	NoTime uint64 `json:"no_time"`
	// Late is the events too far behind their key's clock, counted at the clock.
	Late uint64 `json:"late"`
	// Labels is the labels that changed a transaction's label.
	Labels uint64 `json:"labels"`
	// LabelsUnknown is the labels for transactions the engine did not remember.
	LabelsUnknown uint64 `json:"labels_unknown"`
	// ListHits is the list lookups that found a live entry.
	ListHits uint64 `json:"list_hits"`
	// A state store's counters (0 for the in-process store; absent from older libraries):
	// Degraded is the decisions whose features are missing because the store failed;
	// StoreTimeouts and StoreErrors the store calls that timed out or failed otherwise;
	// StoreSkipped the decisions that skipped the store while it was down; StoreShed the
	// background writes shed by a full queue.
	Degraded      uint64 `json:"degraded"`
	StoreTimeouts uint64 `json:"store_timeouts"`
	StoreErrors   uint64 `json:"store_errors"`
	StoreSkipped  uint64 `json:"store_skipped"`
	StoreShed     uint64 `json:"store_shed"`
}

// StateMemory is the memory of one key source.
type StateMemory struct {
	// Source is the key source: "entity", "device", "merchant", "ip", "email", "country"
	// or a categorical field's name.
	Source string `json:"source"`
	// Keys held now (at most [state] max_keys), and the bytes each takes.
	Keys        uint64 `json:"keys"`
	BytesPerKey uint64 `json:"bytes_per_key"`
}

// ReportLabel reports the label of transaction txnID (the ID it was decided with): fraud
// true for a chargeback or a confirmed fraud, false to retract an earlier true; at is
// when it became known, not before the transaction (risk_engine_report_label; millisecond
// precision, the zero Time is sent as 0 ms). Label features (agg = "fraud_count" or
// "fraud_rate" with a delay) count it once the delay has passed. It returns how many
// label windows the label reached (0 when the transaction's bucket has already left
// every window).
//
// Errors: ErrState for a transaction the engine does not remember (never decided, decided
// with ID 0, or evicted), a label dated before its transaction, no label feature, or no
// [state].
func (e *Engine) ReportLabel(txnID uint64, fraud bool, at time.Time) (int, error) {
	var ms int64
	if !at.IsZero() {
		ms = at.UnixMilli()
	}
	r, err := e.call(func(h unsafe.Pointer) C.gorisk_res {
		return C.gorisk_report_label(h, C.uint64_t(txnID), C.bool(fraud), C.int64_t(ms))
	})
	if err != nil {
		return 0, err
	}
	return int(r.n), nil
}

// ListAdd adds value to list (or re-dates it), live until expires (risk_engine_list_add;
// millisecond precision). The zero Time never expires; any other time is an expiry, and
// one in the past is not live (a time at or before the Unix epoch, which the C ABI would
// read as "never", is sent as 1 ms). Effective on the next decision; journalled and
// synced before it returns when [state] dir is set.
//
// Errors: ErrState for an unknown list, a value that cannot be one of its keys (not a
// decimal id for a device list), or no [state]; ErrInvalid for a string holding a NUL
// byte.
func (e *Engine) ListAdd(list, value string, expires time.Time) error {
	var exp int64
	if !expires.IsZero() {
		exp = max(expires.UnixMilli(), 1)
	}
	var cs cStrings
	defer cs.free()
	cl, cv, err := listArgs(&cs, list, value)
	if err != nil {
		return err
	}
	_, err = e.call(func(h unsafe.Pointer) C.gorisk_res {
		return C.gorisk_list_add(h, cl, cv, C.int64_t(exp))
	})
	return err
}

// ListRemove removes value from list and reports whether it was there
// (risk_engine_list_remove). Errors as for ListAdd.
func (e *Engine) ListRemove(list, value string) (removed bool, err error) {
	var cs cStrings
	defer cs.free()
	cl, cv, err := listArgs(&cs, list, value)
	if err != nil {
		return false, err
	}
	r, err := e.call(func(h unsafe.Pointer) C.gorisk_res {
		return C.gorisk_list_remove(h, cl, cv)
	})
	return err == nil && r.a != 0, err
}

// ListContains reports whether value is a live (not expired) entry of list now
// (risk_engine_list_contains). Errors as for ListAdd.
func (e *Engine) ListContains(list, value string) (bool, error) {
	var cs cStrings
	defer cs.free()
	cl, cv, err := listArgs(&cs, list, value)
	if err != nil {
		return false, err
	}
	r, err := e.call(func(h unsafe.Pointer) C.gorisk_res {
		return C.gorisk_list_contains(h, cl, cv)
	})
	return err == nil && r.a != 0, err
}

func listArgs(cs *cStrings, list, value string) (*C.char, *C.char, error) {
	cl, err := cs.add("list", list, false)
	if err != nil {
		return nil, nil, err
	}
	cv, err := cs.add("value", value, false)
	if err != nil {
		return nil, nil, err
	}
	return cl, cv, nil
}

// ReloadLists re-reads every list's file (file of [state.lists.<name>], lines
// value[,expires_at_ms]) and journal (risk_engine_lists_reload). A bad file is ErrState
// naming file:line, and its list keeps serving what it had; the other lists are
// reloaded.
func (e *Engine) ReloadLists() error {
	_, err := e.call(func(h unsafe.Pointer) C.gorisk_res { return C.gorisk_lists_reload(h) })
	return err
}

// SnapshotState writes the entity state to path atomically ("" = the configured [state]
// snapshot) (risk_engine_state_snapshot); a later engine with the same [state] restores it
// at start. ErrState when it cannot be written, or with no path given and none
// configured; ErrInvalid for a path holding a NUL byte.
func (e *Engine) SnapshotState(path string) error {
	var cs cStrings
	defer cs.free()
	cp, err := cs.add("path", path, true)
	if err != nil {
		return err
	}
	_, err = e.call(func(h unsafe.Pointer) C.gorisk_res { return C.gorisk_state_snapshot(h, cp) })
	return err
}

// StateReport returns the entity state's counters (risk_engine_state_json). ErrState on
// an engine without [state].
func (e *Engine) StateReport() (StateReport, error) {
	text, err := e.StateReportJSON()
	if err != nil {
		return StateReport{}, err
	}
	return decodeInto[StateReport](text, "state report")
}

// StateReportJSON returns the state report as the library's JSON text (every field,
// including any newer than StateReport).
func (e *Engine) StateReportJSON() (string, error) {
	return e.textOf(stateCap, "the state report", func(h unsafe.Pointer, buf *C.char, n C.size_t) C.gorisk_res {
		return C.gorisk_state_json(h, buf, n)
	})
}
