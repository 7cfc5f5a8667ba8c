package risk

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The archive beside the package is the one this test binary was built from: the SHA-256
// embedded at build time (nativeLibSHA256) is the archive's on disk now. It fails when the
// archive was replaced without `go generate` (so without a new stamp, and the go command
// would not rebuild against it). Reading the archive also makes go test's result cache
// depend on it.
func TestNativeLibraryMatchesEmbeddedSHA256(t *testing.T) {
	fields := strings.Fields(nativeLibSHA256)
	if len(fields) != 2 || fields[1] != "librisk_ffi.a" || len(fields[0]) != sha256.Size*2 {
		t.Fatalf("lib/linux_amd64/librisk_ffi.a.sha256 is not `<sha256>  librisk_ffi.a`: %q (run go generate)", nativeLibSHA256)
	}
	path := filepath.Join("lib", "linux_amd64", "librisk_ffi.a")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != fields[0] {
		t.Fatalf("%s has SHA-256 %s, but this binary was built with %s: the archive was replaced "+
			"without go generate (run go generate, or copy it with gen_native.sh)", path, got, fields[0])
	}
}
