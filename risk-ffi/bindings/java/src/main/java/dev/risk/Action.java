package dev.risk;

/** {@code RISK_ACTION_*}. */
public enum Action {
    APPROVE, REVIEW, DECLINE,
    /** A code this binding does not know (a newer library). */
    UNKNOWN;

    static Action of(int code) {
        return switch (code) {
            case 0 -> APPROVE;
            case 1 -> REVIEW;
            case 2 -> DECLINE;
            default -> UNKNOWN;
        };
    }
}
