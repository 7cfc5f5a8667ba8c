package risk

/*
#include "gorisk.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// ----- C memory arenas -----

// arena is one malloc'd C block holding everything a call passes to C (transaction
// structs, feature arrays, NUL-terminated strings) and the decision it writes back, so that
// no Go pointer is stored in memory C reads. Small arenas are pooled; the C block is freed
// by a runtime cleanup when the pool drops one.
type arena struct {
	base    unsafe.Pointer
	size    uintptr
	off     uintptr
	cleanup runtime.Cleanup
}

const (
	arenaMin       = 1024
	arenaMaxPooled = 64 << 10
)

var arenaPool = sync.Pool{New: func() any { return newArena(arenaMin) }}

func newArena(size uintptr) *arena {
	p := C.malloc(C.size_t(size))
	if p == nil {
		panic(fmt.Sprintf("risk: out of C memory (%d bytes)", size))
	}
	a := &arena{base: p, size: size}
	a.cleanup = runtime.AddCleanup(a, func(p unsafe.Pointer) { C.free(p) }, p)
	return a
}

func (a *arena) destroy() {
	a.cleanup.Stop()
	C.free(a.base)
	a.base = nil
}

func getArena(need uintptr) *arena {
	if need > arenaMaxPooled {
		return newArena(need)
	}
	a := arenaPool.Get().(*arena)
	if a.size < need {
		a.destroy()
		size := uintptr(arenaMin)
		for size < need {
			size *= 2
		}
		a = newArena(size)
	}
	a.off = 0
	return a
}

func putArena(a *arena) {
	if a.size > arenaMaxPooled {
		a.destroy()
		return
	}
	arenaPool.Put(a)
}

func (a *arena) alloc(n, align uintptr) unsafe.Pointer {
	a.off = (a.off + align - 1) &^ (align - 1)
	if a.off+n > a.size {
		panic("risk: arena overflow (binding bug)")
	}
	p := unsafe.Add(a.base, a.off)
	a.off += n
	return p
}

func (a *arena) str(s string) *C.char {
	p := a.alloc(uintptr(len(s))+1, 1)
	b := unsafe.Slice((*byte)(p), len(s)+1)
	copy(b, s)
	b[len(s)] = 0
	return (*C.char)(p)
}

const (
	sizeofTxn      = C.sizeof_risk_txn
	sizeofFeature  = C.sizeof_risk_feature
	sizeofDecision = C.sizeof_risk_decision
	sizeofResult   = C.sizeof_risk_result
)

// txnExtra validates t for C and returns the arena bytes its features and strings need
// beyond the risk_txn struct itself (alignment slack included).
func txnExtra(t *Txn) (uintptr, error) {
	n := uintptr(len(t.Currency)+1) + 8
	if err := checkText("currency", t.Currency); err != nil {
		return 0, err
	}
	if t.Country != "" {
		if err := checkText("country", t.Country); err != nil {
			return 0, err
		}
		n += uintptr(len(t.Country) + 1)
	}
	if t.Channel != "" {
		if err := checkText("channel", string(t.Channel)); err != nil {
			return 0, err
		}
		n += uintptr(len(t.Channel) + 1)
	}
	for _, k := range [...]struct{ what, s string }{{"merchant", t.Merchant}, {"ip", t.IP}, {"email", t.Email}} {
		if k.s != "" {
			if err := checkText(k.what, k.s); err != nil {
				return 0, err
			}
			n += uintptr(len(k.s) + 1)
		}
	}
	if len(t.Features) > 0 {
		n += uintptr(len(t.Features))*sizeofFeature + 8
		for name, f := range t.Features {
			if strings.IndexByte(name, 0) >= 0 {
				return 0, nulError("feature name", name)
			}
			n += uintptr(len(name) + 1)
			if f.IsCategory {
				if strings.IndexByte(f.Category, 0) >= 0 {
					return 0, nulError("category of feature "+name, f.Category)
				}
				n += uintptr(len(f.Category) + 1)
			}
		}
	}
	return n, nil
}

// optStr is s in a, or NULL for "" (unset).
func (a *arena) optStr(s string) *C.char {
	if s == "" {
		return nil
	}
	return a.str(s)
}

// fillTxn writes every field of ct (arena memory is not zeroed) from t, with its features
// and strings in a (sized by txnExtra).
func (a *arena) fillTxn(ct *C.risk_txn, t *Txn) {
	ct.id = C.uint64_t(t.ID)
	ct.entity = C.uint64_t(t.Entity)
	if t.Time.IsZero() {
		ct.timestamp_ms = 0
	} else {
		ct.timestamp_ms = C.int64_t(t.Time.UnixMilli())
	}
	ct.amount = C.double(t.Amount)
	ct.mcc = C.uint16_t(t.MCC)
	ct.device = C.uint64_t(t.Device)
	ct.features = nil
	ct.n_features = 0
	if n := len(t.Features); n > 0 {
		fs := unsafe.Slice((*C.risk_feature)(a.alloc(uintptr(n)*sizeofFeature, 8)), n)
		i := 0
		for name, f := range t.Features {
			fs[i].name = a.str(name)
			if f.IsCategory {
				fs[i].value = 0
				fs[i].category = a.str(f.Category)
			} else {
				fs[i].value = C.double(f.Value)
				fs[i].category = nil
			}
			i++
		}
		ct.features = &fs[0]
		ct.n_features = C.size_t(n)
	}
	ct.currency = a.str(t.Currency)
	ct.country = a.optStr(t.Country)
	ct.channel = a.optStr(string(t.Channel))
	ct.merchant = a.optStr(t.Merchant)
	ct.ip = a.optStr(t.IP)
	ct.email = a.optStr(t.Email)
}
