/*
 * JNI glue of deep-tier verdict subscriptions (risk_engine_subscribe, risk_subscription_poll,
 * risk_subscription_free) for dev.risk.RiskNative, used by dev.risk.Subscription.
 * Rules: risk_jni.c.
 */
#include <jni.h>

#include <stdint.h>

#include "risk.h"
#include "risk_jni.h"

/* Layout shared with RiskNative / Verdict.fromLongs. */
#define VERDICT_LONGS 8

static jlong JNICALL n_subscribe(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  risk_subscription *s = NULL;
  risk_result r = risk_engine_subscribe(engine_of(eng), &s);
  if (r != RISK_OK) {
    throw_risk(env, r);
    return 0;
  }
  if (s == NULL) {
    throw_illegal_state(env, "risk_engine_subscribe returned RISK_OK and no subscription");
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

static const JNINativeMethod SUBSCRIPTION_METHODS[] = {
    {"subscribe", "(J)J", (void *)n_subscribe},
    {"poll", "(JI[J)Z", (void *)n_poll},
    {"subscriptionFree", "(J)V", (void *)n_subscription_free},
};

jint register_subscription_natives(JNIEnv *env, jclass native) {
  return (*env)->RegisterNatives(env, native, SUBSCRIPTION_METHODS,
                                 (jint)(sizeof SUBSCRIPTION_METHODS / sizeof *SUBSCRIPTION_METHODS));
}
