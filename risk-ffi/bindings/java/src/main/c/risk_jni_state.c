/*
 * JNI glue of the entity-state functions of the risk C ABI (risk_engine_report_label,
 * risk_engine_list_*, risk_engine_lists_reload, risk_engine_state_snapshot,
 * risk_engine_state_json) for dev.risk.RiskNative, used by dev.risk.EntityState.
 *
 * Same rules as risk_jni.c: every non-OK risk_result becomes a thrown RiskException with
 * risk_last_error() read right after the failing call; strings arrive as NUL-terminated
 * standard UTF-8 byte[]; a Java null where the C ABI takes a pointer reaches it as NULL
 * (RISK_ERR_NULL for a list or value; the configured path for a snapshot).
 */
#include <jni.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "risk.h"
#include "risk_jni.h"

/* The state report: a few counters, a row per key source, a count per list. */
#define STATE_JSON_INITIAL_CAP 1024

static jlong JNICALL n_report_label(JNIEnv *env, jclass cls, jlong eng, jlong txn, jboolean fraud, jlong at_ms) {
  (void)cls;
  size_t reached = 0;
  risk_result r = risk_engine_report_label(engine_of(eng), (uint64_t)txn, fraud == JNI_TRUE, (int64_t)at_ms, &reached);
  if (r != RISK_OK) {
    throw_risk(env, r);
    return 0;
  }
  return reached > (size_t)INT64_MAX ? (jlong)INT64_MAX : (jlong)reached;
}

/* Copies the list and value arguments; 0 with an exception pending (nothing to free). */
static int list_args(JNIEnv *env, jbyteArray list_z, jbyteArray value_z, char **list, char **value) {
  if (!copy_bytes(env, list_z, "list", 1, list, NULL)) return 0;
  if (!copy_bytes(env, value_z, "value", 1, value, NULL)) {
    free(*list);
    *list = NULL;
    return 0;
  }
  return 1;
}

static void JNICALL n_list_add(JNIEnv *env, jclass cls, jlong eng, jbyteArray list_z, jbyteArray value_z,
                               jlong expires_at_ms) {
  (void)cls;
  char *list, *value;
  if (!list_args(env, list_z, value_z, &list, &value)) return;
  risk_result r = risk_engine_list_add(engine_of(eng), list, value, (int64_t)expires_at_ms);
  if (r != RISK_OK) throw_risk(env, r);
  free(list);
  free(value);
}

static jboolean JNICALL n_list_remove(JNIEnv *env, jclass cls, jlong eng, jbyteArray list_z, jbyteArray value_z) {
  (void)cls;
  char *list, *value;
  if (!list_args(env, list_z, value_z, &list, &value)) return JNI_FALSE;
  bool removed = false;
  risk_result r = risk_engine_list_remove(engine_of(eng), list, value, &removed);
  if (r != RISK_OK) throw_risk(env, r);
  free(list);
  free(value);
  return r == RISK_OK && removed ? JNI_TRUE : JNI_FALSE;
}

static jboolean JNICALL n_list_contains(JNIEnv *env, jclass cls, jlong eng, jbyteArray list_z, jbyteArray value_z) {
  (void)cls;
  char *list, *value;
  if (!list_args(env, list_z, value_z, &list, &value)) return JNI_FALSE;
  bool hit = false;
  risk_result r = risk_engine_list_contains(engine_of(eng), list, value, &hit);
  if (r != RISK_OK) throw_risk(env, r);
  free(list);
  free(value);
  return r == RISK_OK && hit ? JNI_TRUE : JNI_FALSE;
}

static void JNICALL n_lists_reload(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  risk_result r = risk_engine_lists_reload(engine_of(eng));
  if (r != RISK_OK) throw_risk(env, r);
}

static void JNICALL n_state_snapshot(JNIEnv *env, jclass cls, jlong eng, jbyteArray path_z) {
  (void)cls;
  char *path;
  if (!copy_bytes(env, path_z, "path", 1, &path, NULL)) return;
  risk_result r = risk_engine_state_snapshot(engine_of(eng), path);
  if (r != RISK_OK) throw_risk(env, r);
  free(path);
}

static risk_result call_state_json(const void *args, char *buf, size_t cap, size_t *len) {
  return risk_engine_state_json((const risk_engine *)args, buf, cap, len);
}

static jbyteArray JNICALL n_state_json(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  return read_text(env, call_state_json, engine_of(eng), STATE_JSON_INITIAL_CAP, "the state report");
}

static const JNINativeMethod STATE_METHODS[] = {
    {"reportLabel", "(JJZJ)J", (void *)n_report_label},
    {"listAdd", "(J[B[BJ)V", (void *)n_list_add},
    {"listRemove", "(J[B[B)Z", (void *)n_list_remove},
    {"listContains", "(J[B[B)Z", (void *)n_list_contains},
    {"listsReload", "(J)V", (void *)n_lists_reload},
    {"stateSnapshot", "(J[B)V", (void *)n_state_snapshot},
    {"stateJson", "(J)[B", (void *)n_state_json},
};

jint register_state_natives(JNIEnv *env, jclass native) {
  return (*env)->RegisterNatives(env, native, STATE_METHODS, (jint)(sizeof STATE_METHODS / sizeof *STATE_METHODS));
}
