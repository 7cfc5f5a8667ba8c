package dev.risk;

import java.util.List;

/**
 * A decision ({@code risk_decision}), immutable. Ids and tickets are unsigned 64-bit values
 * in a {@code long} (print with {@link Long#toUnsignedString(long)}). {@code ruleScore} is
 * NaN when the rule tier failed, {@code modelScore} NaN when the fast tier gave no valid
 * answer. Timings are nanoseconds. {@code state} is what entity state did for the decision
 * ({@link StateStatus#OFF} without {@code [state]} or a timestamp, {@link StateStatus#FRESH}
 * when its features were computed, else the state store's failure).
 */
public record Decision(
        long txnId,
        long entity,
        Action action,
        Tier tier,
        Fallback fallback,
        Escalation escalation,
        boolean hardRule,
        StateStatus state,
        long ticket,
        float score,
        float ruleScore,
        float modelScore,
        float thresholdShift,
        long rulesNs,
        long fastNs,
        long totalNs,
        List<Reason> reasons) {

    public Decision {
        reasons = List.copyOf(reasons);
    }

    /** Whether the fast tier answered validly. */
    public boolean hasModelScore() {
        return !Float.isNaN(modelScore);
    }

    // Layout written by risk_jni.c (put_decision): keep the two in step. Slot 6 holds
    // hard_rule in bit 0 and state in bits 8-15.
    static Decision fromLongs(long[] a, int o) {
        return new Decision(
            a[o], a[o + 1],
            Action.of((int) a[o + 2]), Tier.of((int) a[o + 3]), Fallback.of((int) a[o + 4]),
            Escalation.of((int) a[o + 5]), (a[o + 6] & 1) != 0, StateStatus.of((int) ((a[o + 6] >>> 8) & 0xff)), a[o + 7],
            Float.intBitsToFloat((int) a[o + 8]), Float.intBitsToFloat((int) a[o + 9]),
            Float.intBitsToFloat((int) a[o + 10]), Float.intBitsToFloat((int) a[o + 11]),
            a[o + 12], a[o + 13], a[o + 14], Reason.fromLongs(a, o + 15));
    }
}
