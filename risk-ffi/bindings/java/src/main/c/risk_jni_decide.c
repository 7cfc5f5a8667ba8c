/*
 * JNI glue of decisions (risk_engine_decide, risk_engine_explain, risk_engine_decide_json,
 * risk_engine_decide_batch) and of the code names (risk_reason_name, risk_fallback_name) for
 * dev.risk.RiskNative, used by dev.risk.RiskEngine. Rules: risk_jni.c.
 *
 * A transaction crosses as a packed encoding (dev.risk.Transaction): a header of longs, the
 * amount, the mcc, one NUL-terminated byte[] of every string and an int[] of offsets into it
 * (TXN_FIXED_STRINGS fixed ones, then a name and a category per feature; -1 is NULL), and
 * the feature values. A decision comes back as DECISION_LONGS longs (Decision.fromLongs).
 */
#include <jni.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "risk.h"
#include "risk_jni.h"

/* Layouts shared with RiskNative / Decision.fromLongs / Transaction. */
#define DECISION_LONGS 32
#define TXN_HEADER_LONGS 4
/* currency, country, channel, merchant, ip, email (Transaction's offsets), then features. */
#define TXN_FIXED_STRINGS 6

/* Stack scratch for one transaction; larger ones go to the heap. */
#define STACK_STRING_BYTES 1024
#define STACK_FEATURES 32

_Static_assert(RISK_MAX_REASONS == 8, "Decision.fromLongs assumes 8 reasons (2 longs each)");
_Static_assert(16 + 2 * RISK_MAX_REASONS == DECISION_LONGS, "decision layout");

/* ----- transactions in, decisions out ----- */

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

/* Longs an explanation fills: the count, then (code, weight's float bits) per reason. */
#define EXPLAIN_LONGS (1 + 2 * RISK_MAX_REASONS)

/* Writes the reasons of risk_engine_explain into `out` (EXPLAIN_LONGS longs). */
static void put_reasons(JNIEnv *env, jlongArray out, const risk_reason *why, uint32_t n) {
  jlong a[EXPLAIN_LONGS];
  memset(a, 0, sizeof a);
  a[0] = (jlong)n;
  for (uint32_t i = 0; i < n && i < RISK_MAX_REASONS; i++) {
    a[1 + 2 * i] = (jlong)why[i].code;
    float w = why[i].weight;
    int32_t bits;
    memcpy(&bits, &w, sizeof bits);
    a[2 + 2 * i] = (jlong)bits;
  }
  (*env)->SetLongArrayRegion(env, out, 0, EXPLAIN_LONGS, a);
}

/* One transaction from its Java parts, decided (`explain` 0: a decision into `out`) or
 * explained (`explain` 1: its reasons into `out`). */
static void txn_call(JNIEnv *env, jlong eng, jlong id, jlong entity, jlong ts, jdouble amount, jint mcc,
                     jlong device, jbyteArray strings, jintArray offsets, jdoubleArray fvals, jlongArray out,
                     int explain) {
  if (!check_len(env, strings, 0, "strings") || !check_len(env, offsets, TXN_FIXED_STRINGS, "offsets") ||
      !check_len(env, fvals, 0, "featureValues") ||
      !check_len(env, out, explain ? EXPLAIN_LONGS : DECISION_LONGS, "out"))
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

  if (explain) {
    risk_reason why[RISK_MAX_REASONS];
    uint32_t n = 0;
    risk_result r = risk_engine_explain(engine_of(eng), &t, why, &n);
    if (r != RISK_OK) {
      throw_risk(env, r);
      goto done;
    }
    put_reasons(env, out, why, n);
    goto done;
  }
  risk_decision d;
  risk_result r = risk_engine_decide(engine_of(eng), &t, &d);
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

static void JNICALL n_decide(JNIEnv *env, jclass cls, jlong eng, jlong id, jlong entity, jlong ts, jdouble amount,
                             jint mcc, jlong device, jbyteArray strings, jintArray offsets, jdoubleArray fvals,
                             jlongArray out) {
  (void)cls;
  txn_call(env, eng, id, entity, ts, amount, mcc, device, strings, offsets, fvals, out, 0);
}

static void JNICALL n_explain(JNIEnv *env, jclass cls, jlong eng, jlong id, jlong entity, jlong ts, jdouble amount,
                              jint mcc, jlong device, jbyteArray strings, jintArray offsets, jdoubleArray fvals,
                              jlongArray out) {
  (void)cls;
  txn_call(env, eng, id, entity, ts, amount, mcc, device, strings, offsets, fvals, out, 1);
}

static void JNICALL n_decide_json(JNIEnv *env, jclass cls, jlong eng, jbyteArray json, jlongArray out) {
  (void)cls;
  if (!check_len(env, out, DECISION_LONGS, "out")) return;
  char *text;
  size_t len;
  if (!copy_bytes(env, json, "json", 0, &text, &len)) return;
  risk_decision d;
  risk_result r = risk_engine_decide_json(engine_of(eng), (const uint8_t *)text, len, &d);
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
  risk_result r = risk_engine_decide_batch(engine_of(eng), txns, un, decs, rs);
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
    throw_illegal_state(env, "risk_fallback_name returned NULL");
    return NULL;
  }
  return (*env)->NewStringUTF(env, s); /* static ASCII */
}

static const JNINativeMethod DECIDE_METHODS[] = {
    {"decide", "(JJJJDIJ[B[I[D[J)V", (void *)n_decide},
    {"explain", "(JJJJDIJ[B[I[D[J)V", (void *)n_explain},
    {"decideJson", "(J[B[J)V", (void *)n_decide_json},
    {"decideBatch", "(JI[J[D[I[B[I[I[D[J[I)[B", (void *)n_decide_batch},
    {"reasonName", "(I)[B", (void *)n_reason_name},
    {"fallbackName", "(I)Ljava/lang/String;", (void *)n_fallback_name},
};

jint register_decide_natives(JNIEnv *env, jclass native) {
  return (*env)->RegisterNatives(env, native, DECIDE_METHODS, (jint)(sizeof DECIDE_METHODS / sizeof *DECIDE_METHODS));
}
