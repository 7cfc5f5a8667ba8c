// The one helper every C call goes through (handle, lock, result code to Go error,
// message freed) and the conversions of its arguments.

package risk

/*
#include "gorisk.h"
*/
import "C"

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unsafe"
)

// ===== the call helper =====

// call makes one C call on the engine's handle: it takes the engine's read lock (an
// ErrHandle error once the engine is closed), runs f with the handle, releases the lock
// and turns a failed result into an *Error (freeing the copied message). Every call of
// the C ABI on an engine goes through call, or through with when several C calls must
// see the same handle.
func (e *Engine) call(f func(h unsafe.Pointer) C.gorisk_res) (C.gorisk_res, error) {
	h, err := e.acquire()
	if err != nil {
		return C.gorisk_res{}, err
	}
	defer e.mu.RUnlock()
	r := f(h)
	return r, check(r)
}

// with runs f with the engine's handle under its read lock: for several C calls that
// must see the same engine (a batch in chunks, a drill and its report, a text read again
// into a larger buffer).
func (e *Engine) with(f func(h unsafe.Pointer) error) error {
	h, err := e.acquire()
	if err != nil {
		return err
	}
	defer e.mu.RUnlock()
	return f(h)
}

// textOf reads one (buf, cap, *len) text of the engine: size is the first buffer's size.
func (e *Engine) textOf(size int, what string, call func(h unsafe.Pointer, buf *C.char, n C.size_t) C.gorisk_res) (string, error) {
	var text []byte
	err := e.with(func(h unsafe.Pointer) error {
		var err error
		text, err = readText(size, what, func(buf []byte) C.gorisk_res {
			return call(h, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
		})
		return err
	})
	if err != nil {
		return "", err
	}
	return string(text), nil
}

// acquire takes the engine's read lock and returns its handle, or an ErrHandle error
// once the engine is closed.
func (e *Engine) acquire() (unsafe.Pointer, error) {
	e.mu.RLock()
	if e.h == nil {
		e.mu.RUnlock()
		return nil, errEngineClosed
	}
	return e.h, nil
}

// check is nil for RISK_OK, else the failure as an *Error (its copied message freed).
func check(r C.gorisk_res) error {
	if r.rc == C.RISK_OK {
		return nil
	}
	return errorOf(r)
}

// errorOf turns a failed wrapper result into an *Error and frees the copied message.
func errorOf(r C.gorisk_res) *Error {
	return newError(int(r.rc), takeMsg(r))
}

func takeMsg(r C.gorisk_res) string {
	if r.err == nil {
		return ""
	}
	msg := C.GoString(r.err)
	C.free(unsafe.Pointer(r.err))
	return msg
}

// readText reads a (buf, cap, *len) text: call(buf) is one C call into buf; the first
// buffer has size bytes, the next what the library said it needs, with slack (the text
// can grow between two calls: counters move, a live engine appends to its log).
func readText(size int, what string, call func(buf []byte) C.gorisk_res) ([]byte, error) {
	for range 8 {
		buf := make([]byte, size)
		r := call(buf)
		switch r.rc {
		case C.RISK_OK:
			return buf[:r.n], nil
		case C.RISK_ERR_BUFFER_TOO_SMALL:
			takeMsg(r)
			size = int(r.n) + 1 + max(256, int(r.n)/8)
		default:
			return nil, errorOf(r)
		}
	}
	return nil, newError(codeBufferTooSmall, what+" kept outgrowing the buffer")
}

// ===== arguments =====

// cStrings holds the C copies of one call's string arguments.
type cStrings []*C.char

// add returns s as a C string, or NULL for an optional empty s; ErrInvalid when s holds
// a NUL byte.
func (cs *cStrings) add(what, s string, optional bool) (*C.char, error) {
	if optional && s == "" {
		return nil, nil
	}
	if err := checkText(what, s); err != nil {
		return nil, err
	}
	p := C.CString(s)
	*cs = append(*cs, p)
	return p, nil
}

func (cs cStrings) free() {
	for _, p := range cs {
		C.free(unsafe.Pointer(p))
	}
}

func checkText(what, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return nulError(what, s)
	}
	return nil
}

func nulError(what, s string) error {
	return newError(codeInvalid, fmt.Sprintf("%s %q contains a NUL byte", what, s))
}

// emptyByte backs the data pointer of empty inputs. The library accepts NULL with a length
// of 0 as empty text; older versions refused it (RISK_ERR_NULL), so a valid pointer is
// passed either way.
var emptyByte = C.CString("")

// nonNil returns a pointer to s's bytes, read by C during the call only. s holds no Go
// pointers, so passing it obeys the cgo pointer rules.
func nonNil(s string) *C.char {
	if len(s) == 0 {
		return emptyByte
	}
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s)))
}

// millis converts d to the C ABI's uint32 milliseconds: rounded up, so that a positive
// duration never becomes 0 (which means "do not wait"), and clamped to the uint32 range.
func millis(d time.Duration) C.uint32_t {
	if d <= 0 {
		return 0
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxUint32 {
		ms = math.MaxUint32
	}
	return C.uint32_t(ms)
}
