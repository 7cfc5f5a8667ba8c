/*
 * What the JNI glue files share: the helpers of risk_jni_util.c (exceptions, byte[] copies,
 * (buf, cap, *len) text reads) and each concept file's registration function, called from
 * JNI_OnLoad (risk_jni.c). Internal to librisk_jni.so: it is built with -fvisibility=hidden,
 * so none of these is exported.
 */
#ifndef RISK_JNI_H
#define RISK_JNI_H

#include <jni.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "risk.h"

/* ----- handles and floats (inline: the decide path uses them) ----- */

/* The engine handle a RiskEngine's long field carries (an id: never dereferenced). */
static inline const risk_engine *engine_of(jlong eng) { return (const risk_engine *)(intptr_t)eng; }

/* The bits of `f`, as Decision.fromLongs / Verdict.fromLongs read them back. */
static inline jlong fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (jlong)u;
}

/* ----- exceptions (risk_jni_util.c) ----- */

/* Looks up the exception classes the helpers throw; JNI_OK, or JNI_ERR with an exception
 * pending. Called first from JNI_OnLoad. */
jint util_load(JNIEnv *env);

/* Releases what util_load holds; from JNI_OnUnload. */
void util_unload(JNIEnv *env);

/* IllegalArgumentException(msg), unless an exception is already pending (the first is kept);
 * so are the other throw_* helpers. */
void throw_iae(JNIEnv *env, const char *msg);

/* IllegalStateException(msg): the library broke its own contract. */
void throw_illegal_state(JNIEnv *env, const char *msg);

/* OutOfMemoryError(what). */
void throw_oom(JNIEnv *env, const char *what);

/* Throws dev.risk.RiskException for `code` with risk_last_error(). Call it right after the
 * failing library call: the message belongs to this thread's last call into the library. */
void throw_risk(JNIEnv *env, risk_result code);

/* ----- byte[] in and out (risk_jni_util.c) ----- */

/* A new byte[] holding `n` bytes of `p`; NULL with an exception pending on failure. */
jbyteArray new_bytes(JNIEnv *env, const char *p, size_t n);

/* Copies byte[] `a` into a fresh heap buffer with a NUL after it (the caller frees it).
 * NULL array: *out = NULL. `need_z`: the array must already end in its own NUL (and hold no
 * other). Returns 0 with an exception pending on failure. */
int copy_bytes(JNIEnv *env, jbyteArray a, const char *what, int need_z, char **out, size_t *len);

/* Checks that array `a` (named `what`) is not null and holds at least `need` elements;
 * 0 with an IllegalArgumentException pending otherwise. */
int check_len(JNIEnv *env, jarray a, jsize need, const char *what);

/* One (buf, cap, *len) call of a text function, with its arguments bound. */
typedef risk_result (*text_call)(const void *args, char *buf, size_t cap, size_t *len);

/* The text of `call` as a byte[]: tries `cap` bytes, then what the library says it needs,
 * with slack. NULL with an exception pending on failure. */
jbyteArray read_text(JNIEnv *env, text_call call, const void *args, size_t cap, const char *what);

/* ----- natives by concept: each registers its own on dev.risk.RiskNative ----- */
/* JNI_OK, or an error with NoSuchMethodError pending (a Java/C signature mismatch). */

/* Version, engine construction, release, rule reload, shutdown (risk_jni_engine.c). */
jint register_engine_natives(JNIEnv *env, jclass native);

/* Decisions: one, JSON, a batch; reason and fallback names (risk_jni_decide.c). */
jint register_decide_natives(JNIEnv *env, jclass native);

/* Deep-tier verdict subscriptions (risk_jni_subscription.c). */
jint register_subscription_natives(JNIEnv *env, jclass native);

/* Metrics, health, kill switch, monitors, drills (risk_jni_observe.c). */
jint register_observe_natives(JNIEnv *env, jclass native);

/* The audit trail (risk_jni_audit.c). */
jint register_audit_natives(JNIEnv *env, jclass native);

/* Model lifecycle (risk_jni_deploy.c). */
jint register_deploy_natives(JNIEnv *env, jclass native);

/* Entity state (risk_jni_state.c). */
jint register_state_natives(JNIEnv *env, jclass native);

#endif
