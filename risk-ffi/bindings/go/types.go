package risk

import (
	"fmt"
	"math"
	"time"
)

// Channel is the payment channel of a transaction. The zero value means unset.
type Channel string

// Channels accepted by the engine.
const (
	ChannelUnset Channel = ""
	ChannelPOS   Channel = "pos"
	ChannelEcom  Channel = "ecom"
	ChannelATM   Channel = "atm"
	ChannelMOTO  Channel = "moto"
	ChannelApp   Channel = "app"
)

// Feature is the value of one extra schema field: numeric (NaN = missing) or categorical.
// Build one with Num, Cat or Missing.
type Feature struct {
	// Value is the numeric value (NaN = missing). Ignored when IsCategory.
	// Note: the engine stores numeric features as float32.
	Value float64
	// Category is the categorical value when IsCategory.
	Category string
	// IsCategory selects Category over Value.
	IsCategory bool
}

// Num is a numeric feature value (NaN = missing).
func Num(v float64) Feature { return Feature{Value: v} }

// Cat is a categorical feature value.
func Cat(s string) Feature { return Feature{Category: s, IsCategory: true} }

// Missing is an explicitly missing numeric feature (NaN); the field must exist in the schema.
func Missing() Feature { return Feature{Value: math.NaN()} }

// Txn is a transaction to decide.
type Txn struct {
	// ID of the transaction, echoed in Decision.TxnID.
	ID uint64
	// Entity is the card or account the transaction belongs to.
	Entity uint64
	// Time is the event time (millisecond precision); the zero Time is sent as 0 ms.
	Time time.Time
	// Amount in Currency (required, finite, non-negative).
	Amount float64
	// Currency is an ISO 4217 code, e.g. "USD" (required).
	Currency string
	// MCC is the merchant category code (0 = unset).
	MCC uint16
	// Country is an ISO 3166-1 alpha-2 code ("" = unset).
	Country string
	// Channel ("" = unset).
	Channel Channel
	// Device id (0 = unset).
	Device uint64
	// Merchant is the merchant or terminal id ("" = unset): an entity-state key, hashed by
	// the library.
	Merchant string
	// IP is the client's IP address ("" = unset): an entity-state key, hashed as text.
	IP string
	// Email is the e-mail address ("" = unset): an entity-state key, trimmed, lower-cased
	// and hashed by the library.
	Email string
	// Features are extra schema fields by name (at most MaxFeatures). Numeric values are
	// stored as float32: a finite value outside its range is refused (ErrTransaction).
	Features map[string]Feature
}

// Action is what to do with a transaction.
type Action string

// Actions.
const (
	ActionApprove Action = "approve"
	ActionReview  Action = "review"
	ActionDecline Action = "decline"
)

// Tier is the tier that decided.
type Tier string

// Tiers.
const (
	// TierRules: the rule tier decided (the fast tier failed or is absent).
	TierRules Tier = "rules"
	// TierFast: the fast model decided.
	TierFast Tier = "fast"
	// TierStatic: the configured static action (even the rules failed).
	TierStatic Tier = "static"
	// TierUnknown: a tier this binding does not know (RISK_CODE_UNKNOWN, from a newer
	// library).
	TierUnknown Tier = "unknown"
)

// Fallback is why the fast tier did not decide ("none" when it did).
type Fallback string

// Fallback causes (names as risk_fallback_name returns them).
const (
	FallbackNone         Fallback = "none"
	FallbackTimeout      Fallback = "timeout"
	FallbackError        Fallback = "error"
	FallbackPanic        Fallback = "panic"
	FallbackInvalidScore Fallback = "invalid_score"
	FallbackCircuitOpen  Fallback = "circuit_open"
	FallbackAbsent       Fallback = "absent"
	FallbackSaturated    Fallback = "saturated"
	// FallbackUnknown: a cause this binding does not know (RISK_CODE_UNKNOWN, from a
	// newer library).
	FallbackUnknown Fallback = "unknown"
)

// Escalation says whether the decision was sent to the deep tier.
type Escalation string

// Escalations.
const (
	EscalationNone     Escalation = "none"
	EscalationEnqueued Escalation = "enqueued" // Decision.Ticket is set
	EscalationShed     Escalation = "shed"     // queue full, no deep tier, or shutting down
)

// EntityState is what entity state did for a decision (risk_decision.state). Its String
// method gives the name: "off", "fresh", "timeout", "error", "unavailable", or
// "unknown(n)" for a code this binding does not know.
type EntityState uint8

// Entity states (risk_decision.state codes).
const (
	// EntityStateOff: no [state] section, or the transaction has no event time (zero Txn.Time).
	EntityStateOff EntityState = 0
	// EntityStateFresh: the state features were computed.
	EntityStateFresh EntityState = 1
	// EntityStateTimeout, EntityStateError, EntityStateUnavailable: the state store
	// failed and the state features are missing.
	EntityStateTimeout     EntityState = 2
	EntityStateError       EntityState = 3
	EntityStateUnavailable EntityState = 4
)

var entityStateNames = [...]string{"off", "fresh", "timeout", "error", "unavailable"}

// String is the state's name ("unknown(n)" past the known codes).
func (s EntityState) String() string {
	if int(s) < len(entityStateNames) {
		return entityStateNames[s]
	}
	return fmt.Sprintf("unknown(%d)", uint8(s))
}

// Reason is one reason code and its contribution.
type Reason struct {
	Code   string // e.g. "ACCOUNT_TAKEOVER", "xgb:amount"
	Weight float32
}

// Decision is the engine's answer for one transaction.
type Decision struct {
	TxnID      uint64
	Entity     uint64
	Action     Action
	Tier       Tier
	Fallback   Fallback
	Escalation Escalation
	// Ticket of the deep-tier request when Escalation is EscalationEnqueued, else 0.
	Ticket uint64
	// HardRule: a hard rule set the action.
	HardRule bool
	// State is what entity state did for this decision (off, fresh, or a store failure).
	State EntityState
	// Score the action was taken on.
	Score float32
	// RuleScore is the rule tier's probability (NaN if the rule tier failed).
	RuleScore float32
	// ModelScore is the fast tier's probability (NaN when it did not answer validly).
	ModelScore float32
	// ThresholdShift from deep-tier feedback.
	ThresholdShift float32
	// Reasons, deciding tier first (at most 8).
	Reasons []Reason
	// Stage timings measured by the engine.
	RulesTime time.Duration
	FastTime  time.Duration
	TotalTime time.Duration
}

// VerdictSource is where a deep verdict's score came from.
type VerdictSource string

// Verdict sources.
const (
	SourceModel         VerdictSource = "model"
	SourceCachedAverage VerdictSource = "cached_average"
	SourceGlobalPrior   VerdictSource = "global_prior"
	// SourceUnknown: a source this binding does not know (RISK_CODE_UNKNOWN).
	SourceUnknown VerdictSource = "unknown"
)

// VerdictFailure is why the deep model did not answer ("none" when it did).
type VerdictFailure string

// Verdict failures.
const (
	FailureNone      VerdictFailure = "none"
	FailureTimeout   VerdictFailure = "timeout"
	FailureError     VerdictFailure = "error"
	FailureSaturated VerdictFailure = "saturated"
	// FailureCircuitOpen: the deep tier's circuit breaker was open.
	FailureCircuitOpen VerdictFailure = "circuit_open"
	// FailureUnknown: a failure this binding does not know (RISK_CODE_UNKNOWN).
	FailureUnknown VerdictFailure = "unknown"
)

// Verdict is a deep-tier verdict for an escalated decision.
type Verdict struct {
	Ticket    uint64
	TxnID     uint64
	Entity    uint64
	Score     float32
	FastScore float32
	Source    VerdictSource
	Failure   VerdictFailure
	Latency   time.Duration
}
