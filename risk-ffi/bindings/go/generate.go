package risk

// `go generate` builds the C ABI and copies its static library to lib/<goos>_<goarch>/,
// where risk.go's #cgo LDFLAGS link it (gen_native.sh; README.md, "Building and testing").
// The directive is in this file, which has no build constraint and no cgo, so that go
// generate finds it on every platform and with cgo off too: gen_native.sh then says what
// is missing instead of go generate silently doing nothing.
//
//go:generate bash gen_native.sh
