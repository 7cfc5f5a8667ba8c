package dev.risk;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.locks.StampedLock;
import java.util.function.LongFunction;

/**
 * A risk engine ({@code risk_engine *}). Thread-safe: any number of threads may call
 * {@link #decide} and the other methods concurrently. The library holds no global lock
 * during calls, so a long poll or a shutdown drain does not hold up other calls.
 *
 * <h2>Closing</h2>
 * {@link #close()} frees the native engine; it is idempotent. Every call holds a read lock
 * of a {@link StampedLock} for its whole native call and {@code close} takes the write lock,
 * so {@code close} waits for this engine's calls in flight, and a call after close throws
 * {@link IllegalStateException}.
 *
 * <p>The lock is not needed for memory safety: the library's handles are never-reused
 * tokens, a freed one is refused with {@code RISK_ERR_HANDLE}, and a native call in flight
 * when the engine is freed finishes on its own reference. It gives a clear Java exception
 * and the guarantee that nothing runs on the engine once {@code close} returns.
 *
 * <p>Closing the engine also closes the {@link Subscription}s it handed out.
 */
public final class RiskEngine implements AutoCloseable {
    private final StampedLock lock = new StampedLock();
    /** The {@code risk_engine *}; 0 once closed. Written only under the write lock. */
    private long handle;
    private final Set<Subscription> subscriptions = ConcurrentHashMap.newKeySet();

    private RiskEngine(long handle) {
        this.handle = handle;
    }

    /** The library version ({@code risk_version}). */
    public static String version() {
        return RiskNative.version();
    }

    /** Builds an engine from a {@code risk.toml} file (relative paths resolve against its directory). */
    public static RiskEngine fromPath(Path path) {
        if (path == null) {
            throw new IllegalArgumentException("path is null");
        }
        return fromPath(path.toString());
    }

    /** Builds an engine from a {@code risk.toml} file. */
    public static RiskEngine fromPath(String path) {
        if (path == null) {
            throw new IllegalArgumentException("path is null");
        }
        return new RiskEngine(RiskNative.engineNewFromPath(Utf8.z(path, "path")));
    }

    /**
     * Builds an engine from {@code risk.toml} text; relative paths resolve against
     * {@code baseDir} (null: the process's current directory).
     */
    public static RiskEngine fromToml(String toml, Path baseDir) {
        if (toml == null) {
            throw new IllegalArgumentException("toml is null");
        }
        byte[] dir = baseDir == null ? null : Utf8.z(baseDir.toString(), "baseDir");
        return new RiskEngine(RiskNative.engineNewFromToml(Utf8.text(toml, "toml"), dir));
    }

    /** Decides one transaction. */
    public Decision decide(Transaction t) {
        if (t == null) {
            throw new IllegalArgumentException("transaction is null");
        }
        long[] out = new long[RiskNative.DECISION_LONGS];
        long stamp = lock.readLock();
        try {
            RiskNative.decide(live(), t.id(), t.entity(), t.timestampMs(), t.amount(), t.mcc(), t.device(),
                t.strings, t.offsets, t.featureValues, out);
        } finally {
            lock.unlockRead(stamp);
        }
        return Decision.fromLongs(out, 0);
    }

    /**
     * The fast tier's reasons for a transaction, on request (a case tool, a dispute): the
     * model version it is routed to computes them whatever its decisions carry (a tree
     * model's exact SHAP contributions), most important first. The features are used as
     * given. Empty when no model serves the transaction or its explanation failed; a bad
     * transaction throws as {@link #decide} does.
     */
    public List<Reason> explain(Transaction t) {
        if (t == null) {
            throw new IllegalArgumentException("transaction is null");
        }
        long[] out = new long[RiskNative.EXPLAIN_LONGS];
        long stamp = lock.readLock();
        try {
            RiskNative.explain(live(), t.id(), t.entity(), t.timestampMs(), t.amount(), t.mcc(), t.device(),
                t.strings, t.offsets, t.featureValues, out);
        } finally {
            lock.unlockRead(stamp);
        }
        return Reason.fromLongs(out, 0);
    }

    /**
     * Decides a transaction given as JSON ({@code {"id", "entity", "timestamp_ms", "amount",
     * "currency", "mcc", "country", "channel", "device", "merchant", "ip", "email",
     * "features": {...}}}).
     */
    public Decision decideJson(String json) {
        if (json == null) {
            throw new IllegalArgumentException("json is null");
        }
        byte[] b = Utf8.text(json, "json");
        long[] out = new long[RiskNative.DECISION_LONGS];
        long stamp = lock.readLock();
        try {
            RiskNative.decideJson(live(), b, out);
        } finally {
            lock.unlockRead(stamp);
        }
        return Decision.fromLongs(out, 0);
    }

    /**
     * Decides a list of transactions, one {@link BatchItem} per transaction in order. An
     * item's failure does not fail the batch; a failure of the call itself (engine shut
     * down, ...) throws. Lists longer than the C limit (65,536) are split into several calls.
     */
    public List<BatchItem> decideBatch(List<Transaction> txns) {
        if (txns == null) {
            throw new IllegalArgumentException("transactions list is null");
        }
        if (txns.isEmpty()) {
            withHandle(h -> null); // like the C ABI, an empty batch still checks the engine
            return List.of();
        }
        List<BatchItem> all = new ArrayList<>(txns.size());
        for (int from = 0; from < txns.size(); from += RiskNative.MAX_BATCH) {
            decideChunk(txns.subList(from, Math.min(txns.size(), from + RiskNative.MAX_BATCH)), from, all);
        }
        return Collections.unmodifiableList(all);
    }

    private void decideChunk(List<Transaction> txns, int base, List<BatchItem> into) {
        int n = txns.size();
        long[] headers = new long[n * RiskNative.TXN_HEADER_LONGS];
        double[] amounts = new double[n];
        int[] mccs = new int[n];
        int[] offsetStart = new int[n + 1];
        int nStrings = 0;
        int nOffsets = 0;
        for (int i = 0; i < n; i++) {
            Transaction t = txns.get(i);
            if (t == null) {
                throw new IllegalArgumentException("transaction " + (base + i) + " is null");
            }
            nStrings += t.strings.length;
            nOffsets += t.offsets.length;
        }
        byte[] strings = new byte[nStrings];
        int[] offsets = new int[nOffsets];
        double[] values = new double[(nOffsets - RiskNative.TXN_FIXED_STRINGS * n) / 2];
        int s = 0;
        int o = 0;
        int v = 0;
        for (int i = 0; i < n; i++) {
            Transaction t = txns.get(i);
            headers[4 * i] = t.id();
            headers[4 * i + 1] = t.entity();
            headers[4 * i + 2] = t.timestampMs();
            headers[4 * i + 3] = t.device();
            amounts[i] = t.amount();
            mccs[i] = t.mcc();
            offsetStart[i] = o;
            for (int k = 0; k < t.offsets.length; k++) {
                offsets[o + k] = t.offsets[k] < 0 ? -1 : t.offsets[k] + s;
            }
            System.arraycopy(t.strings, 0, strings, s, t.strings.length);
            System.arraycopy(t.featureValues, 0, values, v, t.featureValues.length);
            s += t.strings.length;
            o += t.offsets.length;
            v += t.featureValues.length;
        }
        offsetStart[n] = o;
        long[] out = new long[n * RiskNative.DECISION_LONGS];
        int[] codes = new int[n];
        byte[] lastError;
        long stamp = lock.readLock();
        try {
            lastError = RiskNative.decideBatch(live(), n, headers, amounts, mccs, strings, offsets, offsetStart,
                values, out, codes);
        } finally {
            lock.unlockRead(stamp);
        }
        int failed = 0;
        for (int c : codes) {
            if (c != RiskException.OK) {
                failed++;
            }
        }
        String message = Utf8.decode(lastError);
        for (int i = 0; i < n; i++) {
            if (codes[i] == RiskException.OK) {
                into.add(new BatchItem(base + i, Decision.fromLongs(out, i * RiskNative.DECISION_LONGS), null));
            } else {
                String detail = failed == 1 && message != null ? message
                    : "batch item " + (base + i) + " failed; the C ABI keeps one message per call and "
                        + failed + " items failed (last message: " + message + ")";
                into.add(new BatchItem(base + i, null, new RiskException(codes[i], detail)));
            }
        }
    }

    /** Every metric as JSON text. */
    public String metricsJson() {
        return Utf8.decode(withHandle(RiskNative::metricsJson));
    }

    /**
     * Every metric in the Prometheus/OpenMetrics text exposition format
     * ({@code risk_engine_metrics_text}), names prefixed {@code risk_}, ending with
     * {@code # EOF}: what a {@code /metrics} endpoint serves to Prometheus (the library starts
     * no server).
     */
    public String metricsText() {
        return Utf8.decode(withHandle(RiskNative::metricsText));
    }

    /**
     * Waits up to {@code timeout} (clamped to 2^31-1 ms; zero: do not wait) until every record
     * the engine's audit log ({@code [audit]} in its TOML) accepted is durable, and returns the
     * durable sequence number ({@code risk_engine_audit_flush}). Call it before reading the log
     * of a live engine with {@link AuditLog#read}, and before {@link #close()}: closing does
     * not wait for the log's writer.
     *
     * @throws RiskException {@code RISK_ERR_INVALID} when the engine has no {@code [audit]}
     *     log; {@code RISK_ERR_AUDIT} ({@link RiskException#ERR_AUDIT}) when the wait timed
     *     out, a write failed or the log is closed (after {@link #shutdown})
     */
    public long auditFlush(Duration timeout) {
        if (timeout == null) {
            throw new IllegalArgumentException("timeout is null");
        }
        if (timeout.isNegative()) {
            throw new IllegalArgumentException("timeout is negative: " + timeout);
        }
        int ms = clampMillis(timeout);
        long stamp = lock.readLock();
        try {
            return RiskNative.auditFlush(live(), ms);
        } finally {
            lock.unlockRead(stamp);
        }
    }

    /**
     * The audit log's counters as JSON text ({@code risk_engine_audit_stats_json}):
     * {@code accepted}, {@code shed_full}, {@code shed_closed}, {@code written_seq},
     * {@code durable_seq}, {@code batches}, {@code io_errors}, {@code last_error},
     * {@code segments_deleted}, {@code recovery} {@code {segment, truncated_bytes, corrupt,
     * last_seq}}. {@code RISK_ERR_INVALID} when the engine has no {@code [audit]} log.
     */
    public String auditStatsJson() {
        return Utf8.decode(withHandle(RiskNative::auditStatsJson));
    }

    /** {@link #auditStatsJson()} as an unmodifiable map (numbers {@code Long}, as in {@link AuditLog#read}). */
    @SuppressWarnings("unchecked")
    public Map<String, Object> auditStats() {
        return (Map<String, Object>) (Map<?, ?>) Json.parse(auditStatsJson());
    }

    /**
     * Deploys a candidate to {@code target} ({@link Deploy#RULES}, {@link Deploy#FAST},
     * {@link Deploy#DEEP} or {@link Deploy#POLICY}) and returns the deploy id
     * ({@code risk_engine_deploy}). The validation gate runs on this thread, on a sample of
     * recent live decisions (by default it needs 32: let traffic run first, or set
     * {@code [gate] min_sample}); the call returns once the candidate shadows, is in canary
     * or serves (see {@link #deployStatus}). The TOML forms are described in {@link Deploy}.
     *
     * @param candidateToml a {@code [scorer]} table (optionally with {@code [calibration]}),
     *     a {@code [policy]} table, or {@code stored = "<key>"}
     * @param planToml the rollout plan; null: the standard plan (shadow, then canary 1% →
     *     10% → 50% → 100%, a minute each)
     * @param baseDir what relative paths in the candidate resolve against; null: the
     *     process's working directory
     * @throws RiskException {@code RISK_ERR_DEPLOY} ({@link RiskException#ERR_DEPLOY}) when
     *     refused (the gate, a candidate that does not load, a deploy of {@code target} in
     *     progress): what serves is unchanged; {@code RISK_ERR_INVALID} for an unknown
     *     target or a malformed plan
     */
    public long deploy(String target, String candidateToml, String planToml, String baseDir) {
        byte[] t = required(target, "target");
        byte[] c = required(candidateToml, "candidateToml");
        byte[] p = Utf8.z(planToml, "planToml");
        byte[] d = Utf8.z(baseDir, "baseDir");
        return withHandle(h -> RiskNative.deploy(h, t, c, p, d));
    }

    /**
     * {@code target}'s deploy status as JSON text ({@code risk_engine_deploy_status_json}):
     * {@code target}, {@code epoch}, {@code serving} ({@code {id, name, version, hash}}, null
     * when the target has no tier), {@code previous} (what a rollback returns to, most recent
     * first), {@code active} (the deploy in progress or null: {@code {id, candidate, phase
     * ("shadow" | "canary"), stage, share, started_ms, gate, candidate_stats, serving_stats,
     * shadow_shed}}) and {@code history} (the latest events, oldest first: {@code {kind
     * ("started" | "refused" | "stage" | "promoted" | "rolled_back"), deploy, version, detail,
     * share, ...}}). {@code RISK_ERR_INVALID} for an unknown target.
     */
    public String deployStatusJson(String target) {
        byte[] t = required(target, "target");
        return Utf8.decode(withHandle(h -> RiskNative.deployStatusJson(h, t)));
    }

    /** {@link #deployStatusJson} as an unmodifiable map (numbers {@code Long} or {@code Double}, as in {@link AuditLog#read}). */
    @SuppressWarnings("unchecked")
    public Map<String, Object> deployStatus(String target) {
        return (Map<String, Object>) (Map<?, ?>) Json.parse(deployStatusJson(target));
    }

    /**
     * Promotes the candidate of {@code target}'s deploy in progress now, skipping its
     * remaining stages ({@code risk_engine_promote}); {@code RISK_ERR_DEPLOY} when none is in
     * progress.
     */
    public void promote(String target) {
        byte[] t = required(target, "target");
        withHandle(h -> {
            RiskNative.promote(h, t);
            return null;
        });
    }

    /**
     * Ends {@code target}'s deploy in progress (what serves stays), or, with none in
     * progress, restores the version that served before the current one
     * ({@code risk_engine_rollback}). {@code reason} (null: none given) is recorded in the
     * history. {@code RISK_ERR_DEPLOY} when there is nothing to roll back to.
     */
    public void rollback(String target, String reason) {
        byte[] t = required(target, "target");
        byte[] r = Utf8.z(reason, "reason");
        withHandle(h -> {
            RiskNative.rollback(h, t, r);
            return null;
        });
    }

    /**
     * Judges every deploy's guards and stages now ({@code risk_engine_deploy_tick}; the
     * engine's supervisor also does, every {@code [deploy] check_interval_ms}).
     */
    public void deployTick() {
        withHandle(h -> {
            RiskNative.deployTick(h);
            return null;
        });
    }

    /**
     * The engine's health as JSON text ({@code risk_engine_health_json}): {@code status}
     * ({@link Health#READY}, {@link Health#DEGRADED}, {@link Health#SHUT_DOWN}), {@code reasons}
     * (why degraded), {@code fast} and {@code deep} ({@code {present, state, serving}}:
     * {@code state} one of {@link Health#CLOSED}, {@link Health#OPEN}, {@link Health#HALF_OPEN},
     * {@link Health#FORCED_OPEN}, {@link Health#ABSENT}; {@code serving} {@code {id, name,
     * version, hash}} or null) and {@code deploying} (targets with a deploy in progress).
     */
    public String healthJson() {
        return Utf8.decode(withHandle(RiskNative::healthJson));
    }

    /** {@link #healthJson()} as an unmodifiable map. */
    @SuppressWarnings("unchecked")
    public Map<String, Object> health() {
        return (Map<String, Object>) (Map<?, ?>) Json.parse(healthJson());
    }

    /**
     * Sets ({@code open} true) or clears the kill switch of {@code tier} ({@link Health#FAST}
     * or {@link Health#DEEP}; {@code risk_engine_force_open}): while set, the fast tier is not
     * called and the rules decide (fallback {@link Fallback#CIRCUIT_OPEN}), or the deep tier is
     * not called and gray-zone verdicts come from its fallback. Effective on the next decision;
     * {@link #health()} reports the tier {@link Health#FORCED_OPEN}.
     *
     * @throws RiskException {@code RISK_ERR_INVALID} for another tier name
     */
    public void forceOpen(String tier, boolean open) {
        byte[] t = required(tier, "tier");
        withHandle(h -> {
            RiskNative.forceOpen(h, t, open);
            return null;
        });
    }

    /**
     * The monitors' latest values as JSON text ({@code risk_engine_monitor_json}):
     * {@code windows}, {@code agreement} ({@code [share, samples]} or null), {@code drift}
     * ({@code [{subject, ks, psi, n}]}), {@code deep_fallback_share}, {@code firing} (alerts
     * firing now as {@code "kind:subject"}, e.g. {@code "agreement:agreement"}),
     * {@code baseline}, {@code recent} (the latest alerts: {@code {kind, subject, value,
     * threshold, firing, at_ms, detail}}).
     *
     * @throws RiskException {@code RISK_ERR_INVALID} when the engine has no {@code [monitor]}
     */
    public String monitorJson() {
        return Utf8.decode(withHandle(RiskNative::monitorJson));
    }

    /** {@link #monitorJson()} as an unmodifiable map. */
    @SuppressWarnings("unchecked")
    public Map<String, Object> monitorReport() {
        return (Map<String, Object>) (Map<?, ?>) Json.parse(monitorJson());
    }

    /**
     * Judges every monitor now and returns how many alerts that raised
     * ({@code risk_engine_monitor_tick}; the engine's monitor thread does so every
     * {@code [monitor] interval_ms}, 0: only on these calls). Alerts are edge-triggered (one
     * when a monitor goes bad, one when it recovers) and appear in {@link #monitorJson()}'s
     * {@code recent}. An engine without {@code [monitor]} raises none.
     */
    public int monitorTick() {
        return withHandle(RiskNative::monitorTick);
    }

    /**
     * Runs a fallback drill ({@code risk_engine_drill}) and returns its report as JSON text:
     * {@code fault} ({@code {kind, ...}}), {@code decisions}, {@code by_tier} and
     * {@code fallbacks} (arrays of {@code [name, count]} pairs), {@code errors},
     * {@code switch_time} {@code {p50_us, p99_us, max_us}}, {@code circuit_after},
     * {@code model_quality} / {@code drill_quality} ({@code {recall, precision, auprc}}, null
     * without labels), {@code deep_verdicts}, {@code duration_ms}. Live traffic on the engine
     * is affected while the drill runs.
     *
     * @param fault {@link Drill#FAST_DOWN}, {@link Drill#FAST_NAN}, {@link Drill#DEEP_DOWN} or
     *     {@link Drill#fastSlow}
     * @param txnsJson a JSON array of transactions (the objects {@link #decideJson} takes)
     * @param labelsJson null, or a JSON array of booleans (fraud), one per transaction
     *     ({@link Drill#labels})
     * @throws RiskException {@code RISK_ERR_INVALID} for an unknown fault or a label count that
     *     does not match; {@code RISK_ERR_JSON} / {@code RISK_ERR_TRANSACTION} for a
     *     transaction the library refuses (the detail names its index)
     */
    public String drill(String fault, String txnsJson, String labelsJson) {
        byte[] f = required(fault, "fault");
        byte[] t = required(txnsJson, "txnsJson");
        byte[] l = Utf8.z(labelsJson, "labelsJson");
        return Utf8.decode(withHandle(h -> RiskNative.drill(h, f, t, l)));
    }

    /**
     * The last drill's report as JSON text ({@code risk_engine_drill_report_json}), as
     * {@link #drill} returns it.
     *
     * @throws RiskException {@code RISK_ERR_EMPTY} ({@link RiskException#ERR_EMPTY}) before any
     *     drill on this engine
     */
    public String drillReportJson() {
        return Utf8.decode(withHandle(RiskNative::drillReportJson));
    }

    /**
     * The engine's entity state: labels, lists, snapshots and counters ({@link EntityState}).
     * A view of this engine, valid while it is open; on an engine without a {@code [state]}
     * section its calls throw {@code RISK_ERR_STATE}.
     */
    public EntityState state() {
        return new EntityState(this);
    }

    static byte[] required(String s, String what) {
        if (s == null) {
            throw new IllegalArgumentException(what + " is null");
        }
        return Utf8.z(s, what);
    }

    /**
     * Reloads the rule file; on failure ({@code RISK_ERR_RELOAD}) the serving rules are
     * unchanged.
     */
    public void reloadRules() {
        withHandle(h -> {
            RiskNative.reloadRules(h);
            return null;
        });
    }

    /**
     * Shuts the engine down: later decides throw {@code RISK_ERR_SHUT_DOWN}. A positive
     * {@code drain} waits up to that long (clamped to 2^31-1 ms) for queued deep-tier work;
     * zero abandons it. The engine must still be {@link #close() closed}.
     */
    public ShutdownReport shutdown(Duration drain) {
        if (drain == null) {
            throw new IllegalArgumentException("drain is null");
        }
        if (drain.isNegative()) {
            throw new IllegalArgumentException("drain is negative: " + drain);
        }
        int ms = clampMillis(drain);
        long[] r = withHandle(h -> RiskNative.shutdown(h, ms));
        return new ShutdownReport(r[0], r[1]);
    }

    /** Subscribes to deep-tier verdicts from now on. */
    public Subscription subscribe() {
        long stamp = lock.readLock();
        try {
            Subscription s = new Subscription(RiskNative.subscribe(live()), this);
            subscriptions.add(s);
            return s;
        } finally {
            lock.unlockRead(stamp);
        }
    }

    void forget(Subscription s) {
        subscriptions.remove(s);
    }

    /** Whether {@link #close()} was called. */
    public boolean isClosed() {
        long stamp = lock.readLock();
        try {
            return handle == 0;
        } finally {
            lock.unlockRead(stamp);
        }
    }

    /**
     * Frees the engine (shutting it down and abandoning queued deep work) and closes its
     * subscriptions. Waits for calls in flight; idempotent; safe from any thread.
     */
    @Override
    public void close() {
        long stamp = lock.writeLock();
        try {
            long h = handle;
            if (h == 0) {
                return;
            }
            handle = 0;
            for (Subscription s : List.copyOf(subscriptions)) {
                s.close();
            }
            RiskNative.engineFree(h);
        } finally {
            lock.unlockWrite(stamp);
        }
    }

    private long live() {
        long h = handle;
        if (h == 0) {
            throw new IllegalStateException("RiskEngine is closed");
        }
        return h;
    }

    /** {@code f} of the live handle, under the read lock (for {@link EntityState} too). */
    <T> T withHandle(LongFunction<T> f) {
        long stamp = lock.readLock();
        try {
            return f.apply(live());
        } finally {
            lock.unlockRead(stamp);
        }
    }

    static int clampMillis(Duration d) {
        long ms;
        try {
            ms = d.toMillis();
            if (ms == 0 && !d.isZero()) {
                ms = 1; // round a sub-millisecond wait up rather than to "no wait"
            }
        } catch (ArithmeticException overflow) {
            ms = Integer.MAX_VALUE;
        }
        return (int) Math.min(ms, Integer.MAX_VALUE);
    }

    @Override
    public String toString() {
        return isClosed() ? "RiskEngine[closed]" : "RiskEngine[open]";
    }

    static {
        RiskNative.ensureLoaded();
        Objects.requireNonNull(RiskNative.version(), "risk_version");
    }
}
