package dev.risk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The audit trail: an engine with {@code [audit]} logs its decisions; {@code auditFlush}
 * makes them durable; {@link AuditLog#read} finds them again; {@code auditStats} counts them.
 */
class AuditTest {
    /** Rules that fire on {@link #TXNS}: a scored pair, and two hard rules setting the action. */
    static final String RULES = "version \"audit-test-1\"\n"
        + "rule BIG_AMOUNT { when amount > 500 score 0.5 reason \"BIG\" }\n"
        + "rule NIGHT { when hour < 5 score 0.2 reason \"NIGHT\" }\n"
        + "rule BLOCK {\n  when amount > 5000\n  decline\n  hard\n  reason \"BLOCKED\"\n}\n"
        + "rule HOLD {\n  when segment == \"a\"\n  review\n  hard\n  reason \"HELD\"\n}\n";

    /**
     * A rule tier from audit.rules, a constant fast tier (0.2: approve) with the largest
     * deadline the library allows (which tier decides never depends on the machine's load),
     * and the audit log in audit/ under the base directory.
     */
    static final String TOML = Configs.load("audit.toml");

    /** 1: approve (BIG_AMOUNT, NIGHT); 2: approve (nothing fires); 3: decline (BLOCK); 4: review (HOLD). */
    static final List<Transaction> TXNS = List.of(
        Transaction.builder().id(1).entity(7).timestampMs(1_767_571_200_000L).amount(1000, "USD")
            .feature("hour", 3).feature("segment", "b").build(),
        Transaction.builder().id(2).entity(8).amount(10, "EUR").missing("hour").build(),
        Transaction.builder().id(3).entity(7).amount(9000, "USD").feature("hour", 12).build(),
        Transaction.builder().id(4).entity(9).amount(20, "USD").feature("segment", "a").build());

    static final Map<Long, String> ACTIONS = Map.of(1L, "approve", 2L, "approve", 3L, "decline", 4L, "review");

    /** A hang detector for flushes, never reached by a passing run. */
    static final Duration FLUSH = Duration.ofMinutes(1);

    @TempDir
    Path dir;

    RiskEngine auditEngine() throws IOException {
        Files.writeString(dir.resolve("audit.rules"), RULES, StandardCharsets.UTF_8);
        return RiskEngine.fromToml(TOML, dir);
    }

    /** Decides {@link #TXNS}, flushes, closes the engine; the decisions by txn id. */
    Map<Long, Decision> logged() throws IOException {
        Map<Long, Decision> out = new LinkedHashMap<>();
        try (RiskEngine e = auditEngine()) {
            for (Transaction t : TXNS) {
                out.put(t.id(), e.decide(t));
            }
            assertEquals(1 + TXNS.size(), e.auditFlush(FLUSH)); // the schema record, then the decisions
        }
        return out;
    }

    Path log() {
        return dir.resolve("audit");
    }

    static List<Long> txnIds(List<Map<String, Object>> recs) {
        List<Long> ids = new ArrayList<>();
        for (Map<String, Object> r : recs) {
            ids.add((Long) r.get("txn_id"));
        }
        return ids;
    }

    static float f32(Object v) {
        return ((Number) v).floatValue();
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> obj(Object v) {
        return (Map<String, Object>) v;
    }

    static RiskException riskError(int code, org.junit.jupiter.api.function.Executable e) {
        return TestSupport.riskError(code, e);
    }

    @Test
    void aDecisionIsFoundAgainByTxn() throws IOException {
        Map<Long, Decision> ds = logged();
        List<Map<String, Object>> recs = AuditLog.read(log(), AuditQuery.all().txn(1));
        assertEquals(1, recs.size(), recs::toString);
        Map<String, Object> r = recs.get(0);
        Decision d = ds.get(1L);
        assertEquals(AuditQuery.KIND_DECISION, r.get("kind"));
        assertEquals(2L, r.get("seq"));
        assertEquals(1L, r.get("txn_id"));
        assertEquals(7L, r.get("entity"));
        assertEquals(1_767_571_200_000L, r.get("event_time_ms"));
        assertTrue((Long) r.get("decided_at_ms") > 0);
        assertEquals("approve", r.get("action"));
        assertEquals(Action.APPROVE, d.action());
        assertEquals("fast", r.get("tier"));
        assertNull(r.get("fallback"));
        assertEquals(Boolean.FALSE, r.get("hard_rule"));
        assertEquals(d.score(), f32(r.get("score")));
        assertEquals(d.ruleScore(), f32(r.get("rule_score")));
        assertEquals(d.modelScore(), f32(r.get("model_score")));
        assertEquals(List.of("BIG_AMOUNT", "NIGHT"), r.get("rules_fired"));
        assertEquals(2L, r.get("rules_fired_total"));
        TreeSet<Object> codes = new TreeSet<>();
        for (Object x : (List<?>) r.get("reasons")) {
            codes.add(obj(x).get("code"));
        }
        assertTrue(codes.containsAll(List.of("BIG", "NIGHT")), codes::toString);
        Map<String, Object> th = obj(r.get("thresholds"));
        assertEquals(0.3f, f32(th.get("approve_below")));
        assertEquals(0.7f, f32(th.get("decline_at")));
        assertEquals(d.thresholdShift(), f32(th.get("shift")));
        Map<String, Object> v = obj(r.get("versions"));
        Map<String, Object> rules = obj(v.get("rules"));
        assertEquals("audit-test-1", rules.get("version"));
        assertTrue(((String) rules.get("name")).endsWith("audit.rules"), rules::toString);
        assertEquals(16, ((String) rules.get("hash")).length());
        assertEquals("constant", obj(v.get("fast")).get("name"));
        assertTrue(v.containsKey("deep") && v.get("deep") == null, v::toString);
        assertEquals(16, ((String) v.get("config")).length());
        assertEquals(16, ((String) v.get("schema")).length());
        Map<String, Object> t = obj(r.get("timings_ns"));
        assertTrue((Long) t.get("total") >= (Long) t.get("rules"), t::toString);
        assertTrue(t.containsKey("fast") && t.containsKey("combine"), t::toString);
        assertEquals("none", r.get("escalation"));
        assertFalse(r.containsKey("ticket"), "no ticket when not enqueued");
        assertEquals(1000.0, r.get("amount"));
        assertEquals("USD", r.get("currency"));
        assertEquals(Map.of("amount", 1000.0, "hour", 3.0, "segment", "b"), r.get("features"));
        // Missing features are null.
        Map<String, Object> two = AuditLog.read(log(), AuditQuery.all().txn(2)).get(0);
        Map<String, Object> f = obj(two.get("features"));
        assertEquals(10.0, f.get("amount"));
        assertTrue(f.containsKey("hour") && f.get("hour") == null, f::toString);
        assertTrue(f.containsKey("segment") && f.get("segment") == null, f::toString);
        assertEquals(List.of(), two.get("rules_fired"));
    }

    @Test
    void queries() throws IOException {
        Map<Long, Decision> ds = logged();
        List<Map<String, Object>> all = AuditLog.read(log(), AuditQuery.all());
        assertEquals(List.of(1L, 2L, 3L, 4L), txnIds(all));
        for (Map<String, Object> r : all) {
            long id = (Long) r.get("txn_id");
            assertEquals(ACTIONS.get(id), r.get("action"), () -> "txn " + id);
            assertEquals(ds.get(id).action().name().toLowerCase(java.util.Locale.ROOT), r.get("action"));
        }
        assertEquals(List.of(3L), txnIds(AuditLog.read(log(), AuditQuery.all().rule("BLOCK"))));
        Map<String, Object> blocked = AuditLog.read(log(), AuditQuery.all().rule("BLOCK")).get(0);
        assertEquals("decline", blocked.get("action"));
        assertEquals(Boolean.TRUE, blocked.get("hard_rule"));
        assertEquals(List.of(1L, 3L), txnIds(AuditLog.read(log(), AuditQuery.all().rule("BIG_AMOUNT"))));
        assertEquals(List.of(4L), txnIds(AuditLog.read(log(), AuditQuery.all().rule("HOLD"))));
        assertEquals(List.of(), AuditLog.read(log(), AuditQuery.all().rule("NO_SUCH_RULE")));
        assertEquals(List.of(1L, 3L), txnIds(AuditLog.read(log(), AuditQuery.all().entity(7))));
        assertEquals(List.of(1L, 2L), txnIds(AuditLog.read(log(), AuditQuery.all().limit(2))));
        assertEquals(List.of(), AuditLog.read(log(), AuditQuery.all().txn(99)));
        assertEquals(List.of(), AuditLog.read(log(), AuditQuery.all().kinds(AuditQuery.KIND_VERDICT)));
        long at = (Long) all.get(0).get("decided_at_ms");
        assertEquals(List.of(1L), txnIds(AuditLog.read(log(), AuditQuery.all().txn(1).fromMs(at).toMs(at + 1))));
        assertEquals(List.of(), AuditLog.read(log(), AuditQuery.all().txn(1).toMs(at)));
        List<Map<String, Object>> withSchema =
            AuditLog.read(log(), AuditQuery.all().kinds(AuditQuery.KIND_SCHEMA, AuditQuery.KIND_DECISION));
        assertEquals(5, withSchema.size());
        assertEquals(AuditQuery.KIND_SCHEMA, withSchema.get(0).get("kind"));
        assertEquals(List.of("amount", "hour", "segment"), withSchema.get(0).get("fields"));
        assertEquals(obj(all.get(0).get("versions")).get("schema"), withSchema.get(0).get("fingerprint"));
        // The JSON text is the same records.
        String text = AuditLog.readJson(log(), AuditQuery.all().txn(3));
        assertTrue(text.startsWith("[{") && text.contains("\"txn_id\":3"), text);
    }

    @Test
    void queryJson() {
        assertEquals("{}", AuditQuery.all().toJson());
        assertEquals("{\"txn\":18446744073709551615,\"entity\":7,\"from_ms\":-5,\"to_ms\":9,"
                + "\"rule\":\"a\\\"b\\\\c\\u0000\",\"kinds\":[\"decision\",\"schema\"],\"limit\":3}",
            AuditQuery.all().txn(-1).entity(7).fromMs(-5).toMs(9).rule("a\"b\\c\0")
                .kinds("decision", "schema").limit(3).toJson());
        assertEquals(AuditQuery.all().txn(1), AuditQuery.all().txn(1));
        assertThrows(IllegalArgumentException.class, () -> AuditQuery.all().rule(null));
        assertThrows(IllegalArgumentException.class, () -> AuditQuery.all().kinds((String[]) null));
        assertThrows(IllegalArgumentException.class, () -> AuditQuery.all().kinds("decision", null));
    }

    @Test
    void flushAndStats() throws IOException {
        try (RiskEngine e = auditEngine()) {
            e.decide(TXNS.get(0));
            e.decide(TXNS.get(1));
            long seq = e.auditFlush(FLUSH);
            assertEquals(3, seq);
            Map<String, Object> s = e.auditStats();
            assertEquals(new TreeSet<>(List.of("accepted", "shed_full", "shed_closed", "written_seq", "durable_seq",
                "batches", "io_errors", "last_error", "segments_deleted", "recovery")), new TreeSet<>(s.keySet()));
            assertEquals(new TreeSet<>(List.of("segment", "truncated_bytes", "corrupt", "last_seq")),
                new TreeSet<>(obj(s.get("recovery")).keySet()));
            assertEquals(2L, s.get("accepted"));
            assertEquals(seq, s.get("durable_seq"));
            assertEquals(seq, s.get("written_seq"));
            assertEquals(0L, s.get("shed_full"));
            assertEquals(0L, s.get("io_errors"));
            assertNull(s.get("last_error"));
            assertTrue(e.auditStatsJson().contains("\"accepted\":2"), e.auditStatsJson());
            // A live engine's log reads while it writes: what was flushed is there.
            assertEquals(List.of(1L, 2L), txnIds(AuditLog.read(log(), AuditQuery.all())));
            e.decide(TXNS.get(2));
            assertEquals(4, e.auditFlush(FLUSH));
            assertEquals(List.of(1L, 2L, 3L), txnIds(AuditLog.read(log(), AuditQuery.all())));
            assertThrows(IllegalArgumentException.class, () -> e.auditFlush(null));
            assertThrows(IllegalArgumentException.class, () -> e.auditFlush(Duration.ofMillis(-1)));
        }
    }

    /** More JSON than the glue's first buffer holds (64 KiB): read again at the size asked for. */
    @Test
    void anAnswerLargerThanTheFirstBuffer() throws IOException {
        int n = 300;
        List<Long> want = new ArrayList<>();
        try (RiskEngine e = auditEngine()) {
            for (int i = 0; i < n; i++) {
                want.add(1000L + i);
                e.decide(Transaction.builder().id(1000 + i).amount(i, "USD").feature("hour", i % 24).build());
            }
            e.auditFlush(FLUSH);
        }
        String text = AuditLog.readJson(log(), AuditQuery.all());
        assertTrue(text.getBytes(StandardCharsets.UTF_8).length > 1 << 16, () -> "only " + text.length());
        assertEquals(want, txnIds(AuditLog.read(log(), AuditQuery.all())));
    }

    @Test
    void errors() throws IOException {
        // No [audit]: RISK_ERR_INVALID.
        try (RiskEngine plain = RiskEngine.fromToml(TestSupport.CONSTANT_TOML, null)) {
            RiskException e = riskError(RiskException.ERR_INVALID, () -> plain.auditFlush(FLUSH));
            assertTrue(e.detail().contains("[audit]"), e::getMessage);
            riskError(RiskException.ERR_INVALID, plain::auditStatsJson);
        }
        // After shutdown the log is closed: RISK_ERR_AUDIT.
        RiskEngine e = auditEngine();
        e.decide(TXNS.get(0));
        e.shutdown(FLUSH); // durable first, then closed
        RiskException closed = riskError(RiskException.ERR_AUDIT, () -> e.auditFlush(FLUSH));
        assertEquals("RISK_ERR_AUDIT", closed.codeName());
        assertTrue(closed.detail().contains("closed"), closed::getMessage);
        assertEquals(2L, e.auditStats().get("durable_seq"));
        e.close();
        assertThrows(IllegalStateException.class, () -> e.auditFlush(Duration.ZERO));
        assertThrows(IllegalStateException.class, e::auditStatsJson);
        assertEquals(List.of(1L), txnIds(AuditLog.read(log(), AuditQuery.all())));
        // Bad queries and directories.
        RiskException kind = riskError(RiskException.ERR_INVALID,
            () -> AuditLog.read(log(), AuditQuery.all().kinds("decision", "decisions")));
        assertTrue(kind.detail().contains("decisions"), kind::getMessage);
        RiskException missing = riskError(RiskException.ERR_INVALID, () -> AuditLog.read(dir.resolve("no-such-log"), AuditQuery.all()));
        assertTrue(missing.detail().contains("no-such-log"), missing::getMessage);
        assertThrows(IllegalArgumentException.class, () -> AuditLog.read(null, AuditQuery.all()));
        assertThrows(IllegalArgumentException.class, () -> AuditLog.read(log(), null));
        assertThrows(IllegalArgumentException.class, () -> AuditLog.read(log(), AuditQuery.all().rule("\uD800")));
        // The glue passes nulls on to the library where the ABI takes them.
        byte[] logZ = Utf8.z(log().toString(), "dir");
        riskError(RiskException.ERR_NULL, () -> RiskNative.auditQueryJson(null, null));
        assertTrue(Utf8.decode(RiskNative.auditQueryJson(logZ, null)).contains("\"txn_id\":1"));
        riskError(RiskException.ERR_JSON, () -> RiskNative.auditQueryJson(logZ, Utf8.z("{\"bogus\": 1}", "q")));
        riskError(RiskException.ERR_NULL, () -> RiskNative.auditStatsJson(0));
        riskError(RiskException.ERR_NULL, () -> RiskNative.auditFlush(0, 0));
        assertThrows(IllegalArgumentException.class, () -> RiskNative.auditFlush(0, -1));
        assertThrows(IllegalArgumentException.class, () -> RiskNative.auditQueryJson(new byte[] {'a'}, null));
        // A directory without segments is an empty log.
        assertEquals(List.of(), AuditLog.read(dir, AuditQuery.all()));
    }

    @Test
    void aDamagedSegmentIsARecordOfKindDamaged() throws IOException {
        logged();
        List<Path> segs;
        try (Stream<Path> s = Files.list(log())) {
            segs = s.filter(p -> p.getFileName().toString().matches("seg-.*\\.log")).toList();
        }
        assertEquals(1, segs.size(), segs::toString);
        byte[] data = Files.readAllBytes(segs.get(0));
        ByteBuffer b = ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN);
        // Flip a byte inside the payload of the third frame (the second decision), not in a
        // frame header (a damaged length at the tail could read as a write in progress).
        int at = 16;
        for (int k = 0; k < 2; k++) {
            at += 8 + b.getInt(at);
        }
        data[at + 8 + b.getInt(at) / 2] ^= 0x5A;
        Files.write(segs.get(0), data);
        List<Map<String, Object>> recs = AuditLog.read(log(), AuditQuery.all());
        assertEquals(1, recs.stream().filter(r -> AuditQuery.KIND_DAMAGED.equals(r.get("kind"))).count(), recs::toString);
        assertEquals(1L, recs.get(0).get("txn_id"));
        assertEquals(AuditQuery.KIND_DAMAGED, recs.get(1).get("kind"));
        String err = (String) recs.get(1).get("error");
        assertTrue(err.contains("corrupt") && err.contains(segs.get(0).getFileName().toString()), err);
    }

    @Test
    void jsonReader() {
        assertEquals(List.of(1L, -2L, 2.5, 1e3, true, false, "x"), Json.parse(" [1, -2, 2.5, 1e3, true, false, \"x\"] "));
        assertEquals(new BigInteger("18446744073709551615"), Json.parse("18446744073709551615"));
        assertEquals(-1L, ((Number) Json.parse("18446744073709551615")).longValue());
        assertEquals(Long.MIN_VALUE, Json.parse("-9223372036854775808"));
        assertEquals("a\"\\/\b\f\n\r\t\u00e9\uD83D\uDE00", Json.parse("\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\""));
        assertEquals("\u00e9", Json.parse("\"\u00e9\""));
        Map<?, ?> m = (Map<?, ?>) Json.parse("{\"b\": {\"c\": null}, \"a\": []}");
        assertEquals(List.of("b", "a"), new ArrayList<>(m.keySet()));
        assertTrue(((Map<?, ?>) m.get("b")).containsKey("c"));
        for (String bad : new String[] {"", "{", "[1,]", "{\"a\":1,}", "01", "1.", "-", "\"x", "tru", "[1] 2",
                "{\"a\":1,\"a\":2}", "\"\\x\"", "{a:1}", "\"\u0001\""}) {
            assertThrows(IllegalArgumentException.class, () -> Json.parse(bad), bad);
        }
        assertThrows(UnsupportedOperationException.class, () -> ((List<?>) Json.parse("[]")).clear());
        assertEquals("\"a\\\"b\\\\c\\n\\u0001\u00e9\"", Json.quote("a\"b\\c\n\u0001\u00e9"));
    }
}
