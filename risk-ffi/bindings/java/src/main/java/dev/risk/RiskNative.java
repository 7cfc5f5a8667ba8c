package dev.risk;

/**
 * The JNI entry points (src/main/c/risk_jni.c). Package-private: {@link RiskEngine} and
 * {@link Subscription} own the handles and the locking.
 *
 * <p>Every method either succeeds or throws: a non-OK {@code risk_result} becomes a
 * {@link RiskException} carrying {@code risk_last_error()}; a glue-level misuse (null array,
 * bad offsets, negative timeout) becomes an {@link IllegalArgumentException}. Strings travel
 * as NUL-terminated standard UTF-8 {@code byte[]} produced by {@link Utf8}, never as
 * {@code GetStringUTFChars}' <em>modified</em> UTF-8 (which encodes U+0000 and non-BMP
 * characters in ways the library rightly rejects as invalid UTF-8).
 */
final class RiskNative {
    /** longs per decision in the {@code out} arrays (layout in risk_jni.c). */
    static final int DECISION_LONGS = 32;
    /** longs per verdict. */
    static final int VERDICT_LONGS = 8;
    /** longs per transaction header in a batch: id, entity, timestamp_ms, device. */
    static final int TXN_HEADER_LONGS = 4;
    /** strings per transaction before its features: currency, country, channel, merchant, ip, email. */
    static final int TXN_FIXED_STRINGS = 6;
    /** {@code RISK_MAX_BATCH}: {@code risk_engine_decide_batch}'s limit. */
    static final int MAX_BATCH = 65_536;

    static {
        NativeLoader.load();
    }

    private RiskNative() {}

    /** Forces the class (and so the library) to load. */
    static void ensureLoaded() {}

    static native String version();

    static native long engineNewFromPath(byte[] pathZ);

    static native long engineNewFromToml(byte[] toml, byte[] baseDirZ);

    static native void engineFree(long engine);

    static native void decide(long engine, long id, long entity, long timestampMs, double amount,
                              int mcc, long device, byte[] strings, int[] offsets,
                              double[] featureValues, long[] out);

    /** Longs {@link #explain} fills: the count, then (code, weight's float bits) per reason. */
    static final int EXPLAIN_LONGS = 1 + 2 * 8;

    static native void explain(long engine, long id, long entity, long timestampMs, double amount,
                               int mcc, long device, byte[] strings, int[] offsets,
                               double[] featureValues, long[] out);

    static native void decideJson(long engine, byte[] json, long[] out);

    /**
     * Returns {@code risk_last_error()} after the call when at least one item failed (the C
     * ABI keeps a single message per call), else null.
     */
    static native byte[] decideBatch(long engine, int n, long[] headers, double[] amounts,
                                     int[] mccs, byte[] strings, int[] offsets, int[] offsetStart,
                                     double[] featureValues, long[] out, int[] codes);

    static native byte[] reasonName(int code);

    static native String fallbackName(int code);

    static native byte[] metricsJson(long engine);

    static native byte[] metricsText(long engine);

    static native void reloadRules(long engine);

    static native long[] shutdown(long engine, int drainMs);

    static native long subscribe(long engine);

    /**
     * True with {@code out} filled, false on {@code RISK_ERR_EMPTY} (timed out); any other
     * code, {@code RISK_ERR_CLOSED} included, is thrown as a {@link RiskException}.
     */
    static native boolean poll(long subscription, int timeoutMs, long[] out);

    static native void subscriptionFree(long subscription);

    /**
     * {@code risk_audit_query_json}: the JSON array of the records of the log in
     * {@code dirZ} matching {@code queryZ} (null: everything), as UTF-8.
     */
    static native byte[] auditQueryJson(byte[] dirZ, byte[] queryZ);

    /** {@code risk_engine_audit_flush}: the durable sequence number. */
    static native long auditFlush(long engine, int timeoutMs);

    static native byte[] auditStatsJson(long engine);

    /**
     * {@code risk_engine_deploy}: the deploy id. {@code planZ} and {@code baseDirZ} may be
     * null (NULL: the standard plan, the working directory).
     */
    static native long deploy(long engine, byte[] targetZ, byte[] candidateZ, byte[] planZ, byte[] baseDirZ);

    /** {@code risk_engine_deploy_status_json} as UTF-8. */
    static native byte[] deployStatusJson(long engine, byte[] targetZ);

    static native void promote(long engine, byte[] targetZ);

    /** {@code risk_engine_rollback}; {@code reasonZ} may be null (NULL: none given). */
    static native void rollback(long engine, byte[] targetZ, byte[] reasonZ);

    static native void deployTick(long engine);

    /** {@code risk_engine_health_json} as UTF-8. */
    static native byte[] healthJson(long engine);

    static native void forceOpen(long engine, byte[] tierZ, boolean open);

    /** {@code risk_engine_monitor_json} as UTF-8. */
    static native byte[] monitorJson(long engine);

    /** {@code risk_engine_monitor_tick}: the alerts raised (clamped to {@code Integer.MAX_VALUE}). */
    static native int monitorTick(long engine);

    /**
     * {@code risk_engine_drill}, then {@code risk_engine_drill_report_json} in the same native
     * call: the report as UTF-8. {@code labelsZ} may be null (NULL: no labels).
     */
    static native byte[] drill(long engine, byte[] faultZ, byte[] txnsZ, byte[] labelsZ);

    /** {@code risk_engine_drill_report_json} as UTF-8 ({@code RISK_ERR_EMPTY} before any drill). */
    static native byte[] drillReportJson(long engine);

    // ----- entity state (src/main/c/risk_jni_state.c) -----

    /** {@code risk_engine_report_label}: the label windows reached. */
    static native long reportLabel(long engine, long txnId, boolean fraud, long atMs);

    /** {@code risk_engine_list_add}; a null list or value reaches the library as NULL. */
    static native void listAdd(long engine, byte[] listZ, byte[] valueZ, long expiresAtMs);

    /** {@code risk_engine_list_remove}: whether the value was there. */
    static native boolean listRemove(long engine, byte[] listZ, byte[] valueZ);

    /** {@code risk_engine_list_contains}. */
    static native boolean listContains(long engine, byte[] listZ, byte[] valueZ);

    static native void listsReload(long engine);

    /** {@code risk_engine_state_snapshot}; {@code pathZ} may be null (NULL: the configured path). */
    static native void stateSnapshot(long engine, byte[] pathZ);

    /** {@code risk_engine_state_json} as UTF-8. */
    static native byte[] stateJson(long engine);
}
