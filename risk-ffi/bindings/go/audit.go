package risk

import (
	"bytes"
	"encoding/json"
	"fmt"
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
