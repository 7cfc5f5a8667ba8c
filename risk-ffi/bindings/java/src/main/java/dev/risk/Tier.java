package dev.risk;

/** {@code RISK_TIER_*}: which tier decided. */
public enum Tier {
    /** The rules decided. */
    RULES,
    /** The fast model decided. */
    FAST,
    /** The configured static action (even the rules failed). */
    STATIC,
    /** {@code RISK_CODE_UNKNOWN} (255): a tier this binding does not know (a newer library). */
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
