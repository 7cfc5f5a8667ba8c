/*
 * JNI glue of the audit trail (risk_audit_query_json, risk_engine_audit_flush,
 * risk_engine_audit_stats_json) for dev.risk.RiskNative, used by dev.risk.AuditLog.
 * Rules: risk_jni.c.
 */
#include <jni.h>

#include <stdint.h>
#include <stdlib.h>

#include "risk.h"
#include "risk_jni.h"

/* First buffer for an audit query's JSON; a larger answer costs one more read of the log. */
#define AUDIT_QUERY_INITIAL_CAP 65536
#define AUDIT_STATS_INITIAL_CAP 512

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
  risk_result r = risk_engine_audit_flush(engine_of(eng), (uint32_t)timeout_ms, &seq);
  if (r != RISK_OK) {
    throw_risk(env, r);
    return 0;
  }
  return (jlong)seq;
}

static jbyteArray JNICALL n_audit_stats_json(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  return read_text(env, call_audit_stats, engine_of(eng), AUDIT_STATS_INITIAL_CAP, "audit stats");
}
static const JNINativeMethod AUDIT_METHODS[] = {
    {"auditQueryJson", "([B[B)[B", (void *)n_audit_query_json},
    {"auditFlush", "(JI)J", (void *)n_audit_flush},
    {"auditStatsJson", "(J)[B", (void *)n_audit_stats_json},
};

jint register_audit_natives(JNIEnv *env, jclass native) {
  return (*env)->RegisterNatives(env, native, AUDIT_METHODS, (jint)(sizeof AUDIT_METHODS / sizeof *AUDIT_METHODS));
}
