package risk

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Entity state through the binding: velocity features, lists, labels, snapshots, the
// state report, and the Merchant / IP / Email keys of a transaction (struct, JSON, batch).

// stateT0 is 2026-01-05 00:00 UTC; the transactions of a test are a minute apart from it.
var stateT0 = time.UnixMilli(1_767_571_200_000).UTC()

const stateRules = `version "state-test-1"
policy first_hit
rule BLOCKED  { when device in list.blocked_devices  decline  hard }
rule MERCHANT { when merchant in list.blocked_merchants  decline  hard }
rule IP       { when ip in list.blocked_ips  decline  hard }
rule EMAIL    { when email in list.blocked_emails  decline  hard }
rule VELOCITY { when card_count_1h >= 2  review }
`

// stateTOML has the rule tier alone (no fast tier: the rules decide every transaction);
// the engine adds the state fields (card_count_1h, merchant_fraud_7d, list.*) to the
// schema.
var stateTOML = loadConfig("state.toml", nil)

// fileDevice is in blocked_devices.txt from the start.
const fileDevice = "99"

var noStateTOML = loadConfig("rules_only.toml", nil)

// stateEngine builds a [state] engine from files in a fresh directory, returned too.
func stateEngine(t *testing.T) (*Engine, string) {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "state.rules"), stateRules)
	writeFile(t, filepath.Join(dir, "blocked_devices.txt"), fileDevice+"\n")
	e, err := NewFromTOML(stateTOML, dir)
	if err != nil {
		t.Fatalf("NewFromTOML: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, dir
}

// stateTxn is transaction i of card 42, i minutes after stateT0, from device 7 (in no list).
func stateTxn(i uint64) Txn {
	return Txn{ID: i, Entity: 42, Time: stateT0.Add(time.Duration(i) * time.Minute), Amount: 25,
		Currency: "USD", Device: 7}
}

func decideOK(t *testing.T, e *Engine, tx Txn) Decision {
	t.Helper()
	d, err := e.Decide(tx)
	if err != nil {
		t.Fatalf("Decide(%d): %v", tx.ID, err)
	}
	return d
}

func reasonCodes(d Decision) []string {
	out := make([]string, len(d.Reasons))
	for i, r := range d.Reasons {
		out[i] = r.Code
	}
	return out
}

func wantAction(t *testing.T, what string, d Decision, action Action, reasons ...string) {
	t.Helper()
	if d.Action != action || strings.Join(reasonCodes(d), ",") != strings.Join(reasons, ",") {
		t.Fatalf("%s: %s %v, want %s %v", what, d.Action, reasonCodes(d), action, reasons)
	}
}

func wantContains(t *testing.T, e *Engine, list, value string, want bool) {
	t.Helper()
	got, err := e.ListContains(list, value)
	if err != nil || got != want {
		t.Fatalf("ListContains(%s, %s) = %v, %v; want %v", list, value, got, err, want)
	}
}

func stateReport(t *testing.T, e *Engine) StateReport {
	t.Helper()
	r, err := e.StateReport()
	if err != nil {
		t.Fatalf("StateReport: %v", err)
	}
	return r
}

func TestStateVelocityReviewsTheThirdTransaction(t *testing.T) {
	e, _ := stateEngine(t)
	for i, want := range []Action{ActionApprove, ActionApprove, ActionReview} {
		tx := stateTxn(uint64(i + 1))
		// A value set in a state field is replaced by the engine's count.
		tx.Features = map[string]Feature{"card_count_1h": Num(0)}
		sent := tx
		sentFeatures := maps.Clone(tx.Features)
		d := decideOK(t, e, tx)
		if want == ActionReview {
			wantAction(t, "third", d, ActionReview, "VELOCITY")
		} else {
			wantAction(t, fmt.Sprintf("txn %d", i+1), d, want)
		}
		// The caller's transaction (and its feature map) is as sent.
		if !maps.Equal(tx.Features, sentFeatures) || tx.ID != sent.ID || !tx.Time.Equal(sent.Time) {
			t.Fatalf("the caller's Txn changed: %+v", tx)
		}
	}
	// Another card starts from nothing.
	tx := stateTxn(4)
	tx.Entity = 43
	wantAction(t, "other card", decideOK(t, e, tx), ActionApprove)
}

func TestStateDecisionReportsEntityState(t *testing.T) {
	e, _ := stateEngine(t)
	// risk_decision.state (byte 21): fresh with [state] and an event time, off without one.
	if d := decideOK(t, e, stateTxn(1)); d.State != EntityStateFresh || d.State.String() != "fresh" {
		t.Fatalf("[state], timed: State = %v (%d), want fresh", d.State, d.State)
	}
	untimed := stateTxn(2)
	untimed.Time = time.Time{}
	ds, errs := e.DecideBatch([]Txn{stateTxn(3), untimed})
	if errs[0] != nil || errs[1] != nil || ds[0].State != EntityStateFresh || ds[1].State != EntityStateOff {
		t.Fatalf("batch: %v %v, errors %v", ds[0].State, ds[1].State, errs)
	}
	plain, err := NewFromTOML(noStateTOML, "")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if d := decideOK(t, plain, stateTxn(4)); d.State != EntityStateOff || d.State.String() != "off" {
		t.Fatalf("no [state]: State = %v, want off", d.State)
	}
	if s := EntityState(9).String(); s != "unknown(9)" {
		t.Fatalf("EntityState(9) = %q", s)
	}
}

func TestStateListsAddContainsRemove(t *testing.T) {
	e, _ := stateEngine(t)
	wantContains(t, e, "blocked_devices", "7", false)
	wantAction(t, "unlisted", decideOK(t, e, stateTxn(1)), ActionApprove)

	if err := e.ListAdd("blocked_devices", "7", time.Time{}); err != nil {
		t.Fatalf("ListAdd: %v", err)
	}
	wantContains(t, e, "blocked_devices", "7", true)
	d := decideOK(t, e, stateTxn(2))
	wantAction(t, "listed", d, ActionDecline, "BLOCKED")
	if !d.HardRule {
		t.Fatal("BLOCKED is a hard rule")
	}

	removed, err := e.ListRemove("blocked_devices", "7")
	if err != nil || !removed {
		t.Fatalf("ListRemove = %v, %v; want true", removed, err)
	}
	wantContains(t, e, "blocked_devices", "7", false)
	if removed, err = e.ListRemove("blocked_devices", "7"); err != nil || removed {
		t.Fatalf("ListRemove again = %v, %v; want false", removed, err)
	}
	tx := stateTxn(3)
	tx.Entity = 43
	wantAction(t, "removed", decideOK(t, e, tx), ActionApprove)

	// The file's entry serves from the start.
	wantContains(t, e, "blocked_devices", fileDevice, true)
	if n := stateReport(t, e).Lists["blocked_devices"]; n != 1 {
		t.Fatalf("live entries = %d, want 1", n)
	}
}

func TestStateListExpiry(t *testing.T) {
	e, _ := stateEngine(t)
	for _, exp := range []time.Time{time.UnixMilli(1), time.UnixMilli(0), time.Unix(-3600, 0)} {
		if err := e.ListAdd("blocked_devices", "8", exp); err != nil {
			t.Fatalf("ListAdd(%v): %v", exp, err)
		}
		wantContains(t, e, "blocked_devices", "8", false)
	}
	tx := stateTxn(1)
	tx.Device = 8
	wantAction(t, "expired", decideOK(t, e, tx), ActionApprove)
	if err := e.ListAdd("blocked_devices", "8", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	wantContains(t, e, "blocked_devices", "8", true)
}

func TestStateListErrors(t *testing.T) {
	e, _ := stateEngine(t)
	re := wantCode(t, "unknown list", e.ListAdd("no_such_list", "1", time.Time{}), ErrState)
	if re.Code != 16 || !strings.Contains(re.Message, "no_such_list") {
		t.Fatalf("unknown list: %+v", re)
	}
	_, err := e.ListContains("no_such_list", "1")
	wantCode(t, "ListContains", err, ErrState)
	_, err = e.ListRemove("no_such_list", "1")
	wantCode(t, "ListRemove", err, ErrState)
	// A device list holds decimal ids.
	wantCode(t, "not a device id", e.ListAdd("blocked_devices", "nine", time.Time{}), ErrState)
	wantCode(t, "NUL", e.ListAdd("blocked_devices", "7\x00", time.Time{}), ErrInvalid)
}

func TestStateReloadBadFileKeepsServing(t *testing.T) {
	e, dir := stateEngine(t)
	if err := e.ListAdd("blocked_devices", "7", time.Time{}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "blocked_devices.txt"), fileDevice+"\nnine\n")
	re := wantCode(t, "bad file", e.ReloadLists(), ErrState)
	if !strings.Contains(re.Message, "blocked_devices.txt:2") || !strings.Contains(re.Message, "nine") {
		t.Fatalf("message %q does not name the file's line 2", re.Message)
	}
	wantContains(t, e, "blocked_devices", fileDevice, true)
	wantContains(t, e, "blocked_devices", "7", true)
	wantAction(t, "after a bad reload", decideOK(t, e, stateTxn(1)), ActionDecline, "BLOCKED")

	writeFile(t, filepath.Join(dir, "blocked_devices.txt"), "5\n6,1\n")
	if err := e.ReloadLists(); err != nil {
		t.Fatalf("good reload: %v", err)
	}
	wantContains(t, e, "blocked_devices", "5", true)
	wantContains(t, e, "blocked_devices", "6", false) // expired in 1970
}

func TestStateLabels(t *testing.T) {
	e, _ := stateEngine(t)
	for i := uint64(1); i <= 2; i++ {
		tx := stateTxn(i)
		tx.Merchant = "m-1"
		decideOK(t, e, tx)
	}
	n, err := e.ReportLabel(1, true, stateT0.Add(2*time.Minute))
	if err != nil || n < 1 {
		t.Fatalf("ReportLabel = %d, %v; want >= 1 window", n, err)
	}
	if n, err = e.ReportLabel(1, false, stateT0.Add(3*time.Minute)); err != nil || n < 1 {
		t.Fatalf("retraction = %d, %v", n, err)
	}
	_, err = e.ReportLabel(999_999, true, stateT0)
	if re := wantCode(t, "unknown txn", err, ErrState); !strings.Contains(re.Message, "999999") {
		t.Fatalf("message %q", re.Message)
	}
	_, err = e.ReportLabel(2, true, stateT0) // before the transaction
	wantCode(t, "label before txn", err, ErrState)

	st := stateReport(t, e).Stats
	if st.Labels != 2 || st.LabelsUnknown != 1 {
		t.Fatalf("stats %+v: want 2 labels, 1 unknown", st)
	}
}

func TestStateReportCountsTimedDecisions(t *testing.T) {
	e, _ := stateEngine(t)
	const n = 5
	for i := uint64(1); i <= n; i++ {
		tx := stateTxn(i)
		tx.Entity = i
		tx.Merchant = fmt.Sprintf("m-%d", i%2)
		decideOK(t, e, tx)
	}
	untimed := stateTxn(n + 1)
	untimed.Time = time.Time{}
	untimed.Entity = 500
	decideOK(t, e, untimed)
	if err := e.ListAdd("blocked_devices", "7", time.Time{}); err != nil {
		t.Fatal(err)
	}
	hit := stateTxn(n + 2)
	hit.Entity = 501
	decideOK(t, e, hit)

	r := stateReport(t, e)
	if r.Stats.Updates != n+1 || r.Stats.NoTime != 1 || r.Stats.ListHits < 1 || r.Stats.Late != 0 || r.Stats.Degraded != 0 {
		t.Fatalf("stats %+v: want %d updates, 1 without time, a list hit, none late or degraded", r.Stats, n+1)
	}
	wantLists := map[string]uint64{"blocked_devices": 2, "blocked_merchants": 0, "blocked_ips": 0, "blocked_emails": 0}
	if !maps.Equal(r.Lists, wantLists) {
		t.Fatalf("lists %v, want %v", r.Lists, wantLists)
	}
	keys := map[string]uint64{}
	for _, m := range r.Memory {
		if m.BytesPerKey == 0 {
			t.Errorf("memory %+v: 0 bytes per key", m)
		}
		keys[m.Source] = m.Keys
	}
	if keys["entity"] != n+1 || keys["merchant"] != 2 {
		t.Fatalf("keys %v: want %d cards, 2 merchants", keys, n+1)
	}
	if r.PendingLabels < 1 {
		t.Fatalf("pending labels %d", r.PendingLabels)
	}
	// The raw JSON has every documented key.
	text, err := e.StateReportJSON()
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		t.Fatalf("state JSON %q: %v", text, err)
	}
	for _, k := range []string{"stats", "memory", "pending_labels", "lists"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("state JSON lacks %q: %s", k, text)
		}
	}
}

func TestStateSnapshotAndRestore(t *testing.T) {
	e, dir := stateEngine(t)
	decideOK(t, e, stateTxn(1))
	decideOK(t, e, stateTxn(2))
	path := filepath.Join(dir, "state.bin")
	if err := e.SnapshotState(path); err != nil {
		t.Fatalf("SnapshotState: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("snapshot file: %v, %v", fi, err)
	}
	wantCode(t, "no path, none configured", e.SnapshotState(""), ErrState)
	wantCode(t, "missing directory", e.SnapshotState(filepath.Join(dir, "no", "such", "s.bin")), ErrState)

	// An engine configured with the snapshot starts from it: card 42 already has two
	// transactions in the hour.
	again, err := NewFromTOML(strings.Replace(stateTOML, "[state]\n", fmt.Sprintf("[state]\nsnapshot = %q\n", path), 1), dir)
	if err != nil {
		t.Fatalf("NewFromTOML with snapshot: %v", err)
	}
	defer again.Close()
	wantAction(t, "restored", decideOK(t, again, stateTxn(3)), ActionReview, "VELOCITY")
	if err := again.SnapshotState(""); err != nil {
		t.Fatalf("SnapshotState to the configured path: %v", err)
	}
}

func TestStateMerchantIPEmailReachTheEngine(t *testing.T) {
	for _, path := range []string{"struct", "json", "batch"} {
		t.Run(path, func(t *testing.T) {
			e, _ := stateEngine(t)
			decide := func(tx Txn) Decision {
				t.Helper()
				switch path {
				case "struct":
					return decideOK(t, e, tx)
				case "json":
					d, err := e.DecideJSON(txnJSON(tx))
					if err != nil {
						t.Fatalf("DecideJSON: %v", err)
					}
					return d
				default:
					ds, errs := e.DecideBatch([]Txn{tx})
					if errs[0] != nil {
						t.Fatalf("DecideBatch: %v", errs[0])
					}
					return ds[0]
				}
			}
			keyed := func(i uint64, merchant, ip, email string) Txn {
				tx := stateTxn(i)
				tx.Entity = 100 + i
				tx.Merchant, tx.IP, tx.Email = merchant, ip, email
				return tx
			}
			wantAction(t, "unlisted", decide(keyed(1, "m-77", "203.0.113.9", "Jo@Example.com")), ActionApprove)
			// One list per key, each holding that key's value: only the right field hits it.
			must(t, e.ListAdd("blocked_ips", "203.0.113.9", time.Time{}))
			wantAction(t, "ip", decide(keyed(2, "m-77", "203.0.113.9", "Jo@Example.com")), ActionDecline, "IP")
			must(t, e.ListAdd("blocked_emails", "jo@example.com", time.Time{}))
			wantAction(t, "email", decide(keyed(3, "m-77", "", " JO@example.COM ")), ActionDecline, "EMAIL")
			must(t, e.ListAdd("blocked_merchants", "m-77", time.Time{}))
			wantAction(t, "merchant", decide(keyed(4, "m-77", "", "")), ActionDecline, "MERCHANT")
			wantAction(t, "no keys", decide(keyed(5, "", "", "")), ActionApprove)
		})
	}
}

// txnJSON is tx as risk_engine_decide_json's object (the fields the state tests set).
func txnJSON(tx Txn) string {
	m := map[string]any{"id": tx.ID, "entity": tx.Entity, "timestamp_ms": tx.Time.UnixMilli(),
		"amount": tx.Amount, "currency": tx.Currency, "device": tx.Device}
	for k, v := range map[string]string{"merchant": tx.Merchant, "ip": tx.IP, "email": tx.Email} {
		if v != "" {
			m[k] = v
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestStateKeyFieldsRefuseNUL(t *testing.T) {
	e, _ := stateEngine(t)
	for _, tx := range []Txn{{Merchant: "a\x00"}, {IP: "a\x00"}, {Email: "a\x00"}} {
		tx.Amount, tx.Currency = 1, "USD"
		_, err := e.Decide(tx)
		wantCode(t, "NUL in a key", err, ErrInvalid)
	}
}

func TestStateWithoutStateSection(t *testing.T) {
	e, err := NewFromTOML(noStateTOML, "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	re := wantCode(t, "ListAdd", e.ListAdd("blocked_devices", "1", time.Time{}), ErrState)
	if re.Code != 16 || !strings.Contains(re.Message, "[state]") {
		t.Fatalf("ListAdd: %+v", re)
	}
	_, err = e.ListRemove("blocked_devices", "1")
	wantCode(t, "ListRemove", err, ErrState)
	_, err = e.ListContains("blocked_devices", "1")
	wantCode(t, "ListContains", err, ErrState)
	wantCode(t, "ReloadLists", e.ReloadLists(), ErrState)
	wantCode(t, "SnapshotState", e.SnapshotState(filepath.Join(t.TempDir(), "s.bin")), ErrState)
	_, err = e.StateReport()
	wantCode(t, "StateReport", err, ErrState)
	_, err = e.ReportLabel(1, true, stateT0)
	wantCode(t, "ReportLabel", err, ErrState)
	// The key fields are accepted (and unused) without state.
	d, err := e.Decide(Txn{Amount: 1, Currency: "USD", Merchant: "m", IP: "::1", Email: "a@b.c"})
	if err != nil || d.Action != ActionApprove {
		t.Fatalf("Decide with keys: %v, %v", d.Action, err)
	}
}

func TestStateAfterClose(t *testing.T) {
	e, _ := stateEngine(t)
	must(t, e.Close())
	_, err := e.ReportLabel(1, true, stateT0)
	for what, err := range map[string]error{
		"ReportLabel": err,
		"ListAdd":     e.ListAdd("blocked_devices", "1", time.Time{}),
		"ReloadLists": e.ReloadLists(),
		"Snapshot":    e.SnapshotState(""),
	} {
		wantCode(t, what+" after Close", err, ErrHandle)
	}
	if _, err := e.StateReport(); !errors.Is(err, ErrHandle) {
		t.Fatalf("StateReport after Close: %v", err)
	}
}

func TestErrState(t *testing.T) {
	if ErrState.Code != 16 || ErrState.Name != "RISK_ERR_STATE" || CodeName(codeState) != "RISK_ERR_STATE" {
		t.Fatalf("ErrState = %+v", ErrState)
	}
	if err := fmt.Errorf("wrapped: %w", newError(codeState, "why")); !errors.Is(err, ErrState) || errors.Is(err, ErrDeploy) {
		t.Fatal("errors.Is")
	}
}
