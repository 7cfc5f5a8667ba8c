// Decisions and verdicts decoded from the C structs, with the names of their codes.

package risk

/*
#include "gorisk.h"

static gorisk_res gorisk_reason_name(uint32_t code, char *buf, size_t cap) {
	size_t len = 0;
	gorisk_res r = gorisk_done(risk_reason_name(code, buf, cap, &len));
	r.n = len;
	return r;
}
*/
import "C"

import (
	"fmt"
	"sync"
	"time"
	"unsafe"
)

// ===== decisions =====

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
	text, err := readText(128, "a reason name", func(buf []byte) C.gorisk_res {
		return C.gorisk_reason_name(C.uint32_t(code), (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	})
	if err != nil {
		return fmt.Sprintf("reason#%d", code)
	}
	name := string(text)
	reasonNames.Store(code, name)
	return name
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

// ===== verdicts =====

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

// libFallbackName is risk_fallback_name itself (for the test that the binding's names
// match the library's).
func libFallbackName(code uint8) string {
	return C.GoString(C.risk_fallback_name(C.uint8_t(code)))
}
