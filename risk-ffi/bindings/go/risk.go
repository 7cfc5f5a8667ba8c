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
#include "gorisk.h"
*/
import "C"

// The package in files, one concept each: engine.go (build, close, reload, shut down),
// decide.go (one, JSON, batches), results.go (decisions and verdicts decoded from C),
// subscription.go (deep-tier verdicts), metrics.go, audit.go, state.go, deploy.go,
// observe.go (health, kill switches, monitors, drills), arena.go (C memory for a call),
// call.go (the one helper every C call goes through), types.go and errors.go.

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
