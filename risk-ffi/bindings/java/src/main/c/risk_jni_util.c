/*
 * The helpers every JNI glue file uses (declared in risk_jni.h): the exceptions it throws,
 * byte[] copies in and out, array length checks and the one read of a (buf, cap, *len) text
 * function.
 *
 * Every helper that can throw keeps an exception already pending (the first one wins) and
 * reports failure by its return value, so a caller returns at once after freeing what it
 * allocated. No JNI array is pinned: arrays are copied with Get/Set<Type>ArrayRegion.
 */
#include <jni.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "risk.h"
#include "risk_jni.h"

/* Reads of a text that keeps growing between two calls before read_text gives up. */
#define TEXT_TRIES 8

static jclass g_risk_exception;         /* dev/risk/RiskException */
static jmethodID g_risk_exception_ctor; /* (I[B)V */
static jclass g_illegal_argument;       /* java/lang/IllegalArgumentException */
static jclass g_illegal_state;          /* java/lang/IllegalStateException */
static jclass g_out_of_memory;          /* java/lang/OutOfMemoryError */

/* ----- loading ----- */

static jclass global_class(JNIEnv *env, const char *name) {
  jclass local = (*env)->FindClass(env, name);
  if (local == NULL) return NULL; /* NoClassDefFoundError pending */
  jclass g = (jclass)(*env)->NewGlobalRef(env, local);
  (*env)->DeleteLocalRef(env, local);
  if (g == NULL) throw_oom(env, "global reference");
  return g;
}

jint util_load(JNIEnv *env) {
  if ((g_illegal_argument = global_class(env, "java/lang/IllegalArgumentException")) == NULL) return JNI_ERR;
  if ((g_illegal_state = global_class(env, "java/lang/IllegalStateException")) == NULL) return JNI_ERR;
  if ((g_out_of_memory = global_class(env, "java/lang/OutOfMemoryError")) == NULL) return JNI_ERR;
  if ((g_risk_exception = global_class(env, "dev/risk/RiskException")) == NULL) return JNI_ERR;
  g_risk_exception_ctor = (*env)->GetMethodID(env, g_risk_exception, "<init>", "(I[B)V");
  if (g_risk_exception_ctor == NULL) return JNI_ERR;
  return JNI_OK;
}

void util_unload(JNIEnv *env) {
  if (g_risk_exception) (*env)->DeleteGlobalRef(env, g_risk_exception);
  if (g_illegal_argument) (*env)->DeleteGlobalRef(env, g_illegal_argument);
  if (g_illegal_state) (*env)->DeleteGlobalRef(env, g_illegal_state);
  if (g_out_of_memory) (*env)->DeleteGlobalRef(env, g_out_of_memory);
}

/* ----- exceptions ----- */

static void throw_class(JNIEnv *env, jclass cls, const char *msg) {
  if ((*env)->ExceptionCheck(env)) return; /* keep the first exception */
  (*env)->ThrowNew(env, cls, msg);
}

void throw_iae(JNIEnv *env, const char *msg) { throw_class(env, g_illegal_argument, msg); }

void throw_illegal_state(JNIEnv *env, const char *msg) { throw_class(env, g_illegal_state, msg); }

void throw_oom(JNIEnv *env, const char *what) { throw_class(env, g_out_of_memory, what); }

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

void throw_risk(JNIEnv *env, risk_result code) {
  const char *m = risk_last_error();
  if (m == NULL) m = "";
  throw_risk_bytes(env, code, m, strlen(m));
}

/* ----- byte[] in and out ----- */

jbyteArray new_bytes(JNIEnv *env, const char *p, size_t n) {
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

int check_len(JNIEnv *env, jarray a, jsize need, const char *what) {
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

/* ----- (buf, cap, *len) text ----- */

/* The text can grow between two calls (counters move, a live engine appends to its log), so
 * each retry asks for what the library said it needs, with slack. */
jbyteArray read_text(JNIEnv *env, text_call call, const void *args, size_t cap, const char *what) {
  for (int attempt = 0; attempt < TEXT_TRIES; attempt++) {
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
