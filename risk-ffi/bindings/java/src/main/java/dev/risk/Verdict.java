package dev.risk;

/**
 * A deep-tier verdict ({@code risk_verdict}). {@code source}: 0 model, 1 cached average,
 * 2 global prior (255 unknown); {@code failure}: 0 none, 1 timeout, 2 error, 3 saturated
 * (255 unknown).
 */
public record Verdict(long ticket, long txnId, long entity, float score, float fastScore,
                      int source, int failure, long latencyNs) {

    static Verdict fromLongs(long[] a) {
        return new Verdict(a[0], a[1], a[2], Float.intBitsToFloat((int) a[3]),
            Float.intBitsToFloat((int) a[4]), (int) a[5], (int) a[6], a[7]);
    }
}
