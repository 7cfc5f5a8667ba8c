package dev.risk;

import java.nio.file.Path;
import java.util.Map;

/**
 * The entity state of a {@link RiskEngine} ({@link RiskEngine#state()}): delayed labels,
 * block / allow lists, snapshots and counters.
 *
 * <p>An engine whose {@code risk.toml} has a {@code [state]} section computes velocity and
 * label features ({@code [[state.features]]}, e.g. a card's transactions in the hour
 * before) from the raw transactions it decides, before the rules run, on its own copy of
 * each transaction (a value set in such a field is replaced; a {@link Transaction} is
 * immutable anyway). Windows follow {@link Transaction#timestampMs()}: a transaction
 * without one (0) reads and writes no state. Keys are the entity (card), the device,
 * {@link Transaction#merchant()}, {@link Transaction#ip()} and {@link Transaction#email()}.
 *
 * <p>Lists ({@code [state.lists.<name>]}) are read by rules as
 * {@code device in list.blocked_devices}; {@link #listAdd} and {@link #listRemove} change
 * them for the next decision. A list of device or card ids holds decimal ids ({@code "7"};
 * see {@link #listAdd(String, long)}).
 *
 * <p>Every refusal is a {@link RiskException} with {@code code() ==}
 * {@link RiskException#ERR_STATE} ({@code RISK_ERR_STATE}, 16) and the library's reason, on
 * an engine without {@code [state]} too. A view is cheap and holds no native resource;
 * after the engine is closed its calls throw {@link IllegalStateException}. Thread-safe.
 */
public final class EntityState {
    /** {@link #listAdd(String, String, long)}'s expiry for an entry that never expires. */
    public static final long NEVER = 0;

    private final RiskEngine engine;

    EntityState(RiskEngine engine) {
        this.engine = engine;
    }

    /**
     * Reports the label of transaction {@code txnId} (the id it was decided with):
     * {@code fraud} true for a chargeback or a confirmed fraud, false to retract an earlier
     * true; {@code atMs} (ms since the epoch) is when it became known, not before the
     * transaction ({@code risk_engine_report_label}). Label features ({@code agg =
     * "fraud_count"} or {@code "fraud_rate"} with a {@code delay}) count it once the delay
     * has passed.
     *
     * @return how many label windows it reached (0 when the transaction's bucket has
     *     already left every window)
     * @throws RiskException {@code RISK_ERR_STATE} for a transaction the engine does not
     *     remember (never decided, decided with id 0, or evicted), a label dated before its
     *     transaction, no label feature, or no {@code [state]}
     */
    public long reportLabel(long txnId, boolean fraud, long atMs) {
        return engine.withHandle(h -> RiskNative.reportLabel(h, txnId, fraud, atMs));
    }

    /**
     * Adds {@code value} to {@code list} (or re-dates it), live until {@code expiresAtMs}
     * (ms since the epoch; {@link #NEVER}, 0 or negative: never expires; a time in the past:
     * not live) ({@code risk_engine_list_add}). Effective on the next decision; journalled and
     * synced before it returns when {@code [state] dir} is set.
     *
     * @throws RiskException {@code RISK_ERR_STATE} for an unknown list, a value that cannot
     *     be one of its keys (not a decimal id for a device list), or no {@code [state]}
     * @throws IllegalArgumentException for a null list or value, or one holding U+0000
     */
    public void listAdd(String list, String value, long expiresAtMs) {
        byte[] l = RiskEngine.required(list, "list");
        byte[] v = RiskEngine.required(value, "value");
        engine.withHandle(h -> {
            RiskNative.listAdd(h, l, v, expiresAtMs);
            return null;
        });
    }

    /** {@link #listAdd(String, String, long)} of an entry that never expires. */
    public void listAdd(String list, String value) {
        listAdd(list, value, NEVER);
    }

    /**
     * {@link #listAdd(String, String, long)} of an unsigned 64-bit id (a device or card) as
     * its decimal digits, never expiring.
     */
    public void listAdd(String list, long id) {
        listAdd(list, Long.toUnsignedString(id), NEVER);
    }

    /**
     * Removes {@code value} from {@code list} ({@code risk_engine_list_remove}).
     *
     * @return whether it was there
     * @throws RiskException as {@link #listAdd(String, String, long)}
     */
    public boolean listRemove(String list, String value) {
        byte[] l = RiskEngine.required(list, "list");
        byte[] v = RiskEngine.required(value, "value");
        return engine.withHandle(h -> RiskNative.listRemove(h, l, v));
    }

    /**
     * Whether {@code value} is a live (not expired) entry of {@code list} now
     * ({@code risk_engine_list_contains}).
     *
     * @throws RiskException as {@link #listAdd(String, String, long)}
     */
    public boolean listContains(String list, String value) {
        byte[] l = RiskEngine.required(list, "list");
        byte[] v = RiskEngine.required(value, "value");
        return engine.withHandle(h -> RiskNative.listContains(h, l, v));
    }

    /**
     * Re-reads every list's file ({@code file} of {@code [state.lists.<name>]}, lines
     * {@code value[,expires_at_ms]}) and journal ({@code risk_engine_lists_reload}).
     *
     * @throws RiskException {@code RISK_ERR_STATE} for a bad file, the detail naming
     *     {@code file:line}; that list keeps serving what it had, the others are reloaded
     */
    public void reloadLists() {
        engine.withHandle(h -> {
            RiskNative.listsReload(h);
            return null;
        });
    }

    /**
     * Writes the entity state to {@code path} atomically ({@code risk_engine_state_snapshot});
     * a later engine with the same {@code [state]} restores it at start.
     *
     * @param path the file; null: the configured {@code [state] snapshot}
     * @throws RiskException {@code RISK_ERR_STATE} when it cannot be written, or with no path
     *     given and none configured
     */
    public void snapshot(Path path) {
        byte[] p = path == null ? null : Utf8.z(path.toString(), "path");
        engine.withHandle(h -> {
            RiskNative.stateSnapshot(h, p);
            return null;
        });
    }

    /** {@link #snapshot(Path)} to the configured {@code [state] snapshot}. */
    public void snapshot() {
        snapshot(null);
    }

    /**
     * The entity state's counters as JSON text ({@code risk_engine_state_json}):
     * {@code stats} {@code {updates, no_time, late, labels, labels_unknown, list_hits}} (and
     * a store's counters where the library has them: {@code degraded},
     * {@code store_timeouts}, {@code store_errors}, {@code store_skipped},
     * {@code store_shed}),
     * {@code memory} (one {@code {source, keys, bytes_per_key}} per key source),
     * {@code pending_labels} (transactions remembered for labels) and {@code lists}
     * ({@code {name: live entries}}).
     *
     * @throws RiskException {@code RISK_ERR_STATE} on an engine without {@code [state]}
     */
    public String json() {
        return Utf8.decode(engine.withHandle(RiskNative::stateJson));
    }

    /** {@link #json()} as an unmodifiable map (numbers {@code Long}, as in {@link AuditLog#read}). */
    @SuppressWarnings("unchecked")
    public Map<String, Object> report() {
        return (Map<String, Object>) (Map<?, ?>) Json.parse(json());
    }

    @Override
    public String toString() {
        return "EntityState[" + engine + "]";
    }
}
