/*
 * JNI glue of the model lifecycle (risk_engine_deploy, risk_engine_deploy_status_json,
 * risk_engine_promote, risk_engine_rollback, risk_engine_deploy_tick) for
 * dev.risk.RiskNative, used by dev.risk.Deploy. Rules: risk_jni.c.
 */
#include <jni.h>

#include <stdint.h>
#include <stdlib.h>

#include "risk.h"
#include "risk_jni.h"

/* A deploy status holds up to 64 history events. */
#define DEPLOY_STATUS_INITIAL_CAP 4096


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
    risk_result r = risk_engine_deploy(engine_of(eng), target, cand, plan, dir, &id);
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
  deploy_status_args a = {engine_of(eng), target};
  jbyteArray b = read_text(env, call_deploy_status, &a, DEPLOY_STATUS_INITIAL_CAP, "the deploy status");
  free(target);
  return b;
}

static void JNICALL n_promote(JNIEnv *env, jclass cls, jlong eng, jbyteArray target_z) {
  (void)cls;
  char *target;
  if (!copy_bytes(env, target_z, "target", 1, &target, NULL)) return;
  risk_result r = risk_engine_promote(engine_of(eng), target);
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
  risk_result r = risk_engine_rollback(engine_of(eng), target, reason);
  if (r != RISK_OK) throw_risk(env, r);
  free(target);
  free(reason);
}

static void JNICALL n_deploy_tick(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  risk_result r = risk_engine_deploy_tick(engine_of(eng));
  if (r != RISK_OK) throw_risk(env, r);
}

static const JNINativeMethod DEPLOY_METHODS[] = {
    {"deploy", "(J[B[B[B[B)J", (void *)n_deploy},
    {"deployStatusJson", "(J[B)[B", (void *)n_deploy_status_json},
    {"promote", "(J[B)V", (void *)n_promote},
    {"rollback", "(J[B[B)V", (void *)n_rollback},
    {"deployTick", "(J)V", (void *)n_deploy_tick},
};

jint register_deploy_natives(JNIEnv *env, jclass native) {
  return (*env)->RegisterNatives(env, native, DEPLOY_METHODS, (jint)(sizeof DEPLOY_METHODS / sizeof *DEPLOY_METHODS));
}
