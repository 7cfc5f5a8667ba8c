package dev.risk;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/**
 * Reads an audit log back ({@code risk_audit_query_json}). An engine whose TOML has an
 * {@code [audit]} table ({@code dir = "audit"}, relative to the TOML's directory or the
 * {@code baseDir} of {@link RiskEngine#fromToml}) writes one record per decision and per
 * deep-tier verdict there. Reading needs no engine: any log directory, copied off a host or
 * still being written, reads the same; a live engine's records are there once
 * {@link RiskEngine#auditFlush} returned.
 *
 * <p>A decision record has the keys {@code seq}, {@code kind} ("decision"), {@code txn_id},
 * {@code entity}, {@code event_time_ms}, {@code decided_at_ms}, {@code action},
 * {@code score}, {@code tier}, {@code fallback}, {@code hard_rule}, {@code rule_score},
 * {@code model_score}, {@code rules_fired} (a list of rule names),
 * {@code rules_fired_total}, {@code reasons} (a list of {@code {code, weight}}),
 * {@code thresholds} {@code {approve_below, decline_at, shift}}, {@code versions}
 * {@code {rules {name, version, hash}, fast, deep, config, schema}}, {@code timings_ns}
 * {@code {rules, fast, combine, total}}, {@code escalation}, {@code ticket} (when
 * enqueued), {@code amount}, {@code currency} and {@code features} ({@code {name: value}};
 * categorical values as text, null when missing). A verdict has {@code ticket},
 * {@code txn_id}, {@code entity}, {@code score}, {@code source}, {@code failure},
 * {@code fast_score}, {@code latency_us}, {@code decided_at_ms}, {@code deep}. A damaged
 * record is {@code {"kind": "damaged", "error": "..."}}: reported, never skipped silently
 * (reading goes on with the next segment).
 *
 * <p>Errors are {@link RiskException}s: {@code RISK_ERR_INVALID} for a directory that
 * cannot be read or a kind the library does not know.
 */
public final class AuditLog {
    private AuditLog() {}

    /**
     * The records of the log in {@code dir} matching {@code query}, in log order, as
     * unmodifiable maps in the library's key order. Integers are {@code Long} (or
     * {@code BigInteger} beyond the {@code long} range: an unsigned id of 2^63 or more),
     * other numbers {@code Double}, lists {@code List}, nested objects {@code Map}.
     */
    @SuppressWarnings("unchecked")
    public static List<Map<String, Object>> read(Path dir, AuditQuery query) {
        return (List<Map<String, Object>>) (List<?>) Json.parse(readJson(dir, query));
    }

    /** The same records as the library's JSON array text. */
    public static String readJson(Path dir, AuditQuery query) {
        if (dir == null) {
            throw new IllegalArgumentException("dir is null");
        }
        if (query == null) {
            throw new IllegalArgumentException("query is null");
        }
        return Utf8.decode(RiskNative.auditQueryJson(Utf8.z(dir.toString(), "dir"), Utf8.z(query.toJson(), "query")));
    }

    static {
        RiskNative.ensureLoaded();
    }
}
