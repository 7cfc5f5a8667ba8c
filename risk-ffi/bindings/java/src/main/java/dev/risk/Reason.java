package dev.risk;

import java.util.List;

/** A reason code, its name ({@code risk_reason_name}) and its weight. */
public record Reason(int code, String name, float weight) {
    /**
     * Reasons written by the JNI glue as longs: the count at {@code a[at]} (at most 8 read),
     * then (code, weight's float bits) per reason.
     */
    static List<Reason> fromLongs(long[] a, int at) {
        int n = (int) Math.min(Math.max(a[at], 0), 8);
        Reason[] rs = new Reason[n];
        for (int i = 0; i < n; i++) {
            int code = (int) a[at + 1 + 2 * i];
            rs[i] = new Reason(code, ReasonNames.of(code), Float.intBitsToFloat((int) a[at + 2 + 2 * i]));
        }
        return List.of(rs);
    }
}
