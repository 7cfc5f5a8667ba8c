/*
 * JNI glue of the engine handle's lifecycle (risk_version, risk_engine_new_from_path,
 * risk_engine_new_from_toml, risk_engine_free, risk_engine_reload_rules,
 * risk_engine_shutdown) for dev.risk.RiskNative, used by dev.risk.RiskEngine. Rules: risk_jni.c.
 */
#include <jni.h>

#include <stdint.h>
#include <stdlib.h>

#include "risk.h"
#include "risk_jni.h"

static jstring JNICALL n_version(JNIEnv *env, jclass cls) {
  (void)cls;
  const char *v = risk_version();
  if (v == NULL) {
    throw_illegal_state(env, "risk_version returned NULL");
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
    throw_illegal_state(env, "risk_engine_new_from_path returned RISK_OK and no engine");
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
    throw_illegal_state(env, "risk_engine_new_from_toml returned RISK_OK and no engine");
    return 0;
  }
  return (jlong)(intptr_t)e;
}

static void JNICALL n_engine_free(JNIEnv *env, jclass cls, jlong e) {
  (void)env;
  (void)cls;
  risk_engine_free((risk_engine *)(intptr_t)e);
}

static void JNICALL n_reload_rules(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  risk_result r = risk_engine_reload_rules(engine_of(eng));
  if (r != RISK_OK) throw_risk(env, r);
}

static jlongArray JNICALL n_shutdown(JNIEnv *env, jclass cls, jlong eng, jint drain_ms) {
  (void)cls;
  if (drain_ms < 0) {
    throw_iae(env, "negative drain");
    return NULL;
  }
  uint64_t drained = 0, abandoned = 0;
  risk_result r = risk_engine_shutdown(engine_of(eng), (uint32_t)drain_ms, &drained, &abandoned);
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

static const JNINativeMethod ENGINE_METHODS[] = {
    {"version", "()Ljava/lang/String;", (void *)n_version},
    {"engineNewFromPath", "([B)J", (void *)n_engine_new_from_path},
    {"engineNewFromToml", "([B[B)J", (void *)n_engine_new_from_toml},
    {"engineFree", "(J)V", (void *)n_engine_free},
    {"reloadRules", "(J)V", (void *)n_reload_rules},
    {"shutdown", "(JI)[J", (void *)n_shutdown},
};

jint register_engine_natives(JNIEnv *env, jclass native) {
  return (*env)->RegisterNatives(env, native, ENGINE_METHODS, (jint)(sizeof ENGINE_METHODS / sizeof *ENGINE_METHODS));
}
