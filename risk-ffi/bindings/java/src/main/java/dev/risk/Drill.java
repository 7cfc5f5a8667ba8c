package dev.risk;

/**
 * Names used by fallback drills ({@link RiskEngine#drill}): the faults, and helpers for the
 * labels argument.
 *
 * <p>A drill injects a fault into a tier inside the engine (the breaker, the deadline and the
 * metrics see it as they would see the real thing), replays transactions through the real
 * decide path, and reports how fast the rules took over, which tier decided, the fallback
 * causes and, with labels, the rules' quality against the model's on the same rows. Live
 * traffic on the engine is affected while it runs.
 */
public final class Drill {
    private Drill() {}

    /** Every fast-tier call fails (fallback {@code error}). */
    public static final String FAST_DOWN = "fast_down";
    /** Every fast-tier score is NaN (fallback {@code invalid_score}). */
    public static final String FAST_NAN = "fast_nan";
    /** Every deep batch fails: gray-zone verdicts come from the fallback. */
    public static final String DEEP_DOWN = "deep_down";

    /** The fault adding {@code ms} milliseconds to every fast-tier call (past the deadline: {@code timeout}). */
    public static String fastSlow(long ms) {
        if (ms < 0) {
            throw new IllegalArgumentException("negative delay: " + ms);
        }
        return "fast_slow:" + ms;
    }

    /** {@code labels} (fraud or not, one per transaction) as the JSON array {@link RiskEngine#drill} takes. */
    public static String labels(boolean... labels) {
        if (labels == null) {
            return null;
        }
        StringBuilder b = new StringBuilder(2 + 6 * labels.length).append('[');
        for (int i = 0; i < labels.length; i++) {
            b.append(i == 0 ? "" : ",").append(labels[i]);
        }
        return b.append(']').toString();
    }
}
