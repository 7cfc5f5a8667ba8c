module example.com/risk-example

go 1.26.8

require github.com/risk-sdk/risk/bindings/go/risk v0.0.0

// The binding in this repository. Run `go generate` in that directory first: it puts the
// static library librisk_ffi.a where the binding's #cgo directives link it.
replace github.com/risk-sdk/risk/bindings/go/risk => ../../risk-ffi/bindings/go
