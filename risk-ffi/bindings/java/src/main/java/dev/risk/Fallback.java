package dev.risk;

/**
 * {@code risk_decision::fallback}: why the fast tier did not decide ({@code risk_fallback_name});
 * the ordinal of each known cause is its code ({@code RISK_FALLBACK_NONE} 0 ..
 * {@code RISK_FALLBACK_SATURATED} 7).
 */
public enum Fallback {
    NONE("none"), TIMEOUT("timeout"), ERROR("error"), PANIC("panic"), INVALID_SCORE("invalid_score"),
    CIRCUIT_OPEN("circuit_open"), ABSENT("absent"), SATURATED("saturated"),
    /** {@code RISK_CODE_UNKNOWN} (255): a cause this binding does not know (a newer library). */
    UNKNOWN("unknown");

    private final String cName;

    Fallback(String cName) {
        this.cName = cName;
    }

    /** The library's name ({@code risk_fallback_name}). */
    public String cName() {
        return cName;
    }

    static Fallback of(int code) {
        Fallback[] v = values();
        return code >= 0 && code < v.length - 1 ? v[code] : UNKNOWN;
    }
}
