package risk

import _ "embed" // nativeLibSHA256

// nativeLibSHA256 is lib/linux_amd64/librisk_ffi.a.sha256, the SHA-256 of the archive
// risk.go links, written beside it by go generate (gen_native.sh), in sha256sum's format.
//
// It is embedded so that the archive's content is an input of this package: the go command
// does not hash a library named in #cgo LDFLAGS, so after a new archive it would otherwise
// reuse the package, binaries (go run) and test results built with the old one. A build
// before `go generate` fails here, with "pattern lib/linux_amd64/librisk_ffi.a.sha256: no
// matching files found", before cgo gets to a missing archive.
//
//go:embed lib/linux_amd64/librisk_ffi.a.sha256
var nativeLibSHA256 string
