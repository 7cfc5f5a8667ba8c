package dev.risk;

/**
 * Names used by {@link RiskEngine#health} and {@link RiskEngine#forceOpen}: the overall
 * statuses, a tier's states, and the tiers the kill switch applies to (the rules always run).
 */
public final class Health {
    private Health() {}

    /** {@code status}: every configured tier serves. */
    public static final String READY = "ready";
    /** {@code status}: decisions are made, but something is off (see {@code reasons}). */
    public static final String DEGRADED = "degraded";
    /** {@code status}: shut down; decides throw {@code RISK_ERR_SHUT_DOWN}. */
    public static final String SHUT_DOWN = "shut_down";

    /** {@code fast.state} / {@code deep.state}: the breaker is closed (serving). */
    public static final String CLOSED = "closed";
    /** A tier's state: its breaker is open (the rules decide, or the deep fallback answers). */
    public static final String OPEN = "open";
    /** A tier's state: its breaker is probing. */
    public static final String HALF_OPEN = "half_open";
    /** A tier's state: switched off by {@link RiskEngine#forceOpen}. */
    public static final String FORCED_OPEN = "forced_open";
    /** A tier's state: not configured. */
    public static final String ABSENT = "absent";

    /** Kill-switch tier: the fast model. */
    public static final String FAST = "fast";
    /** Kill-switch tier: the deep model. */
    public static final String DEEP = "deep";
}
