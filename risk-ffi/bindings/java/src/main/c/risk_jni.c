/*
 * JNI glue between dev.risk.RiskNative and the risk C ABI (risk-ffi/include/risk.h): the
 * library's load and unload. The natives live by concept in risk_jni_engine.c,
 * risk_jni_decide.c, risk_jni_subscription.c, risk_jni_observe.c, risk_jni_audit.c,
 * risk_jni_deploy.c and risk_jni_state.c; the helpers they share in risk_jni_util.c
 * (declared, with each file's registration function, in risk_jni.h).
 *
 * Rules every glue file keeps:
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
 *    System.load loudly instead of the first call.
 *
 * Engine and subscription handles travel as jlong (the long field of RiskEngine/Subscription).
 * The library refuses a freed handle itself (RISK_ERR_HANDLE: handles are never-reused tokens);
 * the Java side's lock only makes close() wait for calls in flight and gives a Java exception.
 */
#include <jni.h>

#include "risk_jni.h"

/* Each concept file's natives, registered in turn. */
static jint (*const REGISTER[])(JNIEnv *, jclass) = {
    register_engine_natives, register_decide_natives, register_subscription_natives, register_observe_natives,
    register_audit_natives,  register_deploy_natives, register_state_natives,
};

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM *vm, void *reserved) {
  (void)reserved;
  JNIEnv *env;
  if ((*vm)->GetEnv(vm, (void **)&env, JNI_VERSION_1_8) != JNI_OK) return JNI_ERR;
  if (util_load(env) != JNI_OK) return JNI_ERR;
  jclass native = (*env)->FindClass(env, "dev/risk/RiskNative");
  if (native == NULL) return JNI_ERR;
  jint rc = JNI_OK;
  for (size_t i = 0; rc == JNI_OK && i < sizeof REGISTER / sizeof *REGISTER; i++) rc = REGISTER[i](env, native);
  (*env)->DeleteLocalRef(env, native);
  if (rc != JNI_OK) return JNI_ERR; /* NoSuchMethodError pending: a signature mismatch */
  return JNI_VERSION_1_8;
}

JNIEXPORT void JNICALL JNI_OnUnload(JavaVM *vm, void *reserved) {
  (void)reserved;
  JNIEnv *env;
  if ((*vm)->GetEnv(vm, (void **)&env, JNI_VERSION_1_8) != JNI_OK) return;
  util_unload(env);
}
