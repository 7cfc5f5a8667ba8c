// Package risk is the Go binding of the risk payments-risk SDK, over its C ABI
// (risk-ffi/include/risk.h, librisk_ffi.so).
//
// An Engine is safe for concurrent use by any number of goroutines. Close it when done;
// an engine that becomes unreachable without Close is freed by a runtime cleanup.
//
// Linking: the package links -lrisk_ffi. Set CGO_LDFLAGS to find the library, e.g.
//
//	export CGO_LDFLAGS="-L$DIR -Wl,-rpath,$DIR"
//
// where DIR holds librisk_ffi.so (run_tests.sh does this from RISK_FFI_LIB_DIR).
package risk

/*
#cgo CFLAGS: -I${SRCDIR}/../../include -I${SRCDIR}
#cgo LDFLAGS: -lrisk_ffi
#include "gorisk.h" // gorisk_res, gorisk_done (shared with deploy.go)

static gorisk_res gorisk_new_from_path(const char *path) {
	risk_engine *e = NULL;
	gorisk_res r = gorisk_done(risk_engine_new_from_path(path, &e));
	r.ptr = e;
	return r;
}

static gorisk_res gorisk_new_from_toml(const char *toml, size_t len, const char *base_dir) {
	risk_engine *e = NULL;
	gorisk_res r = gorisk_done(risk_engine_new_from_toml((const uint8_t *)toml, len, base_dir, &e));
	r.ptr = e;
	return r;
}

static gorisk_res gorisk_decide(void *e, const risk_txn *t, risk_decision *d) {
	return gorisk_done(risk_engine_decide((const risk_engine *)e, t, d));
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

static gorisk_res gorisk_reason_name(uint32_t code, char *buf, size_t cap) {
	size_t len = 0;
	gorisk_res r = gorisk_done(risk_reason_name(code, buf, cap, &len));
	r.n = len;
	return r;
}

static gorisk_res gorisk_metrics(void *e, char *buf, size_t cap) {
	size_t len = 0;
	gorisk_res r = gorisk_done(risk_engine_metrics_json((const risk_engine *)e, buf, cap, &len));
	r.n = len;
	return r;
}

static gorisk_res gorisk_metrics_text(void *e, char *buf, size_t cap) {
	size_t len = 0;
	gorisk_res r = gorisk_done(risk_engine_metrics_text((const risk_engine *)e, buf, cap, &len));
	r.n = len;
	return r;
}

static gorisk_res gorisk_reload(void *e) {
	return gorisk_done(risk_engine_reload_rules((const risk_engine *)e));
}

static gorisk_res gorisk_shutdown(void *e, uint32_t drain_ms) {
	uint64_t drained = 0, abandoned = 0;
	gorisk_res r = gorisk_done(risk_engine_shutdown((const risk_engine *)e, drain_ms, &drained, &abandoned));
	r.a = drained;
	r.b = abandoned;
	return r;
}

static gorisk_res gorisk_subscribe(void *e) {
	risk_subscription *s = NULL;
	gorisk_res r = gorisk_done(risk_engine_subscribe((const risk_engine *)e, &s));
	r.ptr = s;
	return r;
}

static gorisk_res gorisk_poll(void *s, uint32_t timeout_ms, risk_verdict *v) {
	return gorisk_done(risk_subscription_poll((const risk_subscription *)s, timeout_ms, v));
}

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

static void gorisk_engine_free(void *e) { risk_engine_free((risk_engine *)e); }
static void gorisk_subscription_free(void *s) { risk_subscription_free((risk_subscription *)s); }
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// MaxInput is the largest JSON or TOML input the library accepts (RISK_MAX_INPUT).
const MaxInput = C.RISK_MAX_INPUT

// MaxBatch is the largest batch one C call takes (RISK_MAX_BATCH); DecideBatch splits
// larger ones.
const MaxBatch = C.RISK_MAX_BATCH

// MaxFeatures is the most features one transaction may carry (RISK_MAX_FEATURES).
const MaxFeatures = C.RISK_MAX_FEATURES

// CodeUnknown (RISK_CODE_UNKNOWN) is the tier, fallback, verdict source or failure code a
// newer library writes for a value this header version does not know; it maps to
// TierUnknown, FallbackUnknown, SourceUnknown and FailureUnknown.
const CodeUnknown = C.RISK_CODE_UNKNOWN

// Version is the library version (risk_version).
func Version() string { return C.GoString(C.risk_version()) }

// errorOf turns a failed wrapper result into an *Error and frees the copied message.
func errorOf(r C.gorisk_res) *Error {
	return newError(int(r.rc), takeMsg(r))
}

func takeMsg(r C.gorisk_res) string {
	if r.err == nil {
		return ""
	}
	msg := C.GoString(r.err)
	C.free(unsafe.Pointer(r.err))
	return msg
}

// ----- C memory arenas -----

// arena is one malloc'd C block holding everything a call passes to C (transaction
// structs, feature arrays, NUL-terminated strings) and the decision it writes back, so that
// no Go pointer is stored in memory C reads. Small arenas are pooled; the C block is freed
// by a runtime cleanup when the pool drops one.
type arena struct {
	base    unsafe.Pointer
	size    uintptr
	off     uintptr
	cleanup runtime.Cleanup
}

const (
	arenaMin       = 1024
	arenaMaxPooled = 64 << 10
)

var arenaPool = sync.Pool{New: func() any { return newArena(arenaMin) }}

func newArena(size uintptr) *arena {
	p := C.malloc(C.size_t(size))
	if p == nil {
		panic(fmt.Sprintf("risk: out of C memory (%d bytes)", size))
	}
	a := &arena{base: p, size: size}
	a.cleanup = runtime.AddCleanup(a, func(p unsafe.Pointer) { C.free(p) }, p)
	return a
}

func (a *arena) destroy() {
	a.cleanup.Stop()
	C.free(a.base)
	a.base = nil
}

func getArena(need uintptr) *arena {
	if need > arenaMaxPooled {
		return newArena(need)
	}
	a := arenaPool.Get().(*arena)
	if a.size < need {
		a.destroy()
		size := uintptr(arenaMin)
		for size < need {
			size *= 2
		}
		a = newArena(size)
	}
	a.off = 0
	return a
}

func putArena(a *arena) {
	if a.size > arenaMaxPooled {
		a.destroy()
		return
	}
	arenaPool.Put(a)
}

func (a *arena) alloc(n, align uintptr) unsafe.Pointer {
	a.off = (a.off + align - 1) &^ (align - 1)
	if a.off+n > a.size {
		panic("risk: arena overflow (binding bug)")
	}
	p := unsafe.Add(a.base, a.off)
	a.off += n
	return p
}

func (a *arena) str(s string) *C.char {
	p := a.alloc(uintptr(len(s))+1, 1)
	b := unsafe.Slice((*byte)(p), len(s)+1)
	copy(b, s)
	b[len(s)] = 0
	return (*C.char)(p)
}

const (
	sizeofTxn      = C.sizeof_risk_txn
	sizeofFeature  = C.sizeof_risk_feature
	sizeofDecision = C.sizeof_risk_decision
	sizeofResult   = C.sizeof_risk_result
)

func checkText(what, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return nulError(what, s)
	}
	return nil
}

func nulError(what, s string) error {
	return newError(codeInvalid, fmt.Sprintf("%s %q contains a NUL byte", what, s))
}

// txnExtra validates t for C and returns the arena bytes its features and strings need
// beyond the risk_txn struct itself (alignment slack included).
func txnExtra(t *Txn) (uintptr, error) {
	n := uintptr(len(t.Currency)+1) + 8
	if err := checkText("currency", t.Currency); err != nil {
		return 0, err
	}
	if t.Country != "" {
		if err := checkText("country", t.Country); err != nil {
			return 0, err
		}
		n += uintptr(len(t.Country) + 1)
	}
	if t.Channel != "" {
		if err := checkText("channel", string(t.Channel)); err != nil {
			return 0, err
		}
		n += uintptr(len(t.Channel) + 1)
	}
	for _, k := range [...]struct{ what, s string }{{"merchant", t.Merchant}, {"ip", t.IP}, {"email", t.Email}} {
		if k.s != "" {
			if err := checkText(k.what, k.s); err != nil {
				return 0, err
			}
			n += uintptr(len(k.s) + 1)
		}
	}
	if len(t.Features) > 0 {
		n += uintptr(len(t.Features))*sizeofFeature + 8
		for name, f := range t.Features {
			if strings.IndexByte(name, 0) >= 0 {
				return 0, nulError("feature name", name)
			}
			n += uintptr(len(name) + 1)
			if f.IsCategory {
				if strings.IndexByte(f.Category, 0) >= 0 {
					return 0, nulError("category of feature "+name, f.Category)
				}
				n += uintptr(len(f.Category) + 1)
			}
		}
	}
	return n, nil
}

// optStr is s in a, or NULL for "" (unset).
func (a *arena) optStr(s string) *C.char {
	if s == "" {
		return nil
	}
	return a.str(s)
}

// fillTxn writes every field of ct (arena memory is not zeroed) from t, with its features
// and strings in a (sized by txnExtra).
func (a *arena) fillTxn(ct *C.risk_txn, t *Txn) {
	ct.id = C.uint64_t(t.ID)
	ct.entity = C.uint64_t(t.Entity)
	if t.Time.IsZero() {
		ct.timestamp_ms = 0
	} else {
		ct.timestamp_ms = C.int64_t(t.Time.UnixMilli())
	}
	ct.amount = C.double(t.Amount)
	ct.mcc = C.uint16_t(t.MCC)
	ct.device = C.uint64_t(t.Device)
	ct.features = nil
	ct.n_features = 0
	if n := len(t.Features); n > 0 {
		fs := unsafe.Slice((*C.risk_feature)(a.alloc(uintptr(n)*sizeofFeature, 8)), n)
		i := 0
		for name, f := range t.Features {
			fs[i].name = a.str(name)
			if f.IsCategory {
				fs[i].value = 0
				fs[i].category = a.str(f.Category)
			} else {
				fs[i].value = C.double(f.Value)
				fs[i].category = nil
			}
			i++
		}
		ct.features = &fs[0]
		ct.n_features = C.size_t(n)
	}
	ct.currency = a.str(t.Currency)
	ct.country = a.optStr(t.Country)
	ct.channel = a.optStr(string(t.Channel))
	ct.merchant = a.optStr(t.Merchant)
	ct.ip = a.optStr(t.IP)
	ct.email = a.optStr(t.Email)
}

// ----- decisions -----

var actionNames = [...]Action{ActionApprove, ActionReview, ActionDecline}
var tierNames = [...]Tier{TierRules, TierFast, TierStatic}
var escalationNames = [...]Escalation{EscalationNone, EscalationEnqueued, EscalationShed}
var fallbackNames = [...]Fallback{FallbackNone, FallbackTimeout, FallbackError, FallbackPanic,
	FallbackInvalidScore, FallbackCircuitOpen, FallbackAbsent, FallbackSaturated}

// enumName maps a code to its name; codes past the table are "unknown(n)" (the header
// defines no "unknown" code for actions and escalations).
func enumName[T ~string](names []T, code uint8) T {
	if int(code) < len(names) {
		return names[code]
	}
	return T(fmt.Sprintf("unknown(%d)", code))
}

// orUnknown maps a code to its name; CodeUnknown (255), or any other code past the table,
// is unknown.
func orUnknown[T ~string](names []T, code uint8, unknown T) T {
	if int(code) < len(names) {
		return names[code]
	}
	return unknown
}

func tierName(code uint8) Tier { return orUnknown(tierNames[:], code, TierUnknown) }

func fallbackName(code uint8) Fallback {
	return orUnknown(fallbackNames[:], code, FallbackUnknown)
}

func sourceName(code uint8) VerdictSource {
	return orUnknown(sourceNames[:], code, SourceUnknown)
}

func failureName(code uint8) VerdictFailure {
	return orUnknown(failureNames[:], code, FailureUnknown)
}

// reasonNames caches risk_reason_name: codes are interned for the process's lifetime.
var reasonNames sync.Map // uint32 -> string

func reasonName(code uint32) string {
	if v, ok := reasonNames.Load(code); ok {
		return v.(string)
	}
	buf := make([]byte, 128)
	for range 4 {
		r := C.gorisk_reason_name(C.uint32_t(code), (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
		switch r.rc {
		case C.RISK_OK:
			name := string(buf[:r.n])
			reasonNames.Store(code, name)
			return name
		case C.RISK_ERR_BUFFER_TOO_SMALL:
			takeMsg(r)
			buf = make([]byte, int(r.n)+1)
		default:
			takeMsg(r)
			return fmt.Sprintf("reason#%d", code)
		}
	}
	return fmt.Sprintf("reason#%d", code)
}

func fromC(d *C.risk_decision) Decision {
	out := Decision{
		TxnID:          uint64(d.txn),
		Entity:         uint64(d.entity),
		Action:         enumName(actionNames[:], uint8(d.action)),
		Tier:           tierName(uint8(d.tier)),
		Fallback:       fallbackName(uint8(d.fallback)),
		Escalation:     enumName(escalationNames[:], uint8(d.escalation)),
		Ticket:         uint64(d.ticket),
		HardRule:       bool(d.hard_rule),
		State:          EntityState(d.state),
		Score:          float32(d.score),
		RuleScore:      float32(d.rule_score),
		ModelScore:     float32(d.model_score),
		ThresholdShift: float32(d.threshold_shift),
		RulesTime:      time.Duration(d.rules_ns),
		FastTime:       time.Duration(d.fast_ns),
		TotalTime:      time.Duration(d.total_ns),
	}
	n := min(int(d.n_reasons), C.RISK_MAX_REASONS)
	if n > 0 {
		out.Reasons = make([]Reason, n)
		for i := range n {
			r := &d.reasons[i]
			out.Reasons[i] = Reason{Code: reasonName(uint32(r.code)), Weight: float32(r.weight)}
		}
	}
	return out
}

// ----- engine -----

// Engine decides transactions. It is safe for concurrent use.
type Engine struct {
	mu      sync.RWMutex // read: a call in flight; write: Close
	h       unsafe.Pointer
	cleanup runtime.Cleanup
	// metricsHint is the last metrics JSON size, to size the next buffer.
	metricsHint atomic.Int64
	// metricsTextHint is the last metrics text size, to size the next buffer.
	metricsTextHint atomic.Int64
}

func newEngine(r C.gorisk_res) (*Engine, error) {
	if r.rc != C.RISK_OK {
		return nil, errorOf(r)
	}
	e := &Engine{h: r.ptr}
	e.cleanup = runtime.AddCleanup(e, func(h unsafe.Pointer) { C.gorisk_engine_free(h) }, r.ptr)
	return e, nil
}

// NewFromPath builds an engine from a risk.toml file; relative paths inside it resolve
// against the file's directory.
func NewFromPath(path string) (*Engine, error) {
	if err := checkText("path", path); err != nil {
		return nil, err
	}
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	return newEngine(C.gorisk_new_from_path(cp))
}

// NewFromTOML builds an engine from risk.toml text; relative paths inside it resolve
// against baseDir ("" = the current directory).
func NewFromTOML(text, baseDir string) (*Engine, error) {
	var cdir *C.char
	if baseDir != "" {
		if err := checkText("baseDir", baseDir); err != nil {
			return nil, err
		}
		cdir = C.CString(baseDir)
		defer C.free(unsafe.Pointer(cdir))
	}
	// The text is read in place (it holds no Go pointers, and C does not keep it).
	r := C.gorisk_new_from_toml(nonNil(text), C.size_t(len(text)), cdir)
	runtime.KeepAlive(text)
	return newEngine(r)
}

// emptyByte backs the data pointer of empty inputs. The library accepts NULL with a length
// of 0 as empty text; older versions refused it (RISK_ERR_NULL), so a valid pointer is
// passed either way.
var emptyByte = C.CString("")

// nonNil returns a pointer to s's bytes, read by C during the call only. s holds no Go
// pointers, so passing it obeys the cgo pointer rules.
func nonNil(s string) *C.char {
	if len(s) == 0 {
		return emptyByte
	}
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s)))
}

// acquire takes the engine's read lock and returns its handle, or an ErrHandle error
// once the engine is closed.
func (e *Engine) acquire() (unsafe.Pointer, error) {
	e.mu.RLock()
	if e.h == nil {
		e.mu.RUnlock()
		return nil, errEngineClosed
	}
	return e.h, nil
}

// Close shuts the engine down (abandoning queued deep-tier work) and frees it. It waits
// for this Engine's calls in flight (so that none runs once Close returns; the library
// would not need it: it refuses freed handles, and a call in flight finishes on its own
// reference). Calling it again is a no-op. Later method calls return an ErrHandle error.
// Subscriptions stay valid: Poll returns the verdicts already buffered, then ErrClosed.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.h == nil {
		return nil
	}
	e.cleanup.Stop()
	C.gorisk_engine_free(e.h)
	e.h = nil
	return nil
}

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
	h, err := e.acquire()
	if err != nil {
		return Decision{}, err
	}
	r := C.gorisk_decide(h, ct, d)
	e.mu.RUnlock()
	if r.rc != C.RISK_OK {
		return Decision{}, errorOf(r)
	}
	return fromC(d), nil
}

// DecideJSON decides a transaction given as JSON: {"id", "entity", "timestamp_ms",
// "amount", "currency", "mcc", "country", "channel", "device", "merchant", "ip", "email",
// "features": {name: number | string | null}}; amount and currency are required, unknown
// keys rejected.
func (e *Engine) DecideJSON(js string) (Decision, error) {
	a := getArena(sizeofDecision)
	defer putArena(a)
	d := (*C.risk_decision)(a.alloc(sizeofDecision, 8))
	h, err := e.acquire()
	if err != nil {
		return Decision{}, err
	}
	r := C.gorisk_decide_json(h, nonNil(js), C.size_t(len(js)), d)
	runtime.KeepAlive(js)
	e.mu.RUnlock()
	if r.rc != C.RISK_OK {
		return Decision{}, errorOf(r)
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
	h, err := e.acquire()
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return decs, errs
	}
	defer e.mu.RUnlock()
	for start := 0; start < len(txns); start += MaxBatch {
		end := min(start+MaxBatch, len(txns))
		decideChunk(h, txns[start:end], decs[start:end], errs[start:end], start)
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
	if r.rc != C.RISK_OK {
		err := errorOf(r)
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

// Metrics returns every engine metric (risk_engine_metrics_json), decoded from JSON.
func (e *Engine) Metrics() (map[string]any, error) {
	h, err := e.acquire()
	if err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	size := int(e.metricsHint.Load()) + 256
	for range 8 {
		buf := make([]byte, size)
		r := C.gorisk_metrics(h, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
		switch r.rc {
		case C.RISK_OK:
			e.metricsHint.Store(int64(r.n))
			var m map[string]any
			if err := json.Unmarshal(buf[:r.n], &m); err != nil {
				return nil, fmt.Errorf("risk: decoding metrics JSON: %w", err)
			}
			return m, nil
		case C.RISK_ERR_BUFFER_TOO_SMALL:
			takeMsg(r)
			// The metrics may grow between two calls: leave some room.
			size = int(r.n) + 1 + int(r.n)/8
		default:
			return nil, errorOf(r)
		}
	}
	return nil, newError(codeBufferTooSmall, "metrics kept outgrowing the buffer")
}

// MetricsText returns every engine metric in the Prometheus/OpenMetrics text exposition
// format (risk_engine_metrics_text), names prefixed risk_, ending with "# EOF": what a
// /metrics endpoint serves to Prometheus (the library starts no server).
func (e *Engine) MetricsText() (string, error) {
	h, err := e.acquire()
	if err != nil {
		return "", err
	}
	defer e.mu.RUnlock()
	text, err := readText(int(e.metricsTextHint.Load())+256, "metrics text", func(buf []byte) C.gorisk_res {
		return C.gorisk_metrics_text(h, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	})
	if err != nil {
		return "", err
	}
	e.metricsTextHint.Store(int64(len(text)))
	return string(text), nil
}

// readText reads a (buf, cap, *len) text: call(buf) is one C call into buf; the first
// buffer has size bytes, the next what the library said it needs, with slack (the text
// can grow between two calls: counters move, a live engine appends to its log).
func readText(size int, what string, call func(buf []byte) C.gorisk_res) ([]byte, error) {
	for range 8 {
		buf := make([]byte, size)
		r := call(buf)
		switch r.rc {
		case C.RISK_OK:
			return buf[:r.n], nil
		case C.RISK_ERR_BUFFER_TOO_SMALL:
			takeMsg(r)
			size = int(r.n) + 1 + max(256, int(r.n)/8)
		default:
			return nil, errorOf(r)
		}
	}
	return nil, newError(codeBufferTooSmall, what+" kept outgrowing the buffer")
}

// auditQueryText is risk_audit_query_json of dir and the query JSON text.
func auditQueryText(dir string, query []byte) ([]byte, error) {
	if err := checkText("dir", dir); err != nil {
		return nil, err
	}
	cdir := C.CString(dir)
	defer C.free(unsafe.Pointer(cdir))
	cq := C.CString(string(query)) // JSON text: a NUL inside a string is escaped
	defer C.free(unsafe.Pointer(cq))
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
	h, err := e.acquire()
	if err != nil {
		return 0, err
	}
	defer e.mu.RUnlock()
	r := C.gorisk_audit_flush(h, millis(timeout))
	if r.rc != C.RISK_OK {
		return 0, errorOf(r)
	}
	return uint64(r.a), nil
}

// AuditStats returns the audit log's counters (risk_engine_audit_stats_json): accepted,
// shed_full, shed_closed, written_seq, durable_seq, batches, io_errors, last_error,
// segments_deleted, recovery {segment, truncated_bytes, corrupt, last_seq}. Numbers are
// json.Number (exact for 64-bit counters). ErrInvalid when the engine has no [audit] log.
func (e *Engine) AuditStats() (map[string]any, error) {
	h, err := e.acquire()
	if err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	text, err := readText(512, "audit stats", func(buf []byte) C.gorisk_res {
		return C.gorisk_audit_stats(h, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	})
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := decodeJSON(text, &m); err != nil {
		return nil, fmt.Errorf("risk: decoding audit stats JSON: %w", err)
	}
	return m, nil
}

// ReloadRules reloads the engine's rule file. On failure (ErrReload) the serving rules are
// unchanged.
func (e *Engine) ReloadRules() error {
	h, err := e.acquire()
	if err != nil {
		return err
	}
	defer e.mu.RUnlock()
	if r := C.gorisk_reload(h); r.rc != C.RISK_OK {
		return errorOf(r)
	}
	return nil
}

// millis converts d to the C ABI's uint32 milliseconds: rounded up, so that a positive
// duration never becomes 0 (which means "do not wait"), and clamped to the uint32 range.
func millis(d time.Duration) C.uint32_t {
	if d <= 0 {
		return 0
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxUint32 {
		ms = math.MaxUint32
	}
	return C.uint32_t(ms)
}

// Shutdown stops the engine: later decides fail with ErrShutDown. With drain > 0 it waits
// up to drain (rounded up to whole milliseconds) for queued deep-tier work; with 0 it
// abandons it. The Engine must still be closed.
func (e *Engine) Shutdown(drain time.Duration) (drained, abandoned uint64, err error) {
	h, err := e.acquire()
	if err != nil {
		return 0, 0, err
	}
	defer e.mu.RUnlock()
	r := C.gorisk_shutdown(h, millis(drain))
	if r.rc != C.RISK_OK {
		return 0, 0, errorOf(r)
	}
	return uint64(r.a), uint64(r.b), nil
}

// Subscribe subscribes to deep-tier verdicts from now on. A slow reader loses verdicts
// (the channel is bounded) rather than blocking the deep tier.
func (e *Engine) Subscribe() (*Subscription, error) {
	h, err := e.acquire()
	if err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	r := C.gorisk_subscribe(h)
	if r.rc != C.RISK_OK {
		return nil, errorOf(r)
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

var sourceNames = [...]VerdictSource{SourceModel, SourceCachedAverage, SourceGlobalPrior}
var failureNames = [...]VerdictFailure{FailureNone, FailureTimeout, FailureError, FailureSaturated, FailureCircuitOpen}

func verdictFromC(v *C.risk_verdict) Verdict {
	return Verdict{
		Ticket:    uint64(v.ticket),
		TxnID:     uint64(v.txn),
		Entity:    uint64(v.entity),
		Score:     float32(v.score),
		FastScore: float32(v.fast_score),
		Source:    sourceName(uint8(v.source)),
		Failure:   failureName(uint8(v.failure)),
		Latency:   time.Duration(v.latency_ns),
	}
}

// rawHandle and decideRaw let the tests call risk_engine_decide with a handle after Close,
// to check that the library itself refuses freed handles.
func (e *Engine) rawHandle() unsafe.Pointer {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.h
}

// libFallbackName is risk_fallback_name itself (for the test that the binding's names
// match the library's).
func libFallbackName(code uint8) string {
	return C.GoString(C.risk_fallback_name(C.uint8_t(code)))
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
	if r := C.gorisk_decide(h, ct, d); r.rc != C.RISK_OK {
		return errorOf(r)
	}
	return nil
}
