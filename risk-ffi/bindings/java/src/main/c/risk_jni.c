/*
 * JNI glue between dev.risk.RiskNative and the risk C ABI (risk-ffi/include/risk.h).
 *
 * Rules this file keeps:
 *  - Every risk_result other than RISK_OK becomes a thrown dev.risk.RiskException carrying the
 *    code and risk_last_error(), read right after the failing call, in the same native call
 *    and before any other call into the library.
 *  - Every JNI call that can throw is checked (ExceptionCheck or its NULL return) and the
 *    function returns at once, after freeing what it allocated.
 *  - No JNI array is pinned: arrays are copied in and out with Get/Set<Type>ArrayRegion, so
 *    there is nothing to release and no GC critical section is held while the library runs
 *    (a decide can wait on the fast tier's deadline).
 *  - Strings arrive as standard UTF-8 NUL-terminated byte[] (encoded in Java by dev.risk.Utf8),
 *    not via GetStringUTFChars, whose "modified UTF-8" encodes U+0000 as C0 80 and non-BMP
 *    characters as surrogate pairs: the library would reject those as invalid UTF-8.
 *  - A Java null where the C ABI requires a pointer is passed on as NULL so the library answers
 *    RISK_ERR_NULL; a null the glue itself needs (an output array) is IllegalArgumentException.
 *  - Natives are bound with RegisterNatives in JNI_OnLoad, so a Java/C signature mismatch fails
 *    System.load loudly instead of the first call. The entity-state natives live in
 *    risk_jni_state.c (registered from JNI_OnLoad too); risk_jni.h declares the helpers of
 *    this file it uses.
 *
 * Engine and subscription handles travel as jlong (the long field of RiskEngine/Subscription).
 * The library refuses a freed handle itself (RISK_ERR_HANDLE: handles are never-reused tokens);
 * the Java side's lock only makes close() wait for calls in flight and gives a Java exception.
 */
#include <jni.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "risk.h"
#include "risk_jni.h"

/* Layouts shared with RiskNative / Decision.fromLongs / Verdict.fromLongs. */
#define DECISION_LONGS 32
#define VERDICT_LONGS 8
#define TXN_HEADER_LONGS 4
/* currency, country, channel, merchant, ip, email (Transaction's offsets), then features. */
#define TXN_FIXED_STRINGS 6

/* Stack scratch for one transaction; larger ones go to the heap. */
#define STACK_STRING_BYTES 1024
#define STACK_FEATURES 32

#define METRICS_INITIAL_CAP 8192
#define METRICS_TRIES 8
/* The OpenMetrics text: every counter, and each latency histogram's buckets. */
#define METRICS_TEXT_INITIAL_CAP 16384
/* First buffer for an audit query's JSON; a larger answer costs one more read of the log. */
#define AUDIT_QUERY_INITIAL_CAP 65536
#define AUDIT_STATS_INITIAL_CAP 512
/* A deploy status holds up to 64 history events. */
#define DEPLOY_STATUS_INITIAL_CAP 4096
#define HEALTH_INITIAL_CAP 1024
/* A monitor report holds up to 32 recent alerts and a drift row per feature. */
#define MONITOR_INITIAL_CAP 4096
#define DRILL_REPORT_INITIAL_CAP 1024

_Static_assert(RISK_MAX_REASONS == 8, "Decision.fromLongs assumes 8 reasons (2 longs each)");
_Static_assert(16 + 2 * RISK_MAX_REASONS == DECISION_LONGS, "decision layout");

static jclass g_risk_exception;      /* dev/risk/RiskException */
static jmethodID g_risk_exception_ctor; /* (I[B)V */
static jclass g_illegal_argument;    /* java/lang/IllegalArgumentException */
static jclass g_illegal_state;       /* java/lang/IllegalStateException */
static jclass g_out_of_memory;       /* java/lang/OutOfMemoryError */

/* ----- exceptions ----- */

static void throw_class(JNIEnv *env, jclass cls, const char *msg) {
  if ((*env)->ExceptionCheck(env)) return; /* keep the first exception */
  (*env)->ThrowNew(env, cls, msg);
}

static void throw_iae(JNIEnv *env, const char *msg) { throw_class(env, g_illegal_argument, msg); }

static void throw_oom(JNIEnv *env, const char *what) { throw_class(env, g_out_of_memory, what); }

/* Throws RiskException(code, message bytes). */
static void throw_risk_bytes(JNIEnv *env, risk_result code, const char *msg, size_t n) {
  if ((*env)->ExceptionCheck(env)) return;
  if (n > (size_t)INT32_MAX) n = (size_t)INT32_MAX;
  jbyteArray b = (*env)->NewByteArray(env, (jsize)n);
  if (b == NULL) return; /* OutOfMemoryError pending */
  (*env)->SetByteArrayRegion(env, b, 0, (jsize)n, (const jbyte *)msg);
  if ((*env)->ExceptionCheck(env)) {
    (*env)->DeleteLocalRef(env, b);
    return;
  }
  jobject ex = (*env)->NewObject(env, g_risk_exception, g_risk_exception_ctor, (jint)code, b);
  (*env)->DeleteLocalRef(env, b);
  if (ex == NULL) return; /* the constructor's exception is pending */
  (*env)->Throw(env, (jthrowable)ex);
  (*env)->DeleteLocalRef(env, ex);
}

/* Throws RiskException for `code` with risk_last_error(). Call it right after the failing
 * library call: the message belongs to this thread's last call into the library. */
void throw_risk(JNIEnv *env, risk_result code) {
  const char *m = risk_last_error();
  if (m == NULL) m = "";
  throw_risk_bytes(env, code, m, strlen(m));
}

static jbyteArray new_bytes(JNIEnv *env, const char *p, size_t n) {
  if (n > (size_t)INT32_MAX) {
    throw_oom(env, "text longer than a Java array");
    return NULL;
  }
  jbyteArray b = (*env)->NewByteArray(env, (jsize)n);
  if (b == NULL) return NULL;
  (*env)->SetByteArrayRegion(env, b, 0, (jsize)n, (const jbyte *)p);
  if ((*env)->ExceptionCheck(env)) {
    (*env)->DeleteLocalRef(env, b);
    return NULL;
  }
  return b;
}

/* ----- argument copies ----- */

/* Copies byte[] `a` into a fresh heap buffer with a NUL after it. NULL array: *out = NULL.
 * `need_z`: the array must already end in its own NUL (and hold no other). Returns 0 with an
 * exception pending on failure. */
int copy_bytes(JNIEnv *env, jbyteArray a, const char *what, int need_z, char **out, size_t *len) {
  *out = NULL;
  if (len) *len = 0;
  if (a == NULL) return 1;
  jsize n = (*env)->GetArrayLength(env, a);
  char *p = malloc((size_t)n + 1);
  if (p == NULL) {
    throw_oom(env, what);
    return 0;
  }
  (*env)->GetByteArrayRegion(env, a, 0, n, (jbyte *)p);
  if ((*env)->ExceptionCheck(env)) {
    free(p);
    return 0;
  }
  p[n] = 0;
  if (need_z && (n == 0 || p[n - 1] != 0 || memchr(p, 0, (size_t)n - 1) != NULL)) {
    free(p);
    char msg[160];
    snprintf(msg, sizeof msg, "%s: expected one NUL-terminated UTF-8 string", what);
    throw_iae(env, msg);
    return 0;
  }
  *out = p;
  if (len) *len = (size_t)n;
  return 1;
}

static int check_len(JNIEnv *env, jarray a, jsize need, const char *what) {
  if (a == NULL) {
    char msg[128];
    snprintf(msg, sizeof msg, "%s is null", what);
    throw_iae(env, msg);
    return 0;
  }
  if ((*env)->GetArrayLength(env, a) < need) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s has fewer than %ld elements", what, (long)need);
    throw_iae(env, msg);
    return 0;
  }
  return 1;
}

static jlong fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (jlong)u;
}

static void decision_to_longs(const risk_decision *d, jlong *o) {
  memset(o, 0, sizeof(jlong) * DECISION_LONGS);
  o[0] = (jlong)d->txn;
  o[1] = (jlong)d->entity;
  o[2] = d->action;
  o[3] = d->tier;
  o[4] = d->fallback;
  o[5] = d->escalation;
  o[6] = (d->hard_rule ? 1 : 0) | ((jlong)d->state << 8); /* bit 0 hard_rule, bits 8-15 state */
  o[7] = (jlong)d->ticket;
  o[8] = fbits(d->score);
  o[9] = fbits(d->rule_score);
  o[10] = fbits(d->model_score);
  o[11] = fbits(d->threshold_shift);
  o[12] = (jlong)d->rules_ns;
  o[13] = (jlong)d->fast_ns;
  o[14] = (jlong)d->total_ns;
  uint32_t n = d->n_reasons > RISK_MAX_REASONS ? RISK_MAX_REASONS : d->n_reasons;
  o[15] = n;
  for (uint32_t i = 0; i < n; i++) {
    o[16 + 2 * i] = (jlong)d->reasons[i].code;
    o[17 + 2 * i] = fbits(d->reasons[i].weight);
  }
}

static void put_decision(JNIEnv *env, jlongArray out, const risk_decision *d) {
  jlong o[DECISION_LONGS];
  decision_to_longs(d, o);
  (*env)->SetLongArrayRegion(env, out, 0, DECISION_LONGS, o);
}

/* The string at offset `off` of the packed, NUL-terminated `strs` (off == -1: NULL). */
static int string_at(JNIEnv *env, const char *strs, jsize slen, jint off, const char **out) {
  if (off == -1) {
    *out = NULL;
    return 1;
  }
  if (off < 0 || off >= slen) {
    throw_iae(env, "string offset out of range");
    return 0;
  }
  *out = strs + off; /* strs[slen - 1] == 0 was checked, so this is NUL-terminated */
  return 1;
}

/* Fills `t` and `feats` (nf entries) from the packed encoding. Returns 0 with an
 * IllegalArgumentException pending on a malformed encoding. */
static int fill_txn(JNIEnv *env, risk_txn *t, const char *strs, jsize slen, const jint *offs, jsize nf,
                    const jdouble *vals, risk_feature *feats) {
  if (!string_at(env, strs, slen, offs[0], &t->currency)) return 0;
  if (!string_at(env, strs, slen, offs[1], &t->country)) return 0;
  if (!string_at(env, strs, slen, offs[2], &t->channel)) return 0;
  if (!string_at(env, strs, slen, offs[3], &t->merchant)) return 0;
  if (!string_at(env, strs, slen, offs[4], &t->ip)) return 0;
  if (!string_at(env, strs, slen, offs[5], &t->email)) return 0;
  for (jsize i = 0; i < nf; i++) {
    if (!string_at(env, strs, slen, offs[TXN_FIXED_STRINGS + 2 * i], &feats[i].name)) return 0;
    if (!string_at(env, strs, slen, offs[TXN_FIXED_STRINGS + 1 + 2 * i], &feats[i].category)) return 0;
    feats[i].value = vals[i];
  }
  t->features = nf > 0 ? feats : NULL;
  t->n_features = (size_t)nf;
  return 1;
}

/* ----- natives ----- */

static jstring JNICALL n_version(JNIEnv *env, jclass cls) {
  (void)cls;
  const char *v = risk_version();
  if (v == NULL) {
    throw_class(env, g_illegal_state, "risk_version returned NULL");
    return NULL;
  }
  return (*env)->NewStringUTF(env, v); /* ASCII; NULL with OutOfMemoryError pending */
}

static jlong JNICALL n_engine_new_from_path(JNIEnv *env, jclass cls, jbyteArray path_z) {
  (void)cls;
  char *path;
  if (!copy_bytes(env, path_z, "path", 1, &path, NULL)) return 0;
  risk_engine *e = NULL;
  risk_result r = risk_engine_new_from_path(path, &e);
  if (r != RISK_OK) {
    throw_risk(env, r);
    free(path);
    return 0;
  }
  free(path);
  if (e == NULL) {
    throw_class(env, g_illegal_state, "risk_engine_new_from_path returned RISK_OK and no engine");
    return 0;
  }
  return (jlong)(intptr_t)e;
}

static jlong JNICALL n_engine_new_from_toml(JNIEnv *env, jclass cls, jbyteArray toml, jbyteArray base_dir_z) {
  (void)cls;
  char *text, *dir;
  size_t len;
  if (!copy_bytes(env, toml, "toml", 0, &text, &len)) return 0;
  if (!copy_bytes(env, base_dir_z, "baseDir", 1, &dir, NULL)) {
    free(text);
    return 0;
  }
  risk_engine *e = NULL;
  risk_result r = risk_engine_new_from_toml((const uint8_t *)text, len, dir, &e);
  if (r != RISK_OK) throw_risk(env, r);
  free(text);
  free(dir);
  if (r != RISK_OK) return 0;
  if (e == NULL) {
    throw_class(env, g_illegal_state, "risk_engine_new_from_toml returned RISK_OK and no engine");
    return 0;
  }
  return (jlong)(intptr_t)e;
}

static void JNICALL n_engine_free(JNIEnv *env, jclass cls, jlong e) {
  (void)env;
  (void)cls;
  risk_engine_free((risk_engine *)(intptr_t)e);
}

static void JNICALL n_decide(JNIEnv *env, jclass cls, jlong eng, jlong id, jlong entity, jlong ts, jdouble amount,
                             jint mcc, jlong device, jbyteArray strings, jintArray offsets, jdoubleArray fvals,
                             jlongArray out) {
  (void)cls;
  if (!check_len(env, strings, 0, "strings") || !check_len(env, offsets, TXN_FIXED_STRINGS, "offsets") ||
      !check_len(env, fvals, 0, "featureValues") || !check_len(env, out, DECISION_LONGS, "out"))
    return;
  if (mcc < 0 || mcc > 0xFFFF) {
    throw_iae(env, "mcc outside 0..65535");
    return;
  }
  jsize slen = (*env)->GetArrayLength(env, strings);
  jsize olen = (*env)->GetArrayLength(env, offsets);
  jsize nf = (*env)->GetArrayLength(env, fvals);
  if ((olen - TXN_FIXED_STRINGS) % 2 != 0 || (olen - TXN_FIXED_STRINGS) / 2 != nf) {
    throw_iae(env, "offsets and featureValues disagree on the feature count");
    return;
  }

  char sbuf[STACK_STRING_BYTES];
  jint obuf[TXN_FIXED_STRINGS + 2 * STACK_FEATURES];
  jdouble vbuf[STACK_FEATURES];
  risk_feature fbuf[STACK_FEATURES];
  char *strs = sbuf;
  jint *offs = obuf;
  jdouble *vals = vbuf;
  risk_feature *feats = fbuf;
  if (slen > STACK_STRING_BYTES) strs = malloc((size_t)slen);
  if (nf > STACK_FEATURES) {
    offs = malloc(sizeof(jint) * (size_t)olen);
    vals = malloc(sizeof(jdouble) * (size_t)nf);
    feats = malloc(sizeof(risk_feature) * (size_t)nf);
  }
  if (strs == NULL || offs == NULL || vals == NULL || feats == NULL) {
    throw_oom(env, "transaction scratch");
    goto done;
  }
  (*env)->GetByteArrayRegion(env, strings, 0, slen, (jbyte *)strs);
  if ((*env)->ExceptionCheck(env)) goto done;
  (*env)->GetIntArrayRegion(env, offsets, 0, olen, offs);
  if ((*env)->ExceptionCheck(env)) goto done;
  (*env)->GetDoubleArrayRegion(env, fvals, 0, nf, vals);
  if ((*env)->ExceptionCheck(env)) goto done;
  if (slen > 0 && strs[slen - 1] != 0) {
    throw_iae(env, "strings is not NUL-terminated");
    goto done;
  }

  risk_txn t;
  memset(&t, 0, sizeof t);
  t.id = (uint64_t)id;
  t.entity = (uint64_t)entity;
  t.timestamp_ms = (int64_t)ts;
  t.amount = amount;
  t.mcc = (uint16_t)mcc;
  t.device = (uint64_t)device;
  if (!fill_txn(env, &t, strs, slen, offs, nf, vals, feats)) goto done;

  risk_decision d;
  risk_result r = risk_engine_decide((const risk_engine *)(intptr_t)eng, &t, &d);
  if (r != RISK_OK) {
    throw_risk(env, r);
    goto done;
  }
  put_decision(env, out, &d); /* on failure its exception is pending; nothing else to do */

done:
  if (strs != sbuf) free(strs);
  if (offs != obuf) free(offs);
  if (vals != vbuf) free(vals);
  if (feats != fbuf) free(feats);
}

static void JNICALL n_decide_json(JNIEnv *env, jclass cls, jlong eng, jbyteArray json, jlongArray out) {
  (void)cls;
  if (!check_len(env, out, DECISION_LONGS, "out")) return;
  char *text;
  size_t len;
  if (!copy_bytes(env, json, "json", 0, &text, &len)) return;
  risk_decision d;
  risk_result r = risk_engine_decide_json((const risk_engine *)(intptr_t)eng, (const uint8_t *)text, len, &d);
  if (r != RISK_OK)
    throw_risk(env, r);
  else
    put_decision(env, out, &d);
  free(text);
}

static jbyteArray JNICALL n_decide_batch(JNIEnv *env, jclass cls, jlong eng, jint n, jlongArray headers,
                                         jdoubleArray amounts, jintArray mccs, jbyteArray strings, jintArray offsets,
                                         jintArray offset_start, jdoubleArray fvals, jlongArray out,
                                         jintArray codes) {
  (void)cls;
  if (n < 0 || n > INT32_MAX / DECISION_LONGS - 1) {
    throw_iae(env, "batch size out of range");
    return NULL;
  }
  if (!check_len(env, headers, n * TXN_HEADER_LONGS, "headers") || !check_len(env, amounts, n, "amounts") ||
      !check_len(env, mccs, n, "mccs") || !check_len(env, strings, 0, "strings") ||
      !check_len(env, offsets, 0, "offsets") || !check_len(env, offset_start, n + 1, "offsetStart") ||
      !check_len(env, fvals, 0, "featureValues") || !check_len(env, out, n * DECISION_LONGS, "out") ||
      !check_len(env, codes, n, "codes"))
    return NULL;
  jsize slen = (*env)->GetArrayLength(env, strings);
  jsize olen = (*env)->GetArrayLength(env, offsets);
  jsize vlen = (*env)->GetArrayLength(env, fvals);
  size_t un = (size_t)n;

  jbyteArray result = NULL;
  jlong *hdr = malloc(sizeof(jlong) * TXN_HEADER_LONGS * un + 1);
  jdouble *amt = malloc(sizeof(jdouble) * un + 1);
  jint *mcc = malloc(sizeof(jint) * un + 1);
  char *strs = malloc((size_t)slen + 1);
  jint *offs = malloc(sizeof(jint) * (size_t)olen + 1);
  jint *ostart = malloc(sizeof(jint) * (un + 1));
  jdouble *vals = malloc(sizeof(jdouble) * (size_t)vlen + 1);
  risk_feature *feats = malloc(sizeof(risk_feature) * (size_t)vlen + 1);
  risk_txn *txns = malloc(sizeof(risk_txn) * un + 1);
  risk_decision *decs = malloc(sizeof(risk_decision) * un + 1);
  risk_result *rs = malloc(sizeof(risk_result) * un + 1);
  jlong *outl = malloc(sizeof(jlong) * DECISION_LONGS * un + 1);
  jint *codesl = malloc(sizeof(jint) * un + 1);
  if (!hdr || !amt || !mcc || !strs || !offs || !ostart || !vals || !feats || !txns || !decs || !rs || !outl ||
      !codesl) {
    throw_oom(env, "batch scratch");
    goto done;
  }
  (*env)->GetLongArrayRegion(env, headers, 0, n * TXN_HEADER_LONGS, hdr);
  if ((*env)->ExceptionCheck(env)) goto done;
  (*env)->GetDoubleArrayRegion(env, amounts, 0, n, amt);
  if ((*env)->ExceptionCheck(env)) goto done;
  (*env)->GetIntArrayRegion(env, mccs, 0, n, mcc);
  if ((*env)->ExceptionCheck(env)) goto done;
  (*env)->GetByteArrayRegion(env, strings, 0, slen, (jbyte *)strs);
  if ((*env)->ExceptionCheck(env)) goto done;
  (*env)->GetIntArrayRegion(env, offsets, 0, olen, offs);
  if ((*env)->ExceptionCheck(env)) goto done;
  (*env)->GetIntArrayRegion(env, offset_start, 0, n + 1, ostart);
  if ((*env)->ExceptionCheck(env)) goto done;
  (*env)->GetDoubleArrayRegion(env, fvals, 0, vlen, vals);
  if ((*env)->ExceptionCheck(env)) goto done;
  if (slen > 0 && strs[slen - 1] != 0) {
    throw_iae(env, "strings is not NUL-terminated");
    goto done;
  }

  jsize vbase = 0;
  for (jint i = 0; i < n; i++) {
    jint a = ostart[i], b = ostart[i + 1];
    if (a < 0 || b > olen || b - a < TXN_FIXED_STRINGS || (b - a - TXN_FIXED_STRINGS) % 2 != 0) {
      throw_iae(env, "offsetStart out of range");
      goto done;
    }
    jsize nf = (b - a - TXN_FIXED_STRINGS) / 2;
    if (vbase + nf > vlen) {
      throw_iae(env, "featureValues shorter than the features");
      goto done;
    }
    risk_txn *t = &txns[i];
    memset(t, 0, sizeof *t);
    t->id = (uint64_t)hdr[TXN_HEADER_LONGS * i];
    t->entity = (uint64_t)hdr[TXN_HEADER_LONGS * i + 1];
    t->timestamp_ms = (int64_t)hdr[TXN_HEADER_LONGS * i + 2];
    t->device = (uint64_t)hdr[TXN_HEADER_LONGS * i + 3];
    t->amount = amt[i];
    if (mcc[i] < 0 || mcc[i] > 0xFFFF) {
      throw_iae(env, "mcc outside 0..65535");
      goto done;
    }
    t->mcc = (uint16_t)mcc[i];
    if (!fill_txn(env, t, strs, slen, offs + a, nf, vals + vbase, feats + vbase)) goto done;
    vbase += nf;
  }
  if (vbase != vlen) {
    throw_iae(env, "featureValues longer than the features");
    goto done;
  }

  /* An item the library leaves unset keeps this code and reads as a failure in Java. */
  for (size_t i = 0; i < un; i++) rs[i] = (risk_result)UINT32_MAX;
  risk_result r = risk_engine_decide_batch((const risk_engine *)(intptr_t)eng, txns, un, decs, rs);
  if (r != RISK_OK) {
    throw_risk(env, r);
    goto done;
  }
  /* Read the one message the C ABI keeps, before anything else can call into the library. */
  int any_failed = 0;
  for (size_t i = 0; i < un; i++) any_failed |= rs[i] != RISK_OK;
  if (any_failed) {
    const char *m = risk_last_error();
    if (m == NULL) m = "";
    result = new_bytes(env, m, strlen(m));
    if (result == NULL) goto done;
  }
  for (size_t i = 0; i < un; i++) {
    codesl[i] = (jint)rs[i];
    if (rs[i] == RISK_OK)
      decision_to_longs(&decs[i], outl + DECISION_LONGS * i);
    else
      memset(outl + DECISION_LONGS * i, 0, sizeof(jlong) * DECISION_LONGS);
  }
  (*env)->SetLongArrayRegion(env, out, 0, n * DECISION_LONGS, outl);
  if ((*env)->ExceptionCheck(env)) goto fail;
  (*env)->SetIntArrayRegion(env, codes, 0, n, codesl);
  if ((*env)->ExceptionCheck(env)) goto fail;
  goto done;

fail:
  if (result != NULL) {
    (*env)->DeleteLocalRef(env, result);
    result = NULL;
  }
done:
  free(hdr);
  free(amt);
  free(mcc);
  free(strs);
  free(offs);
  free(ostart);
  free(vals);
  free(feats);
  free(txns);
  free(decs);
  free(rs);
  free(outl);
  free(codesl);
  return result;
}

static jbyteArray JNICALL n_reason_name(JNIEnv *env, jclass cls, jint code) {
  (void)cls;
  char buf[128];
  size_t len = 0;
  risk_result r = risk_reason_name((uint32_t)code, buf, sizeof buf, &len);
  if (r == RISK_OK) return new_bytes(env, buf, len);
  if (r != RISK_ERR_BUFFER_TOO_SMALL) {
    throw_risk(env, r);
    return NULL;
  }
  /* `*len` excludes the NUL the buffer must also hold. Names are static: one retry. */
  size_t cap = len + 1;
  char *big = malloc(cap);
  if (big == NULL) {
    throw_oom(env, "reason name");
    return NULL;
  }
  r = risk_reason_name((uint32_t)code, big, cap, &len);
  jbyteArray b = NULL;
  if (r != RISK_OK)
    throw_risk(env, r);
  else
    b = new_bytes(env, big, len);
  free(big);
  return b;
}

static jstring JNICALL n_fallback_name(JNIEnv *env, jclass cls, jint code) {
  (void)cls;
  if (code < 0 || code > 255) {
    throw_iae(env, "fallback code outside 0..255");
    return NULL;
  }
  const char *s = risk_fallback_name((uint8_t)code);
  if (s == NULL) {
    throw_class(env, g_illegal_state, "risk_fallback_name returned NULL");
    return NULL;
  }
  return (*env)->NewStringUTF(env, s); /* static ASCII */
}

static jbyteArray JNICALL n_metrics_json(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  const risk_engine *e = (const risk_engine *)(intptr_t)eng;
  size_t cap = METRICS_INITIAL_CAP;
  for (int attempt = 0; attempt < METRICS_TRIES; attempt++) {
    char *buf = malloc(cap);
    if (buf == NULL) {
      throw_oom(env, "metrics buffer");
      return NULL;
    }
    size_t len = 0;
    risk_result r = risk_engine_metrics_json(e, buf, cap, &len);
    if (r == RISK_OK) {
      jbyteArray b = new_bytes(env, buf, len);
      free(buf);
      return b;
    }
    if (r != RISK_ERR_BUFFER_TOO_SMALL) {
      throw_risk(env, r);
      free(buf);
      return NULL;
    }
    free(buf);
    /* `len` is the text without its NUL; the metrics can grow between two calls. */
    cap = len + 1 + 1024;
  }
  static const char msg[] = "metrics JSON kept growing past the buffer";
  throw_risk_bytes(env, RISK_ERR_BUFFER_TOO_SMALL, msg, sizeof msg - 1);
  return NULL;
}

/* The text of `call` as a byte[]: tries `cap` bytes, then what the library says it needs,
 * with slack (the text can grow between two calls: counters move, a live engine appends to
 * its log). NULL with an exception pending on failure. */
jbyteArray read_text(JNIEnv *env, text_call call, const void *args, size_t cap, const char *what) {
  for (int attempt = 0; attempt < METRICS_TRIES; attempt++) {
    char *buf = malloc(cap);
    if (buf == NULL) {
      throw_oom(env, what);
      return NULL;
    }
    size_t len = 0;
    risk_result r = call(args, buf, cap, &len);
    if (r == RISK_OK) {
      jbyteArray b = new_bytes(env, buf, len);
      free(buf);
      return b;
    }
    if (r != RISK_ERR_BUFFER_TOO_SMALL) {
      throw_risk(env, r);
      free(buf);
      return NULL;
    }
    free(buf);
    /* `len` is the text without its NUL. */
    size_t slack = len / 8 > 1024 ? len / 8 : 1024;
    cap = len + 1 + slack;
  }
  char msg[160];
  snprintf(msg, sizeof msg, "%s kept growing past the buffer", what);
  throw_risk_bytes(env, RISK_ERR_BUFFER_TOO_SMALL, msg, strlen(msg));
  return NULL;
}

static risk_result call_metrics_text(const void *args, char *buf, size_t cap, size_t *len) {
  return risk_engine_metrics_text((const risk_engine *)args, buf, cap, len);
}

static jbyteArray JNICALL n_metrics_text(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  return read_text(env, call_metrics_text, (const void *)(intptr_t)eng, METRICS_TEXT_INITIAL_CAP, "metrics text");
}

typedef struct {
  const char *dir;
  const char *query;
} audit_query_args;

static risk_result call_audit_query(const void *args, char *buf, size_t cap, size_t *len) {
  const audit_query_args *a = args;
  return risk_audit_query_json(a->dir, a->query, buf, cap, len);
}

static risk_result call_audit_stats(const void *args, char *buf, size_t cap, size_t *len) {
  return risk_engine_audit_stats_json((const risk_engine *)args, buf, cap, len);
}

/* A null dir or query reaches the library as NULL (dir: RISK_ERR_NULL; query: everything). */
static jbyteArray JNICALL n_audit_query_json(JNIEnv *env, jclass cls, jbyteArray dir_z, jbyteArray query_z) {
  (void)cls;
  char *dir, *query;
  if (!copy_bytes(env, dir_z, "dir", 1, &dir, NULL)) return NULL;
  if (!copy_bytes(env, query_z, "query", 1, &query, NULL)) {
    free(dir);
    return NULL;
  }
  audit_query_args a = {dir, query};
  jbyteArray b = read_text(env, call_audit_query, &a, AUDIT_QUERY_INITIAL_CAP, "the audit query");
  free(dir);
  free(query);
  return b;
}

static jlong JNICALL n_audit_flush(JNIEnv *env, jclass cls, jlong eng, jint timeout_ms) {
  (void)cls;
  if (timeout_ms < 0) {
    throw_iae(env, "negative timeout");
    return 0;
  }
  uint64_t seq = 0;
  risk_result r = risk_engine_audit_flush((const risk_engine *)(intptr_t)eng, (uint32_t)timeout_ms, &seq);
  if (r != RISK_OK) {
    throw_risk(env, r);
    return 0;
  }
  return (jlong)seq;
}

static jbyteArray JNICALL n_audit_stats_json(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  return read_text(env, call_audit_stats, (const void *)(intptr_t)eng, AUDIT_STATS_INITIAL_CAP, "audit stats");
}

/* ----- model lifecycle ----- */

/* A null target or candidate reaches the library as NULL (RISK_ERR_NULL); a null plan, base
 * dir or reason is the library's default (the standard plan, the working directory, no
 * reason given). */
static jlong JNICALL n_deploy(JNIEnv *env, jclass cls, jlong eng, jbyteArray target_z, jbyteArray cand_z,
                              jbyteArray plan_z, jbyteArray dir_z) {
  (void)cls;
  char *target = NULL, *cand = NULL, *plan = NULL, *dir = NULL;
  jlong out = 0;
  if (copy_bytes(env, target_z, "target", 1, &target, NULL) && copy_bytes(env, cand_z, "candidate", 1, &cand, NULL) &&
      copy_bytes(env, plan_z, "plan", 1, &plan, NULL) && copy_bytes(env, dir_z, "baseDir", 1, &dir, NULL)) {
    uint64_t id = 0;
    risk_result r = risk_engine_deploy((const risk_engine *)(intptr_t)eng, target, cand, plan, dir, &id);
    if (r != RISK_OK) {
      throw_risk(env, r);
    } else {
      out = (jlong)id;
    }
  }
  free(target);
  free(cand);
  free(plan);
  free(dir);
  return out;
}

typedef struct {
  const risk_engine *e;
  const char *target;
} deploy_status_args;

static risk_result call_deploy_status(const void *args, char *buf, size_t cap, size_t *len) {
  const deploy_status_args *a = args;
  return risk_engine_deploy_status_json(a->e, a->target, buf, cap, len);
}

static jbyteArray JNICALL n_deploy_status_json(JNIEnv *env, jclass cls, jlong eng, jbyteArray target_z) {
  (void)cls;
  char *target;
  if (!copy_bytes(env, target_z, "target", 1, &target, NULL)) return NULL;
  deploy_status_args a = {(const risk_engine *)(intptr_t)eng, target};
  jbyteArray b = read_text(env, call_deploy_status, &a, DEPLOY_STATUS_INITIAL_CAP, "the deploy status");
  free(target);
  return b;
}

static void JNICALL n_promote(JNIEnv *env, jclass cls, jlong eng, jbyteArray target_z) {
  (void)cls;
  char *target;
  if (!copy_bytes(env, target_z, "target", 1, &target, NULL)) return;
  risk_result r = risk_engine_promote((const risk_engine *)(intptr_t)eng, target);
  if (r != RISK_OK) throw_risk(env, r);
  free(target);
}

static void JNICALL n_rollback(JNIEnv *env, jclass cls, jlong eng, jbyteArray target_z, jbyteArray reason_z) {
  (void)cls;
  char *target, *reason;
  if (!copy_bytes(env, target_z, "target", 1, &target, NULL)) return;
  if (!copy_bytes(env, reason_z, "reason", 1, &reason, NULL)) {
    free(target);
    return;
  }
  risk_result r = risk_engine_rollback((const risk_engine *)(intptr_t)eng, target, reason);
  if (r != RISK_OK) throw_risk(env, r);
  free(target);
  free(reason);
}

static void JNICALL n_deploy_tick(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  risk_result r = risk_engine_deploy_tick((const risk_engine *)(intptr_t)eng);
  if (r != RISK_OK) throw_risk(env, r);
}

/* ----- health, kill switch, monitors, drills ----- */

static risk_result call_health(const void *args, char *buf, size_t cap, size_t *len) {
  return risk_engine_health_json((const risk_engine *)args, buf, cap, len);
}

static jbyteArray JNICALL n_health_json(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  return read_text(env, call_health, (const void *)(intptr_t)eng, HEALTH_INITIAL_CAP, "health");
}

/* A null tier reaches the library as NULL (RISK_ERR_NULL). */
static void JNICALL n_force_open(JNIEnv *env, jclass cls, jlong eng, jbyteArray tier_z, jboolean open) {
  (void)cls;
  char *tier;
  if (!copy_bytes(env, tier_z, "tier", 1, &tier, NULL)) return;
  risk_result r = risk_engine_force_open((const risk_engine *)(intptr_t)eng, tier, open == JNI_TRUE);
  if (r != RISK_OK) throw_risk(env, r);
  free(tier);
}

static risk_result call_monitor(const void *args, char *buf, size_t cap, size_t *len) {
  return risk_engine_monitor_json((const risk_engine *)args, buf, cap, len);
}

static jbyteArray JNICALL n_monitor_json(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  return read_text(env, call_monitor, (const void *)(intptr_t)eng, MONITOR_INITIAL_CAP, "the monitor report");
}

static jint JNICALL n_monitor_tick(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  uint32_t raised = 0;
  risk_result r = risk_engine_monitor_tick((const risk_engine *)(intptr_t)eng, &raised);
  if (r != RISK_OK) {
    throw_risk(env, r);
    return 0;
  }
  return raised > (uint32_t)INT32_MAX ? (jint)INT32_MAX : (jint)raised;
}

static risk_result call_drill_report(const void *args, char *buf, size_t cap, size_t *len) {
  return risk_engine_drill_report_json((const risk_engine *)args, buf, cap, len);
}

/* A null fault or transactions reaches the library as NULL (RISK_ERR_NULL); null labels are
 * none. The report is read in the same native call (a drill by another thread may still
 * replace it in between: the C ABI keeps one report per engine). */
static jbyteArray JNICALL n_drill(JNIEnv *env, jclass cls, jlong eng, jbyteArray fault_z, jbyteArray txns_z,
                                  jbyteArray labels_z) {
  (void)cls;
  char *fault = NULL, *txns = NULL, *labels = NULL;
  jbyteArray out = NULL;
  if (copy_bytes(env, fault_z, "fault", 1, &fault, NULL) && copy_bytes(env, txns_z, "transactions", 1, &txns, NULL) &&
      copy_bytes(env, labels_z, "labels", 1, &labels, NULL)) {
    const risk_engine *e = (const risk_engine *)(intptr_t)eng;
    risk_result r = risk_engine_drill(e, fault, txns, labels);
    if (r != RISK_OK) {
      throw_risk(env, r);
    } else {
      out = read_text(env, call_drill_report, e, DRILL_REPORT_INITIAL_CAP, "the drill report");
    }
  }
  free(fault);
  free(txns);
  free(labels);
  return out;
}

static jbyteArray JNICALL n_drill_report_json(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  return read_text(env, call_drill_report, (const void *)(intptr_t)eng, DRILL_REPORT_INITIAL_CAP,
                   "the drill report");
}

static void JNICALL n_reload_rules(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  risk_result r = risk_engine_reload_rules((const risk_engine *)(intptr_t)eng);
  if (r != RISK_OK) throw_risk(env, r);
}

static jlongArray JNICALL n_shutdown(JNIEnv *env, jclass cls, jlong eng, jint drain_ms) {
  (void)cls;
  if (drain_ms < 0) {
    throw_iae(env, "negative drain");
    return NULL;
  }
  uint64_t drained = 0, abandoned = 0;
  risk_result r = risk_engine_shutdown((const risk_engine *)(intptr_t)eng, (uint32_t)drain_ms, &drained, &abandoned);
  if (r != RISK_OK) {
    throw_risk(env, r);
    return NULL;
  }
  jlongArray a = (*env)->NewLongArray(env, 2);
  if (a == NULL) return NULL;
  jlong v[2] = {(jlong)drained, (jlong)abandoned};
  (*env)->SetLongArrayRegion(env, a, 0, 2, v);
  if ((*env)->ExceptionCheck(env)) {
    (*env)->DeleteLocalRef(env, a);
    return NULL;
  }
  return a;
}

static jlong JNICALL n_subscribe(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  risk_subscription *s = NULL;
  risk_result r = risk_engine_subscribe((const risk_engine *)(intptr_t)eng, &s);
  if (r != RISK_OK) {
    throw_risk(env, r);
    return 0;
  }
  if (s == NULL) {
    throw_class(env, g_illegal_state, "risk_engine_subscribe returned RISK_OK and no subscription");
    return 0;
  }
  return (jlong)(intptr_t)s;
}

static jboolean JNICALL n_poll(JNIEnv *env, jclass cls, jlong sub, jint timeout_ms, jlongArray out) {
  (void)cls;
  if (!check_len(env, out, VERDICT_LONGS, "out")) return JNI_FALSE;
  if (timeout_ms < 0) {
    throw_iae(env, "negative timeout");
    return JNI_FALSE;
  }
  risk_verdict v;
  risk_result r = risk_subscription_poll((const risk_subscription *)(intptr_t)sub, (uint32_t)timeout_ms, &v);
  if (r == RISK_ERR_EMPTY) return JNI_FALSE; /* expected: nothing within the timeout */
  /* RISK_ERR_CLOSED (no verdict will ever come) is thrown like any other code. */
  if (r != RISK_OK) {
    throw_risk(env, r);
    return JNI_FALSE;
  }
  jlong o[VERDICT_LONGS] = {(jlong)v.ticket, (jlong)v.txn,    (jlong)v.entity, fbits(v.score),
                            fbits(v.fast_score), v.source,       v.failure,       (jlong)v.latency_ns};
  (*env)->SetLongArrayRegion(env, out, 0, VERDICT_LONGS, o);
  if ((*env)->ExceptionCheck(env)) return JNI_FALSE;
  return JNI_TRUE;
}

static void JNICALL n_subscription_free(JNIEnv *env, jclass cls, jlong sub) {
  (void)env;
  (void)cls;
  risk_subscription_free((risk_subscription *)(intptr_t)sub);
}

/* ----- registration ----- */

static const JNINativeMethod METHODS[] = {
    {"version", "()Ljava/lang/String;", (void *)n_version},
    {"engineNewFromPath", "([B)J", (void *)n_engine_new_from_path},
    {"engineNewFromToml", "([B[B)J", (void *)n_engine_new_from_toml},
    {"engineFree", "(J)V", (void *)n_engine_free},
    {"decide", "(JJJJDIJ[B[I[D[J)V", (void *)n_decide},
    {"decideJson", "(J[B[J)V", (void *)n_decide_json},
    {"decideBatch", "(JI[J[D[I[B[I[I[D[J[I)[B", (void *)n_decide_batch},
    {"reasonName", "(I)[B", (void *)n_reason_name},
    {"fallbackName", "(I)Ljava/lang/String;", (void *)n_fallback_name},
    {"metricsJson", "(J)[B", (void *)n_metrics_json},
    {"metricsText", "(J)[B", (void *)n_metrics_text},
    {"reloadRules", "(J)V", (void *)n_reload_rules},
    {"shutdown", "(JI)[J", (void *)n_shutdown},
    {"subscribe", "(J)J", (void *)n_subscribe},
    {"poll", "(JI[J)Z", (void *)n_poll},
    {"subscriptionFree", "(J)V", (void *)n_subscription_free},
    {"auditQueryJson", "([B[B)[B", (void *)n_audit_query_json},
    {"auditFlush", "(JI)J", (void *)n_audit_flush},
    {"auditStatsJson", "(J)[B", (void *)n_audit_stats_json},
    {"deploy", "(J[B[B[B[B)J", (void *)n_deploy},
    {"deployStatusJson", "(J[B)[B", (void *)n_deploy_status_json},
    {"promote", "(J[B)V", (void *)n_promote},
    {"rollback", "(J[B[B)V", (void *)n_rollback},
    {"deployTick", "(J)V", (void *)n_deploy_tick},
    {"healthJson", "(J)[B", (void *)n_health_json},
    {"forceOpen", "(J[BZ)V", (void *)n_force_open},
    {"monitorJson", "(J)[B", (void *)n_monitor_json},
    {"monitorTick", "(J)I", (void *)n_monitor_tick},
    {"drill", "(J[B[B[B)[B", (void *)n_drill},
    {"drillReportJson", "(J)[B", (void *)n_drill_report_json},
};

static jclass global_class(JNIEnv *env, const char *name) {
  jclass local = (*env)->FindClass(env, name);
  if (local == NULL) return NULL; /* NoClassDefFoundError pending */
  jclass g = (jclass)(*env)->NewGlobalRef(env, local);
  (*env)->DeleteLocalRef(env, local);
  if (g == NULL) throw_oom(env, "global reference");
  return g;
}

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM *vm, void *reserved) {
  (void)reserved;
  JNIEnv *env;
  if ((*vm)->GetEnv(vm, (void **)&env, JNI_VERSION_1_8) != JNI_OK) return JNI_ERR;
  if ((g_illegal_argument = global_class(env, "java/lang/IllegalArgumentException")) == NULL) return JNI_ERR;
  if ((g_illegal_state = global_class(env, "java/lang/IllegalStateException")) == NULL) return JNI_ERR;
  if ((g_out_of_memory = global_class(env, "java/lang/OutOfMemoryError")) == NULL) return JNI_ERR;
  if ((g_risk_exception = global_class(env, "dev/risk/RiskException")) == NULL) return JNI_ERR;
  g_risk_exception_ctor = (*env)->GetMethodID(env, g_risk_exception, "<init>", "(I[B)V");
  if (g_risk_exception_ctor == NULL) return JNI_ERR;
  jclass native = (*env)->FindClass(env, "dev/risk/RiskNative");
  if (native == NULL) return JNI_ERR;
  jint rc = (*env)->RegisterNatives(env, native, METHODS, (jint)(sizeof METHODS / sizeof *METHODS));
  if (rc == JNI_OK) rc = register_state_natives(env, native); /* risk_jni_state.c */
  (*env)->DeleteLocalRef(env, native);
  if (rc != JNI_OK) return JNI_ERR; /* NoSuchMethodError pending: a signature mismatch */
  return JNI_VERSION_1_8;
}

JNIEXPORT void JNICALL JNI_OnUnload(JavaVM *vm, void *reserved) {
  (void)reserved;
  JNIEnv *env;
  if ((*vm)->GetEnv(vm, (void **)&env, JNI_VERSION_1_8) != JNI_OK) return;
  if (g_risk_exception) (*env)->DeleteGlobalRef(env, g_risk_exception);
  if (g_illegal_argument) (*env)->DeleteGlobalRef(env, g_illegal_argument);
  if (g_illegal_state) (*env)->DeleteGlobalRef(env, g_illegal_state);
  if (g_out_of_memory) (*env)->DeleteGlobalRef(env, g_out_of_memory);
}
