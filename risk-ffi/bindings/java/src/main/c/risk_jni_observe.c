/*
 * JNI glue of what an engine reports about itself and the switches that test it
 * (risk_engine_metrics_json, risk_engine_metrics_text, risk_engine_health_json,
 * risk_engine_force_open, risk_engine_monitor_json, risk_engine_monitor_tick,
 * risk_engine_drill, risk_engine_drill_report_json) for dev.risk.RiskNative, used by
 * dev.risk.RiskEngine and dev.risk.Drill. Rules: risk_jni.c.
 */
#include <jni.h>

#include <stdint.h>
#include <stdlib.h>

#include "risk.h"
#include "risk_jni.h"

#define METRICS_INITIAL_CAP 8192
/* The OpenMetrics text: every counter, and each latency histogram's buckets. */
#define METRICS_TEXT_INITIAL_CAP 16384
#define HEALTH_INITIAL_CAP 1024
/* A monitor report holds up to 32 recent alerts and a drift row per feature. */
#define MONITOR_INITIAL_CAP 4096
#define DRILL_REPORT_INITIAL_CAP 1024

/* ----- metrics ----- */

static risk_result call_metrics_json(const void *args, char *buf, size_t cap, size_t *len) {
  return risk_engine_metrics_json((const risk_engine *)args, buf, cap, len);
}

static jbyteArray JNICALL n_metrics_json(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  return read_text(env, call_metrics_json, engine_of(eng), METRICS_INITIAL_CAP, "metrics JSON");
}

static risk_result call_metrics_text(const void *args, char *buf, size_t cap, size_t *len) {
  return risk_engine_metrics_text((const risk_engine *)args, buf, cap, len);
}

static jbyteArray JNICALL n_metrics_text(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  return read_text(env, call_metrics_text, engine_of(eng), METRICS_TEXT_INITIAL_CAP, "metrics text");
}

/* ----- health, kill switch, monitors, drills ----- */

static risk_result call_health(const void *args, char *buf, size_t cap, size_t *len) {
  return risk_engine_health_json((const risk_engine *)args, buf, cap, len);
}

static jbyteArray JNICALL n_health_json(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  return read_text(env, call_health, engine_of(eng), HEALTH_INITIAL_CAP, "health");
}

/* A null tier reaches the library as NULL (RISK_ERR_NULL). */
static void JNICALL n_force_open(JNIEnv *env, jclass cls, jlong eng, jbyteArray tier_z, jboolean open) {
  (void)cls;
  char *tier;
  if (!copy_bytes(env, tier_z, "tier", 1, &tier, NULL)) return;
  risk_result r = risk_engine_force_open(engine_of(eng), tier, open == JNI_TRUE);
  if (r != RISK_OK) throw_risk(env, r);
  free(tier);
}

static risk_result call_monitor(const void *args, char *buf, size_t cap, size_t *len) {
  return risk_engine_monitor_json((const risk_engine *)args, buf, cap, len);
}

static jbyteArray JNICALL n_monitor_json(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  return read_text(env, call_monitor, engine_of(eng), MONITOR_INITIAL_CAP, "the monitor report");
}

static jint JNICALL n_monitor_tick(JNIEnv *env, jclass cls, jlong eng) {
  (void)cls;
  uint32_t raised = 0;
  risk_result r = risk_engine_monitor_tick(engine_of(eng), &raised);
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
    const risk_engine *e = engine_of(eng);
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
  return read_text(env, call_drill_report, engine_of(eng), DRILL_REPORT_INITIAL_CAP,
                   "the drill report");
}

static const JNINativeMethod OBSERVE_METHODS[] = {
    {"metricsJson", "(J)[B", (void *)n_metrics_json},
    {"metricsText", "(J)[B", (void *)n_metrics_text},
    {"healthJson", "(J)[B", (void *)n_health_json},
    {"forceOpen", "(J[BZ)V", (void *)n_force_open},
    {"monitorJson", "(J)[B", (void *)n_monitor_json},
    {"monitorTick", "(J)I", (void *)n_monitor_tick},
    {"drill", "(J[B[B[B)[B", (void *)n_drill},
    {"drillReportJson", "(J)[B", (void *)n_drill_report_json},
};

jint register_observe_natives(JNIEnv *env, jclass native) {
  return (*env)->RegisterNatives(env, native, OBSERVE_METHODS, (jint)(sizeof OBSERVE_METHODS / sizeof *OBSERVE_METHODS));
}
