package dev.risk;

import java.util.List;
import java.util.Objects;
import java.util.OptionalLong;

/**
 * Which audit records {@link AuditLog#read} returns. Immutable: each method returns a new
 * query with one more condition. {@link #all()} is every decision and verdict.
 *
 * <pre>{@code
 * AuditQuery.all().txn(42)
 * AuditQuery.all().rule("BLOCK").fromMs(t0).toMs(t1).limit(100)
 * AuditQuery.all().kinds(AuditQuery.KIND_SCHEMA, AuditQuery.KIND_DECISION)
 * }</pre>
 *
 * <p>Ids are unsigned 64-bit values held in {@code long}s, as everywhere in this binding.
 */
public final class AuditQuery {
    /** A decision record. */
    public static final String KIND_DECISION = "decision";
    /** A deep-tier verdict record. */
    public static final String KIND_VERDICT = "verdict";
    /** A schema (feature layout) record. */
    public static final String KIND_SCHEMA = "schema";
    /** The {@code kind} of a damaged record (returned whatever the query asked for). */
    public static final String KIND_DAMAGED = "damaged";

    private static final AuditQuery ALL = new AuditQuery(null, null, null, null, null, null, null);

    private final Long txn;
    private final Long entity;
    private final Long fromMs;
    private final Long toMs;
    private final String rule;
    private final List<String> kinds;
    private final Long limit;

    private AuditQuery(Long txn, Long entity, Long fromMs, Long toMs, String rule, List<String> kinds, Long limit) {
        this.txn = txn;
        this.entity = entity;
        this.fromMs = fromMs;
        this.toMs = toMs;
        this.rule = rule;
        this.kinds = kinds;
        this.limit = limit;
    }

    /** No condition: every decision and verdict. */
    public static AuditQuery all() {
        return ALL;
    }

    /** Only this transaction id (unsigned). */
    public AuditQuery txn(long id) {
        return new AuditQuery(id, entity, fromMs, toMs, rule, kinds, limit);
    }

    /** Only this entity (unsigned). */
    public AuditQuery entity(long key) {
        return new AuditQuery(txn, key, fromMs, toMs, rule, kinds, limit);
    }

    /** Decided at or after this time, ms since the Unix epoch. */
    public AuditQuery fromMs(long ms) {
        return new AuditQuery(txn, entity, ms, toMs, rule, kinds, limit);
    }

    /** Decided before this time, ms since the Unix epoch. */
    public AuditQuery toMs(long ms) {
        return new AuditQuery(txn, entity, fromMs, ms, rule, kinds, limit);
    }

    /** Only decisions on which this rule fired. */
    public AuditQuery rule(String name) {
        if (name == null) {
            throw new IllegalArgumentException("rule is null");
        }
        return new AuditQuery(txn, entity, fromMs, toMs, name, kinds, limit);
    }

    /**
     * Only these kinds: any of {@link #KIND_DECISION}, {@link #KIND_VERDICT},
     * {@link #KIND_SCHEMA} (default: decisions and verdicts). A kind the library does not
     * know is {@code RISK_ERR_INVALID} when the query runs.
     */
    public AuditQuery kinds(String... kinds) {
        if (kinds == null) {
            throw new IllegalArgumentException("kinds is null");
        }
        for (String k : kinds) {
            if (k == null) {
                throw new IllegalArgumentException("a kind is null");
            }
        }
        return new AuditQuery(txn, entity, fromMs, toMs, rule, List.of(kinds), limit);
    }

    /** At most this many records (unsigned). */
    public AuditQuery limit(long n) {
        return new AuditQuery(txn, entity, fromMs, toMs, rule, kinds, n);
    }

    /** The transaction condition, if any. */
    public OptionalLong txn() {
        return txn == null ? OptionalLong.empty() : OptionalLong.of(txn);
    }

    /** The query as the JSON {@code risk_audit_query_json} reads. */
    public String toJson() {
        StringBuilder b = new StringBuilder("{");
        if (txn != null) {
            field(b, "txn").append(Long.toUnsignedString(txn));
        }
        if (entity != null) {
            field(b, "entity").append(Long.toUnsignedString(entity));
        }
        if (fromMs != null) {
            field(b, "from_ms").append(fromMs.longValue());
        }
        if (toMs != null) {
            field(b, "to_ms").append(toMs.longValue());
        }
        if (rule != null) {
            field(b, "rule").append(Json.quote(rule));
        }
        if (kinds != null) {
            field(b, "kinds").append('[');
            for (int i = 0; i < kinds.size(); i++) {
                b.append(i == 0 ? "" : ",").append(Json.quote(kinds.get(i)));
            }
            b.append(']');
        }
        if (limit != null) {
            field(b, "limit").append(Long.toUnsignedString(limit));
        }
        return b.append('}').toString();
    }

    private static StringBuilder field(StringBuilder b, String key) {
        return b.append(b.length() > 1 ? "," : "").append('"').append(key).append("\":");
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof AuditQuery q && toJson().equals(q.toJson());
    }

    @Override
    public int hashCode() {
        return Objects.hash(toJson());
    }

    @Override
    public String toString() {
        return "AuditQuery" + toJson();
    }
}
