package dev.risk;

/**
 * A deep-tier verdict ({@code risk_verdict}). {@code source}: 0 model, 1 cached average,
 * 2 global prior, {@link #CODE_UNKNOWN} unknown; {@code failure}: 0 none, 1 timeout, 2 error,
 * 3 saturated, 4 circuit open (the deep tier's breaker), {@link #CODE_UNKNOWN} unknown.
 */
public record Verdict(long ticket, long txnId, long entity, float score, float fastScore,
                      int source, int failure, long latencyNs) {
    /**
     * {@code RISK_CODE_UNKNOWN}: a source or failure this binding does not know (written by a
     * newer library). {@link Tier#UNKNOWN} and {@link Fallback#UNKNOWN} are the same code.
     */
    public static final int CODE_UNKNOWN = 255;

    static Verdict fromLongs(long[] a) {
        return new Verdict(a[0], a[1], a[2], Float.intBitsToFloat((int) a[3]),
            Float.intBitsToFloat((int) a[4]), (int) a[5], (int) a[6], a[7]);
    }
}
