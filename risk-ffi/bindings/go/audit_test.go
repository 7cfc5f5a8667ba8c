package risk

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// auditRules fire on the transactions of auditTxns: a scored pair, and two hard rules that
// set the action, so the decisions get known, different actions.
const auditRules = `version "audit-test-1"
rule BIG_AMOUNT { when amount > 500 score 0.5 reason "BIG" }
rule NIGHT { when hour < 5 score 0.2 reason "NIGHT" }
rule BLOCK {
  when amount > 5000
  decline
  hard
  reason "BLOCKED"
}
rule HOLD {
  when segment == "a"
  review
  hard
  reason "HELD"
}
`

// auditTOML: a rule tier from audit.rules, a constant fast tier (0.2: approve) with the
// largest deadline the library allows (which tier decides never depends on the machine's
// load), and the audit log in audit/ under the base directory.
var auditTOML = loadConfig("audit.toml", nil)

// txn 1: approve (BIG_AMOUNT and NIGHT fire); 2: approve (nothing fires, hour missing);
// 3: decline (hard rule BLOCK); 4: review (hard rule HOLD).
var auditTxns = []Txn{
	{ID: 1, Entity: 7, Time: time.UnixMilli(1767571200000), Amount: 1000, Currency: "USD",
		Features: map[string]Feature{"hour": Num(3), "segment": Cat("b")}},
	{ID: 2, Entity: 8, Amount: 10, Currency: "EUR", Features: map[string]Feature{"hour": Missing()}},
	{ID: 3, Entity: 7, Amount: 9000, Currency: "USD", Features: map[string]Feature{"hour": Num(12)}},
	{ID: 4, Entity: 9, Amount: 20, Currency: "USD", Features: map[string]Feature{"segment": Cat("a")}},
}

var auditActions = map[uint64]string{1: "approve", 2: "approve", 3: "decline", 4: "review"}

// auditFlushWait is a hang detector, never reached by a passing run.
const auditFlushWait = time.Minute

// auditEngine builds an engine logging to <dir>/audit (closed by the test's cleanup).
func auditEngine(t *testing.T, dir string) *Engine {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "audit.rules"), []byte(auditRules), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := NewFromTOML(auditTOML, dir)
	if err != nil {
		t.Fatalf("NewFromTOML: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// auditLogged decides auditTxns, flushes and closes the engine; the log directory and
// the decisions by txn id.
func auditLogged(t *testing.T) (string, map[uint64]Decision) {
	t.Helper()
	dir := t.TempDir()
	e := auditEngine(t, dir)
	ds := map[uint64]Decision{}
	for _, tx := range auditTxns {
		d, err := e.Decide(tx)
		if err != nil {
			t.Fatalf("Decide %d: %v", tx.ID, err)
		}
		ds[tx.ID] = d
	}
	seq, err := e.AuditFlush(auditFlushWait)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(1 + len(auditTxns)); seq != want { // the schema record, then the decisions
		t.Fatalf("AuditFlush = %d, want %d", seq, want)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "audit"), ds
}

func readAudit(t *testing.T, dir string, q AuditQuery) []map[string]any {
	t.Helper()
	recs, err := ReadAudit(dir, q)
	if err != nil {
		t.Fatalf("ReadAudit(%+v): %v", q, err)
	}
	return recs
}

func num(t *testing.T, v any) json.Number {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%#v is not a json.Number", v)
	}
	return n
}

func u64(t *testing.T, v any) uint64 {
	t.Helper()
	i, err := num(t, v).Int64()
	if err != nil || i < 0 {
		t.Fatalf("%v is not a uint64: %v", v, err)
	}
	return uint64(i)
}

func f32(t *testing.T, v any) float32 {
	t.Helper()
	f, err := num(t, v).Float64()
	if err != nil {
		t.Fatal(err)
	}
	return float32(f)
}

func txnIDs(t *testing.T, recs []map[string]any) []uint64 {
	t.Helper()
	ids := []uint64{}
	for _, r := range recs {
		ids = append(ids, u64(t, r["txn_id"]))
	}
	return ids
}

func obj(t *testing.T, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%#v is not an object", v)
	}
	return m
}

func TestAuditReadByTxn(t *testing.T) {
	log, ds := auditLogged(t)
	recs := readAudit(t, log, AuditQuery{Txn: Ptr[uint64](1)})
	if len(recs) != 1 {
		t.Fatalf("%d records: %v", len(recs), recs)
	}
	r, d := recs[0], ds[1]
	if r["kind"] != AuditKindDecision || u64(t, r["seq"]) != 2 || u64(t, r["txn_id"]) != 1 || u64(t, r["entity"]) != 7 {
		t.Fatalf("record %v", r)
	}
	if r["action"] != "approve" || string(d.Action) != "approve" || r["tier"] != "fast" || r["hard_rule"] != false {
		t.Errorf("action/tier/hard_rule: %v %v %v (decision %v)", r["action"], r["tier"], r["hard_rule"], d.Action)
	}
	if f32(t, r["score"]) != d.Score || f32(t, r["rule_score"]) != d.RuleScore || f32(t, r["model_score"]) != d.ModelScore {
		t.Errorf("scores %v %v %v, decision %+v", r["score"], r["rule_score"], r["model_score"], d)
	}
	if r["fallback"] != nil || r["escalation"] != "none" {
		t.Errorf("fallback %v escalation %v", r["fallback"], r["escalation"])
	}
	if _, ok := r["ticket"]; ok {
		t.Errorf("a ticket without an escalation: %v", r["ticket"])
	}
	if u64(t, r["event_time_ms"]) != 1767571200000 || u64(t, r["decided_at_ms"]) == 0 {
		t.Errorf("times %v %v", r["event_time_ms"], r["decided_at_ms"])
	}
	if got := r["rules_fired"]; !reflect.DeepEqual(got, []any{"BIG_AMOUNT", "NIGHT"}) {
		t.Errorf("rules_fired %v", got)
	}
	if u64(t, r["rules_fired_total"]) != 2 {
		t.Errorf("rules_fired_total %v", r["rules_fired_total"])
	}
	codes := map[any]bool{}
	for _, x := range r["reasons"].([]any) {
		codes[obj(t, x)["code"]] = true
	}
	if !codes["BIG"] || !codes["NIGHT"] {
		t.Errorf("reasons %v", r["reasons"])
	}
	th := obj(t, r["thresholds"])
	if f32(t, th["approve_below"]) != 0.3 || f32(t, th["decline_at"]) != 0.7 || f32(t, th["shift"]) != d.ThresholdShift {
		t.Errorf("thresholds %v", th)
	}
	v := obj(t, r["versions"])
	rules := obj(t, v["rules"])
	if rules["version"] != "audit-test-1" || !strings.HasSuffix(rules["name"].(string), "audit.rules") || len(rules["hash"].(string)) != 16 {
		t.Errorf("versions.rules %v", rules)
	}
	if obj(t, v["fast"])["name"] != "constant" || v["deep"] != nil {
		t.Errorf("versions %v", v)
	}
	if len(v["config"].(string)) != 16 || len(v["schema"].(string)) != 16 {
		t.Errorf("fingerprints %v", v)
	}
	tm := obj(t, r["timings_ns"])
	if u64(t, tm["total"]) < u64(t, tm["rules"]) || tm["fast"] == nil || tm["combine"] == nil {
		t.Errorf("timings_ns %v", tm)
	}
	f := obj(t, r["features"])
	if f32(t, f["amount"]) != 1000 || f32(t, f["hour"]) != 3 || f["segment"] != "b" || len(f) != 3 {
		t.Errorf("features %v", f)
	}
	if r["currency"] != "USD" || f32(t, r["amount"]) != 1000 {
		t.Errorf("amount %v %v", r["amount"], r["currency"])
	}
	// Missing features are nil.
	two := readAudit(t, log, AuditQuery{Txn: Ptr[uint64](2)})
	if len(two) != 1 || !reflect.DeepEqual(obj(t, two[0]["features"]), map[string]any{"amount": json.Number("10.0"), "hour": nil, "segment": nil}) {
		t.Errorf("txn 2: %v", two)
	}
}

func TestAuditReadQueries(t *testing.T) {
	log, ds := auditLogged(t)
	all := readAudit(t, log, AuditQuery{})
	if got := txnIDs(t, all); !reflect.DeepEqual(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("all: %v", got)
	}
	for _, r := range all {
		id := u64(t, r["txn_id"])
		if r["kind"] != AuditKindDecision || r["action"] != auditActions[id] || r["action"] != string(ds[id].Action) {
			t.Errorf("txn %d: kind %v action %v, want %s", id, r["kind"], r["action"], auditActions[id])
		}
	}
	for _, c := range []struct {
		q    AuditQuery
		want []uint64
	}{
		{AuditQuery{Rule: Ptr("BLOCK")}, []uint64{3}},
		{AuditQuery{Rule: Ptr("BIG_AMOUNT")}, []uint64{1, 3}},
		{AuditQuery{Rule: Ptr("HOLD")}, []uint64{4}},
		{AuditQuery{Rule: Ptr("NO_SUCH_RULE")}, []uint64{}},
		{AuditQuery{Entity: Ptr[uint64](7)}, []uint64{1, 3}},
		{AuditQuery{Limit: Ptr[uint64](2)}, []uint64{1, 2}},
		{AuditQuery{Txn: Ptr[uint64](99)}, []uint64{}},
		{AuditQuery{Kinds: []string{AuditKindVerdict}}, []uint64{}},
		{AuditQuery{Kinds: []string{AuditKindDecision}}, []uint64{1, 2, 3, 4}},
	} {
		if got := txnIDs(t, readAudit(t, log, c.q)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v: %v, want %v", c.q, got, c.want)
		}
	}
	blocked := readAudit(t, log, AuditQuery{Rule: Ptr("BLOCK")})[0]
	if blocked["action"] != "decline" || blocked["hard_rule"] != true {
		t.Errorf("BLOCK: %v", blocked)
	}
	// Decision time is [FromMs, ToMs).
	at, _ := num(t, all[0]["decided_at_ms"]).Int64()
	if got := txnIDs(t, readAudit(t, log, AuditQuery{Txn: Ptr[uint64](1), FromMs: Ptr(at), ToMs: Ptr(at + 1)})); !reflect.DeepEqual(got, []uint64{1}) {
		t.Errorf("[at, at+1): %v", got)
	}
	if got := readAudit(t, log, AuditQuery{Txn: Ptr[uint64](1), ToMs: Ptr(at)}); len(got) != 0 {
		t.Errorf("before at: %v", got)
	}
	// Schema records on request.
	recs := readAudit(t, log, AuditQuery{Kinds: []string{AuditKindSchema, AuditKindDecision}})
	if len(recs) != 5 || recs[0]["kind"] != AuditKindSchema || u64(t, recs[0]["seq"]) != 1 {
		t.Fatalf("with schema: %v", recs)
	}
	if !reflect.DeepEqual(recs[0]["fields"], []any{"amount", "hour", "segment"}) {
		t.Errorf("schema fields %v", recs[0]["fields"])
	}
	if recs[0]["fingerprint"] != obj(t, all[0]["versions"])["schema"] {
		t.Errorf("fingerprint %v", recs[0]["fingerprint"])
	}
}

func TestAuditFlushAndStats(t *testing.T) {
	dir := t.TempDir()
	e := auditEngine(t, dir)
	for _, tx := range auditTxns[:2] {
		if _, err := e.Decide(tx); err != nil {
			t.Fatal(err)
		}
	}
	seq, err := e.AuditFlush(auditFlushWait)
	if err != nil || seq != 3 {
		t.Fatalf("AuditFlush = %d, %v; want 3", seq, err)
	}
	s, err := e.AuditStats()
	if err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }
	if got := keys(s); !reflect.DeepEqual(got, []string{"accepted", "batches", "durable_seq", "io_errors", "last_error",
		"recovery", "segments_deleted", "shed_closed", "shed_full", "written_seq"}) {
		t.Errorf("stats keys %v", got)
	}
	if got := keys(obj(t, s["recovery"])); !reflect.DeepEqual(got, []string{"corrupt", "last_seq", "segment", "truncated_bytes"}) {
		t.Errorf("recovery keys %v", got)
	}
	if u64(t, s["accepted"]) != 2 || u64(t, s["durable_seq"]) != seq || u64(t, s["written_seq"]) != seq {
		t.Errorf("stats %v", s)
	}
	if u64(t, s["shed_full"]) != 0 || u64(t, s["shed_closed"]) != 0 || u64(t, s["io_errors"]) != 0 || s["last_error"] != nil {
		t.Errorf("stats %v", s)
	}
	// A live engine's log reads while it writes: what was flushed is there.
	log := filepath.Join(dir, "audit")
	if got := txnIDs(t, readAudit(t, log, AuditQuery{})); !reflect.DeepEqual(got, []uint64{1, 2}) {
		t.Errorf("live log: %v", got)
	}
}

// More JSON than the first buffer holds (64 KiB): read again at the size asked for.
func TestAuditLargeAnswer(t *testing.T) {
	dir := t.TempDir()
	e := auditEngine(t, dir)
	const n = 300
	want := []uint64{}
	for i := range n {
		id := uint64(1000 + i)
		want = append(want, id)
		if _, err := e.Decide(Txn{ID: id, Amount: float64(i), Currency: "USD", Features: map[string]Feature{"hour": Num(float64(i % 24))}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.AuditFlush(auditFlushWait); err != nil {
		t.Fatal(err)
	}
	text, err := auditQueryText(filepath.Join(dir, "audit"), []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if len(text) <= auditQueryCap {
		t.Fatalf("only %d bytes: the retry is not exercised", len(text))
	}
	if got := txnIDs(t, readAudit(t, filepath.Join(dir, "audit"), AuditQuery{})); !reflect.DeepEqual(got, want) {
		t.Errorf("%d records", len(got))
	}
}

func TestAuditErrors(t *testing.T) {
	// No [audit]: ErrInvalid.
	plain, err := NewFromTOML(deepCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	_, err = plain.AuditFlush(auditFlushWait)
	if re := wantCode(t, "AuditFlush without [audit]", err, ErrInvalid); !strings.Contains(re.Message, "[audit]") {
		t.Errorf("message %q", re.Message)
	}
	_, err = plain.AuditStats()
	wantCode(t, "AuditStats without [audit]", err, ErrInvalid)

	// After Shutdown the log is closed: ErrAudit.
	dir := t.TempDir()
	e := auditEngine(t, dir)
	if _, err := e.Decide(auditTxns[0]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Shutdown(auditFlushWait); err != nil { // durable first, then closed
		t.Fatal(err)
	}
	_, err = e.AuditFlush(auditFlushWait)
	re := wantCode(t, "AuditFlush after Shutdown", err, ErrAudit)
	if re.Code != 14 || re.Name != "RISK_ERR_AUDIT" || !strings.Contains(re.Message, "closed") {
		t.Errorf("error %+v", re)
	}
	if errors.Is(err, ErrClosed) {
		t.Error("ErrAudit is not ErrClosed")
	}
	s, err := e.AuditStats()
	if err != nil || u64(t, s["durable_seq"]) != 2 {
		t.Errorf("stats after shutdown: %v, %v", s, err)
	}
	// A closed Engine: ErrHandle.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = e.AuditFlush(0)
	wantCode(t, "AuditFlush after Close", err, ErrHandle)
	_, err = e.AuditStats()
	wantCode(t, "AuditStats after Close", err, ErrHandle)
	log := filepath.Join(dir, "audit")
	if got := txnIDs(t, readAudit(t, log, AuditQuery{})); !reflect.DeepEqual(got, []uint64{1}) {
		t.Errorf("after shutdown: %v", got)
	}

	// Bad queries and directories.
	_, err = ReadAudit(log, AuditQuery{Kinds: []string{"decision", "decisions"}})
	if re := wantCode(t, "unknown kind", err, ErrInvalid); !strings.Contains(re.Message, "decisions") {
		t.Errorf("message %q", re.Message)
	}
	_, err = ReadAudit(filepath.Join(dir, "no-such-log"), AuditQuery{})
	if re := wantCode(t, "missing directory", err, ErrInvalid); !strings.Contains(re.Message, "no-such-log") {
		t.Errorf("message %q", re.Message)
	}
	_, err = ReadAudit("a\x00b", AuditQuery{})
	wantCode(t, "NUL in dir", err, ErrInvalid)
	_, err = auditQueryText(log, []byte(`{"bogus": 1}`))
	wantCode(t, "unknown key", err, ErrJSON)
	// A directory without segments is an empty log.
	if recs := readAudit(t, dir, AuditQuery{}); recs == nil || len(recs) != 0 {
		t.Errorf("empty log: %#v", recs)
	}
}

func TestAuditDamagedSegment(t *testing.T) {
	log, _ := auditLogged(t)
	segs, err := filepath.Glob(filepath.Join(log, "seg-*.log"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte inside the payload of the third frame (the second decision), not in a
	// frame header (a damaged length at the tail could read as a write in progress).
	at := 16
	for range 2 {
		at += 8 + int(binary.LittleEndian.Uint32(data[at:]))
	}
	n := int(binary.LittleEndian.Uint32(data[at:]))
	data[at+8+n/2] ^= 0x5A
	if err := os.WriteFile(segs[0], data, 0o644); err != nil {
		t.Fatal(err)
	}
	recs := readAudit(t, log, AuditQuery{})
	damaged := 0
	for _, r := range recs {
		if r["kind"] == AuditKindDamaged {
			damaged++
		}
	}
	if damaged != 1 || len(recs) < 2 || u64(t, recs[0]["txn_id"]) != 1 || recs[1]["kind"] != AuditKindDamaged {
		t.Fatalf("records %v", recs)
	}
	msg, _ := recs[1]["error"].(string)
	if !strings.Contains(msg, "corrupt") || !strings.Contains(msg, filepath.Base(segs[0])) {
		t.Errorf("error %q", msg)
	}
}
