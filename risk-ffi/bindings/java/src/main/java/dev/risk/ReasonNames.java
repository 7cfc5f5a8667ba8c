package dev.risk;

import java.util.concurrent.ConcurrentHashMap;

/**
 * Reason-code names, cached: {@code risk_reason_name} takes a code with no engine, so the
 * code space is process-wide and a code's name never changes.
 */
final class ReasonNames {
    private static final ConcurrentHashMap<Integer, String> CACHE = new ConcurrentHashMap<>();

    private ReasonNames() {}

    static String of(int code) {
        String s = CACHE.get(code);
        if (s == null) {
            // A code the library does not know is RISK_ERR_INVALID: let it propagate, it
            // would mean the decision carried a code the library cannot name (a bug).
            s = Utf8.decode(RiskNative.reasonName(code));
            CACHE.putIfAbsent(code, s);
        }
        return s;
    }
}
