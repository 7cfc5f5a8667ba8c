package dev.risk;

/**
 * {@code risk_decision::state}: what entity state did for a decision
 * ({@link Decision#state()}); the ordinal of each known value is its code (0 .. 4).
 */
public enum StateStatus {
    /** No {@code [state]} section, or the transaction has no timestamp. */
    OFF("off"),
    /** The state features were computed. */
    FRESH("fresh"),
    /** The state store timed out: the state features are missing. */
    TIMEOUT("timeout"),
    /** The state store failed: the state features are missing. */
    ERROR("error"),
    /** The state store was unavailable: the state features are missing. */
    UNAVAILABLE("unavailable"),
    /** A code this binding does not know (a newer library). */
    UNKNOWN("unknown");

    private final String cName;

    StateStatus(String cName) {
        this.cName = cName;
    }

    /** The name: "off", "fresh", "timeout", "error", "unavailable" or "unknown". */
    public String cName() {
        return cName;
    }

    static StateStatus of(int code) {
        StateStatus[] v = values();
        return code >= 0 && code < v.length - 1 ? v[code] : UNKNOWN;
    }
}
