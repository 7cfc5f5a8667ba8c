package risk

/*
#include "gorisk.h"

static gorisk_res gorisk_audit_query(const char *dir, const char *query, char *buf, size_t cap) {
	size_t len = 0;
	gorisk_res r = gorisk_done(risk_audit_query_json(dir, query, buf, cap, &len));
	r.n = len;
	return r;
}

static gorisk_res gorisk_audit_flush(void *e, uint32_t timeout_ms) {
	uint64_t seq = 0;
	gorisk_res r = gorisk_done(risk_engine_audit_flush((const risk_engine *)e, timeout_ms, &seq));
	r.a = seq;
	return r;
}

static gorisk_res gorisk_audit_stats(void *e, char *buf, size_t cap) {
	size_t len = 0;
	gorisk_res r = gorisk_done(risk_engine_audit_stats_json((const risk_engine *)e, buf, cap, &len));
	r.n = len;
	return r;
}
*/
import "C"

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
	"unsafe"
)

// The audit trail. An engine whose TOML has an [audit] table
//
//	[audit]
//	dir = "audit"        # relative to the TOML's directory (NewFromTOML: baseDir)
//	durability = "batch"
//
// writes one record per decision and per deep-tier verdict to segment files in that
// directory. ReadAudit reads them back (no engine needed); Engine.AuditFlush makes what
// was accepted durable; Engine.AuditStats counts.

// Record kinds of AuditQuery.Kinds, and the "kind" of a returned record. A damaged record
// comes back as kind AuditKindDamaged whatever the query asked for.
const (
	AuditKindDecision = "decision"
	AuditKindVerdict  = "verdict"
	AuditKindSchema   = "schema"
	AuditKindDamaged  = "damaged"
)

// auditQueryCap is the first buffer for a query's JSON; a larger answer costs one more
// read of the log.
const auditQueryCap = 64 << 10

// AuditQuery selects audit records; every field is optional (nil: no filter). Use Ptr
// for the pointer fields:
//
//	risk.AuditQuery{Txn: risk.Ptr[uint64](42)}
//	risk.AuditQuery{Rule: risk.Ptr("BLOCK"), FromMs: risk.Ptr(t0.UnixMilli())}
type AuditQuery struct {
	// Txn: only this transaction id.
	Txn *uint64 `json:"txn,omitempty"`
	// Entity: only this entity.
	Entity *uint64 `json:"entity,omitempty"`
	// FromMs, ToMs: decision (or verdict) time in [FromMs, ToMs), ms since the Unix epoch.
	FromMs *int64 `json:"from_ms,omitempty"`
	ToMs   *int64 `json:"to_ms,omitempty"`
	// Rule: only decisions on which this rule fired.
	Rule *string `json:"rule,omitempty"`
	// Kinds: any of AuditKindDecision, AuditKindVerdict, AuditKindSchema (nil or empty:
	// decisions and verdicts). A kind the library does not know is ErrInvalid.
	Kinds []string `json:"kinds,omitempty"`
	// Limit: at most this many records.
	Limit *uint64 `json:"limit,omitempty"`
}

// Ptr returns a pointer to v, for the optional fields of AuditQuery.
func Ptr[T any](v T) *T { return &v }

// ReadAudit returns the records of the audit log in directory dir that match query, in log
// order, as the library's JSON views (risk_audit_query_json). Numbers are json.Number,
// exact for 64-bit ids, sequence numbers and counters: use their Int64, Float64 or String
// methods (or strconv.ParseUint for a uint64).
//
// A decision has the keys seq, kind ("decision"), txn_id, entity, event_time_ms,
// decided_at_ms, action, score, tier, fallback, hard_rule, rule_score, model_score,
// rules_fired ([]any of string), rules_fired_total, reasons ([]any of {code, weight}),
// thresholds {approve_below, decline_at, shift}, versions {rules {name, version, hash},
// fast, deep, config, schema}, timings_ns {rules, fast, combine, total}, escalation,
// ticket (when enqueued), amount, currency, features {name: number, categorical text, or
// nil when missing}. A verdict has ticket, txn_id, entity, score, source, failure,
// fast_score, latency_us, decided_at_ms, deep. A damaged record is {"kind": "damaged",
// "error": "..."}: reported, never skipped silently (reading goes on with the next
// segment).
//
// Errors: ErrInvalid for a directory that cannot be read (or holds a NUL byte) and for an
// unknown kind; ErrJSON for a query the library cannot read. A live engine's records are
// there once its AuditFlush returned.
func ReadAudit(dir string, query AuditQuery) ([]map[string]any, error) {
	q, err := json.Marshal(query)
	if err != nil {
		return nil, fmt.Errorf("risk: encoding the audit query: %w", err)
	}
	text, err := auditQueryText(dir, q)
	if err != nil {
		return nil, err
	}
	var recs []map[string]any
	if err := decodeJSON(text, &recs); err != nil {
		return nil, fmt.Errorf("risk: decoding audit records: %w", err)
	}
	if recs == nil {
		recs = []map[string]any{}
	}
	return recs, nil
}

// decodeJSON decodes one JSON document, numbers as json.Number.
func decodeJSON(text []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(text))
	d.UseNumber()
	return d.Decode(v)
}

// ===== engine calls =====

// auditQueryText is risk_audit_query_json of dir and the query JSON text.
func auditQueryText(dir string, query []byte) ([]byte, error) {
	var cs cStrings
	defer cs.free()
	cdir, err := cs.add("dir", dir, false)
	if err != nil {
		return nil, err
	}
	cq, err := cs.add("query", string(query), false) // JSON text: a NUL in a string is escaped
	if err != nil {
		return nil, err
	}
	return readText(auditQueryCap, "the audit query", func(buf []byte) C.gorisk_res {
		return C.gorisk_audit_query(cdir, cq, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	})
}

// AuditFlush waits up to timeout (rounded up to whole milliseconds; 0 = do not wait) until
// every record the engine's audit log ([audit] in its TOML) accepted is durable, and
// returns the durable sequence number (risk_engine_audit_flush). Call it before reading
// the log of a live engine, and before Close: Close does not wait for the log's writer.
//
// Errors: ErrInvalid when the engine has no [audit] log; ErrAudit when the wait timed
// out, a write failed or the log is closed (after Shutdown).
func (e *Engine) AuditFlush(timeout time.Duration) (uint64, error) {
	r, err := e.call(func(h unsafe.Pointer) C.gorisk_res { return C.gorisk_audit_flush(h, millis(timeout)) })
	if err != nil {
		return 0, err
	}
	return uint64(r.a), nil
}

// AuditStats returns the audit log's counters (risk_engine_audit_stats_json): accepted,
// shed_full, shed_closed, written_seq, durable_seq, batches, io_errors, last_error,
// segments_deleted, recovery {segment, truncated_bytes, corrupt, last_seq}. Numbers are
// json.Number (exact for 64-bit counters). ErrInvalid when the engine has no [audit] log.
func (e *Engine) AuditStats() (map[string]any, error) {
	text, err := e.textOf(512, "audit stats", func(h unsafe.Pointer, buf *C.char, n C.size_t) C.gorisk_res {
		return C.gorisk_audit_stats(h, buf, n)
	})
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := decodeJSON([]byte(text), &m); err != nil {
		return nil, fmt.Errorf("risk: decoding audit stats JSON: %w", err)
	}
	return m, nil
}
