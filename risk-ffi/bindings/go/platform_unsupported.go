//go:build !(linux && amd64)

package risk

// The package links lib/<goos>_<goarch>/librisk_ffi.a through a #cgo LDFLAGS line of
// risk.go, and only linux/amd64 has one. On any other platform this undefined name fails
// the build with an error that says so, before cgo tries to link a library that is not
// there. Adding a platform: README.md, "Other platforms".
var _ = risk_requires_linux_amd64_prebuilt_library_see_README
