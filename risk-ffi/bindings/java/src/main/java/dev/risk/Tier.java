package dev.risk;

/** {@code RISK_TIER_*}: which tier decided. */
public enum Tier {
    /** The rules decided. */
    RULES,
    /** The fast model decided. */
    FAST,
    /** The configured static action (even the rules failed). */
    STATIC,
    /** A code this binding does not know (the library writes 255 for a newer tier). */
    UNKNOWN;

    static Tier of(int code) {
        return switch (code) {
            case 0 -> RULES;
            case 1 -> FAST;
            case 2 -> STATIC;
            default -> UNKNOWN;
        };
    }
}
