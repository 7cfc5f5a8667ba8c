// The engine's metrics: as JSON and in the Prometheus/OpenMetrics text format.

package risk

/*
#include "gorisk.h"

static gorisk_res gorisk_metrics(void *e, char *buf, size_t cap) {
	size_t len = 0;
	gorisk_res r = gorisk_done(risk_engine_metrics_json((const risk_engine *)e, buf, cap, &len));
	r.n = len;
	return r;
}

static gorisk_res gorisk_metrics_text(void *e, char *buf, size_t cap) {
	size_t len = 0;
	gorisk_res r = gorisk_done(risk_engine_metrics_text((const risk_engine *)e, buf, cap, &len));
	r.n = len;
	return r;
}
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"unsafe"
)

// Metrics returns every engine metric (risk_engine_metrics_json), decoded from JSON.
func (e *Engine) Metrics() (map[string]any, error) {
	text, err := e.textOf(int(e.metricsHint.Load())+256, "metrics", func(h unsafe.Pointer, buf *C.char, n C.size_t) C.gorisk_res {
		return C.gorisk_metrics(h, buf, n)
	})
	if err != nil {
		return nil, err
	}
	e.metricsHint.Store(int64(len(text)))
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		return nil, fmt.Errorf("risk: decoding metrics JSON: %w", err)
	}
	return m, nil
}

// MetricsText returns every engine metric in the Prometheus/OpenMetrics text exposition
// format (risk_engine_metrics_text), names prefixed risk_, ending with "# EOF": what a
// /metrics endpoint serves to Prometheus (the library starts no server).
func (e *Engine) MetricsText() (string, error) {
	text, err := e.textOf(int(e.metricsTextHint.Load())+256, "metrics text", func(h unsafe.Pointer, buf *C.char, n C.size_t) C.gorisk_res {
		return C.gorisk_metrics_text(h, buf, n)
	})
	if err != nil {
		return "", err
	}
	e.metricsTextHint.Store(int64(len(text)))
	return text, nil
}
