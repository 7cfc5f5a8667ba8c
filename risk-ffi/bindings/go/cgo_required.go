//go:build !cgo

package risk

// The package calls the C ABI of librisk_ffi.a through cgo. Built with cgo disabled
// (CGO_ENABLED=0, or no C compiler on PATH: Go then disables cgo by default), this
// undefined name fails the build with an error that says so.
var _ = risk_requires_cgo_enabled_and_a_C_compiler_see_README
