// The engine's lifecycle: built from a file or TOML text, rules reloaded, shut down,
// closed.

package risk

/*
#include "gorisk.h"

static gorisk_res gorisk_new_from_path(const char *path) {
	risk_engine *e = NULL;
	gorisk_res r = gorisk_done(risk_engine_new_from_path(path, &e));
	r.ptr = e;
	return r;
}

static gorisk_res gorisk_new_from_toml(const char *toml, size_t len, const char *base_dir) {
	risk_engine *e = NULL;
	gorisk_res r = gorisk_done(risk_engine_new_from_toml((const uint8_t *)toml, len, base_dir, &e));
	r.ptr = e;
	return r;
}

static gorisk_res gorisk_reload(void *e) {
	return gorisk_done(risk_engine_reload_rules((const risk_engine *)e));
}

static gorisk_res gorisk_shutdown(void *e, uint32_t drain_ms) {
	uint64_t drained = 0, abandoned = 0;
	gorisk_res r = gorisk_done(risk_engine_shutdown((const risk_engine *)e, drain_ms, &drained, &abandoned));
	r.a = drained;
	r.b = abandoned;
	return r;
}

static void gorisk_engine_free(void *e) { risk_engine_free((risk_engine *)e); }
*/
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Engine decides transactions. It is safe for concurrent use.
type Engine struct {
	mu      sync.RWMutex // read: a call in flight; write: Close
	h       unsafe.Pointer
	cleanup runtime.Cleanup
	// metricsHint is the last metrics JSON size, to size the next buffer.
	metricsHint atomic.Int64
	// metricsTextHint is the last metrics text size, to size the next buffer.
	metricsTextHint atomic.Int64
}

func newEngine(r C.gorisk_res) (*Engine, error) {
	if err := check(r); err != nil {
		return nil, err
	}
	e := &Engine{h: r.ptr}
	e.cleanup = runtime.AddCleanup(e, func(h unsafe.Pointer) { C.gorisk_engine_free(h) }, r.ptr)
	return e, nil
}

// against the file's directory.
func NewFromPath(path string) (*Engine, error) {
	var cs cStrings
	defer cs.free()
	cp, err := cs.add("path", path, false)
	if err != nil {
		return nil, err
	}
	return newEngine(C.gorisk_new_from_path(cp))
}

// NewFromTOML builds an engine from risk.toml text; relative paths inside it resolve
// against baseDir ("" = the current directory).
func NewFromTOML(text, baseDir string) (*Engine, error) {
	var cs cStrings
	defer cs.free()
	cdir, err := cs.add("baseDir", baseDir, true)
	if err != nil {
		return nil, err
	}
	// The text is read in place (it holds no Go pointers, and C does not keep it).
	r := C.gorisk_new_from_toml(nonNil(text), C.size_t(len(text)), cdir)
	runtime.KeepAlive(text)
	return newEngine(r)
}

// Close shuts the engine down (abandoning queued deep-tier work) and frees it. It waits
// for this Engine's calls in flight (so that none runs once Close returns; the library
// would not need it: it refuses freed handles, and a call in flight finishes on its own
// reference). Calling it again is a no-op. Later method calls return an ErrHandle error.
// Subscriptions stay valid: Poll returns the verdicts already buffered, then ErrClosed.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.h == nil {
		return nil
	}
	e.cleanup.Stop()
	C.gorisk_engine_free(e.h)
	e.h = nil
	return nil
}

// ReloadRules reloads the engine's rule file. On failure (ErrReload) the serving rules are
// unchanged.
func (e *Engine) ReloadRules() error {
	_, err := e.call(func(h unsafe.Pointer) C.gorisk_res { return C.gorisk_reload(h) })
	return err
}

// Shutdown stops the engine: later decides fail with ErrShutDown. With drain > 0 it waits
// up to drain (rounded up to whole milliseconds) for queued deep-tier work; with 0 it
// abandons it. The Engine must still be closed.
func (e *Engine) Shutdown(drain time.Duration) (drained, abandoned uint64, err error) {
	r, err := e.call(func(h unsafe.Pointer) C.gorisk_res { return C.gorisk_shutdown(h, millis(drain)) })
	if err != nil {
		return 0, 0, err
	}
	return uint64(r.a), uint64(r.b), nil
}

// rawHandle and decideRaw let the tests call risk_engine_decide with a handle after Close,
// to check that the library itself refuses freed handles.
func (e *Engine) rawHandle() unsafe.Pointer {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.h
}
