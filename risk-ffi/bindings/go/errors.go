package risk

import "fmt"

// Error is a failure reported by the risk library (or by this binding, for input it cannot
// pass to C, such as a string containing a NUL byte).
//
// Code is the C ABI's risk_result number and Name its constant name (e.g.
// "RISK_ERR_TRANSACTION"); Message is the library's thread-local message
// (risk_last_error), captured inside the same cgo call as the failing function.
//
// Compare with the sentinels using errors.Is, which matches on Code:
//
//	if errors.Is(err, risk.ErrTransaction) { ... }
type Error struct {
	Code    int
	Name    string
	Message string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Message == "" {
		return "risk: " + e.Name
	}
	return "risk: " + e.Name + ": " + e.Message
}

// Is reports whether target is an *Error with the same Code, so that
// errors.Is(err, risk.ErrShutDown) works for any message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && e != nil && t.Code == e.Code
}

// Result codes of the C ABI (enum risk_result in risk.h). Stable numbers.
const (
	codeOK             = 0
	codeNull           = 1
	codeUTF8           = 2
	codeInvalid        = 3
	codeConfig         = 4
	codeTransaction    = 5
	codeShutDown       = 6
	codePanic          = 7
	codeBufferTooSmall = 8
	codeJSON           = 9
	codeHandle         = 10
	codeEmpty          = 11
	codeReload         = 12
	codeClosed         = 13
	codeAudit          = 14
	codeDeploy         = 15
	codeState          = 16
)

var codeNames = [...]string{
	codeOK:             "RISK_OK",
	codeNull:           "RISK_ERR_NULL",
	codeUTF8:           "RISK_ERR_UTF8",
	codeInvalid:        "RISK_ERR_INVALID",
	codeConfig:         "RISK_ERR_CONFIG",
	codeTransaction:    "RISK_ERR_TRANSACTION",
	codeShutDown:       "RISK_ERR_SHUT_DOWN",
	codePanic:          "RISK_ERR_PANIC",
	codeBufferTooSmall: "RISK_ERR_BUFFER_TOO_SMALL",
	codeJSON:           "RISK_ERR_JSON",
	codeHandle:         "RISK_ERR_HANDLE",
	codeEmpty:          "RISK_ERR_EMPTY",
	codeReload:         "RISK_ERR_RELOAD",
	codeClosed:         "RISK_ERR_CLOSED",
	codeAudit:          "RISK_ERR_AUDIT",
	codeDeploy:         "RISK_ERR_DEPLOY",
	codeState:          "RISK_ERR_STATE",
}

// CodeName returns the risk.h name of a result code ("RISK_ERR_JSON"), or
// "RISK_ERR_UNKNOWN(n)" for a code this binding does not know (codes are only ever
// appended, so a newer library may return one).
func CodeName(code int) string {
	if code >= 0 && code < len(codeNames) {
		return codeNames[code]
	}
	return fmt.Sprintf("RISK_ERR_UNKNOWN(%d)", code)
}

func newError(code int, msg string) *Error {
	return &Error{Code: code, Name: CodeName(code), Message: msg}
}

// Sentinels, one per risk_result failure code, for errors.Is.
var (
	// ErrNull: a required pointer was NULL.
	ErrNull = newError(codeNull, "")
	// ErrUTF8: a string was not valid UTF-8.
	ErrUTF8 = newError(codeUTF8, "")
	// ErrInvalid: an argument was out of range (a length, a code, an option), or a string
	// holds a NUL byte.
	ErrInvalid = newError(codeInvalid, "")
	// ErrConfig: the configuration could not build an engine.
	ErrConfig = newError(codeConfig, "")
	// ErrTransaction: the transaction was rejected (the message names the field).
	ErrTransaction = newError(codeTransaction, "")
	// ErrShutDown: the engine was shut down.
	ErrShutDown = newError(codeShutDown, "")
	// ErrPanic: a Rust panic was caught inside the library (a bug).
	ErrPanic = newError(codePanic, "")
	// ErrBufferTooSmall: internal; the binding retries with a larger buffer.
	ErrBufferTooSmall = newError(codeBufferTooSmall, "")
	// ErrJSON: malformed transaction JSON.
	ErrJSON = newError(codeJSON, "")
	// ErrHandle: a closed (freed) engine or subscription. Methods of an Engine or
	// Subscription after its Close return an ErrHandle error.
	ErrHandle = newError(codeHandle, "")
	// ErrEmpty: nothing to return yet: a poll that timed out (not returned by Poll, which
	// reports ok=false with a nil error instead: poll again), or LastDrillReport before any
	// drill.
	ErrEmpty = newError(codeEmpty, "")
	// ErrReload: the rule reload failed or the engine has no rule file.
	ErrReload = newError(codeReload, "")
	// ErrClosed (RISK_ERR_CLOSED): no more verdicts will ever come to a Subscription,
	// because its engine has no deep tier or was freed. Poll returns it, at once, once the
	// verdicts already buffered have been read: stop polling. Not to be confused with using
	// a closed Engine or Subscription, which is ErrHandle.
	ErrClosed = newError(codeClosed, "")
	// ErrAudit (RISK_ERR_AUDIT): the audit log failed: an AuditFlush timed out, the log is
	// closed (the engine was shut down), or a write failed; the message says which.
	ErrAudit = newError(codeAudit, "")
	// ErrDeploy (RISK_ERR_DEPLOY): a Deploy, Promote or Rollback was refused; the message
	// says why (the validation gate and which check, a candidate that does not load or warm
	// up, a schema mismatch, a deploy of the target in progress, nothing to promote or roll
	// back to). What serves is unchanged: a refused candidate never serves.
	ErrDeploy = newError(codeDeploy, "")
	// ErrState (RISK_ERR_STATE): entity state refused the call; the message says why (a
	// label for an unknown or evicted transaction, dated before it, or with no label
	// feature; an unknown list or a value that cannot be one of its keys; a bad list file,
	// named file:line; a snapshot that could not be written; an engine without a [state]
	// section).
	ErrState = newError(codeState, "")
)

// Errors of methods called after Close (RISK_ERR_HANDLE; errors.Is(err, ErrHandle)).
var (
	errEngineClosed       = newError(codeHandle, "the engine is closed")
	errSubscriptionClosed = newError(codeHandle, "the subscription is closed")
)
