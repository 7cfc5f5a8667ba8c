// The result type of the cgo wrappers and the helper that fills it, shared by the cgo
// preambles of every file of the package that calls C (cgo compiles each file's preamble on its own).
#ifndef GORISK_H
#define GORISK_H

#include <stdlib.h>
#include <string.h>
#include "risk.h"

// Every call goes through a wrapper that, on failure, copies risk_last_error() inside the
// same cgo call: the message is thread-local and only valid until the thread's next call
// into the library, and a goroutine may be rescheduled between two cgo calls.
typedef struct gorisk_res {
	risk_result rc;
	char *err;    // malloc'd copy of risk_last_error() when rc != RISK_OK (caller frees)
	void *ptr;    // a handle out
	size_t n;     // a length or count out
	uint64_t a;   // shutdown: drained; audit flush: the durable sequence number; deploy: its id
	uint64_t b;   // shutdown: abandoned
} gorisk_res;

static inline gorisk_res gorisk_done(risk_result rc) {
	gorisk_res r;
	memset(&r, 0, sizeof r);
	r.rc = rc;
	if (rc != RISK_OK) {
		const char *m = risk_last_error();
		r.err = strdup(m ? m : "");
	}
	return r;
}

#endif
