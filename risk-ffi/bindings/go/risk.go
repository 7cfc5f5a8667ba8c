// Package risk is the Go binding of the risk payments-risk SDK, over its C ABI
// (risk-ffi/include/risk.h).
//
// An Engine is safe for concurrent use by any number of goroutines. Close it when done;
// an engine that becomes unreachable without Close is freed by a runtime cleanup.
//
// Linking: the package links the static library lib/<goos>_<goarch>/librisk_ffi.a of the
// module directory through its #cgo directives, so builds need no CGO_* variables and
// binaries do not depend on librisk_ffi.so. Put the library there once with
//
//	cd risk-ffi/bindings/go && go generate
//
// which builds it with cargo (or, with RISK_FFI_LIB_DIR set, copies the one built there).
// Only linux/amd64 has a library layout today; elsewhere the build fails with an error
// naming risk_requires_linux_amd64_prebuilt_library_see_README.
package risk

/*
#cgo CFLAGS: -I${SRCDIR}/../../include -I${SRCDIR}
// The Rust staticlib (built with features risk-core/kafka,risk-core/redis), then the system
// libraries it needs, as rustc --print native-static-libs lists them: OpenSSL and zlib
// (librdkafka), then Rust's std. One line per platform, its library in lib/<goos>_<goarch>/
// (go generate puts it there: generate.go).
#cgo linux,amd64 LDFLAGS: ${SRCDIR}/lib/linux_amd64/librisk_ffi.a -lssl -lcrypto -lz -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
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
