package dev.risk;

/** {@code RISK_ESCALATION_*}: what happened with the deep tier. */
public enum Escalation {
    NONE,
    /** Queued to the deep tier; {@link Decision#ticket()} is set. */
    ENQUEUED,
    /** Shed (queue full, no deep tier, shutting down). */
    SHED,
    UNKNOWN;

    static Escalation of(int code) {
        return switch (code) {
            case 0 -> NONE;
            case 1 -> ENQUEUED;
            case 2 -> SHED;
            default -> UNKNOWN;
        };
    }
}
