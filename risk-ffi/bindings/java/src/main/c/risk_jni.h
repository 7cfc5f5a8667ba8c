/*
 * Helpers of risk_jni.c shared with the other glue files (risk_jni_state.c). Internal to
 * librisk_jni.so: it is built with -fvisibility=hidden, so none of these is exported.
 */
#ifndef RISK_JNI_H
#define RISK_JNI_H

#include <jni.h>
#include <stddef.h>

#include "risk.h"

/* Throws dev.risk.RiskException for `code` with risk_last_error(). Call it right after the
 * failing library call: the message belongs to this thread's last call into the library. */
void throw_risk(JNIEnv *env, risk_result code);

/* Copies byte[] `a` into a fresh heap buffer with a NUL after it (the caller frees it).
 * NULL array: *out = NULL. `need_z`: the array must already end in its own NUL (and hold no
 * other). Returns 0 with an exception pending on failure. */
int copy_bytes(JNIEnv *env, jbyteArray a, const char *what, int need_z, char **out, size_t *len);

/* One (buf, cap, *len) call of a text function, with its arguments bound. */
typedef risk_result (*text_call)(const void *args, char *buf, size_t cap, size_t *len);

/* The text of `call` as a byte[]: tries `cap` bytes, then what the library says it needs,
 * with slack. NULL with an exception pending on failure. */
jbyteArray read_text(JNIEnv *env, text_call call, const void *args, size_t cap, const char *what);

/* Registers the entity-state natives of dev.risk.RiskNative (risk_jni_state.c); called
 * from JNI_OnLoad. JNI_OK, or an error with NoSuchMethodError pending. */
jint register_state_natives(JNIEnv *env, jclass native);

#endif
