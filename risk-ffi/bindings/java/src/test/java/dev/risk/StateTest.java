package dev.risk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Entity state through the binding ({@link EntityState}): velocity features, lists, labels,
 * snapshots, the state report, and the merchant / ip / email keys of a transaction
 * (decide, decideJson, decideBatch).
 */
class StateTest {
    /** 2026-01-05 00:00 UTC; the transactions of a test are a minute apart from it. */
    static final long T0 = 1_767_571_200_000L;
    static final long MINUTE = 60_000L;

    static final String RULES = "version \"state-test-1\"\n"
        + "policy first_hit\n"
        + "rule BLOCKED  { when device in list.blocked_devices  decline  hard }\n"
        + "rule MERCHANT { when merchant in list.blocked_merchants  decline  hard }\n"
        + "rule IP       { when ip in list.blocked_ips  decline  hard }\n"
        + "rule EMAIL    { when email in list.blocked_emails  decline  hard }\n"
        + "rule VELOCITY { when card_count_1h >= 2  review }\n";

    /**
     * The rule tier alone (no fast tier: the rules decide every transaction); the engine adds
     * the state fields (card_count_1h, merchant_fraud_7d, list.*) to the schema.
     */
    static final String TOML = Configs.load("state.toml");

    static final String NO_STATE_TOML = Configs.load("rules_only.toml");

    /** In blocked_devices.txt from the start. */
    static final String FILE_DEVICE = "99";

    @TempDir
    Path dir;
    RiskEngine e;
    EntityState st;

    @BeforeEach
    void open() throws IOException {
        Files.writeString(dir.resolve("state.rules"), RULES);
        Files.writeString(dir.resolve("blocked_devices.txt"), FILE_DEVICE + "\n");
        e = RiskEngine.fromToml(TOML, dir);
        st = e.state();
    }

    @AfterEach
    void close() {
        e.close();
    }

    /** Transaction {@code i} of card 42, {@code i} minutes after T0, from device 7 (in no list). */
    static Transaction.Builder txn(long i) {
        return Transaction.builder().id(i).entity(42).timestampMs(T0 + i * MINUTE).amount(25.0, "USD").device(7);
    }

    static RiskException expectState(org.junit.jupiter.api.function.Executable x) {
        RiskException ex = assertThrows(RiskException.class, x);
        assertEquals(RiskException.ERR_STATE, ex.code(), ex.getMessage());
        assertEquals(16, ex.code());
        assertEquals("RISK_ERR_STATE", ex.codeName());
        return ex;
    }

    static void assertDecision(Decision d, Action action, String... reasons) {
        List<String> got = d.reasons().stream().map(Reason::name).toList();
        assertEquals(action, d.action(), () -> "reasons " + got);
        assertEquals(List.of(reasons), got);
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> obj(Object v) {
        return (Map<String, Object>) v;
    }

    @SuppressWarnings("unchecked")
    static List<Object> list(Object v) {
        return (List<Object>) v;
    }

    static long num(Object v) {
        return ((Number) v).longValue();
    }

    // ----- velocity -----

    @Test
    void theThirdTransactionOfACardWithinTheHourIsReviewed() {
        // A value set in a state field is replaced by the engine's count.
        Transaction[] sent = new Transaction[3];
        for (int i = 0; i < 3; i++) {
            sent[i] = txn(i + 1).feature("card_count_1h", 0.0).build();
        }
        String[] before = new String[3];
        for (int i = 0; i < 3; i++) {
            before[i] = sent[i].toString();
        }
        assertDecision(e.decide(sent[0]), Action.APPROVE);
        assertDecision(e.decide(sent[1]), Action.APPROVE);
        Decision third = e.decide(sent[2]);
        assertDecision(third, Action.REVIEW, "VELOCITY");
        assertFalse(third.hardRule());
        // The caller's transactions are as sent.
        for (int i = 0; i < 3; i++) {
            assertEquals(before[i], sent[i].toString());
            assertEquals(0.0, sent[i].features().get(0).value());
        }
        // Another card starts from nothing.
        assertDecision(e.decide(txn(4).entity(43).build()), Action.APPROVE);
    }

    @Test
    void decisionsReportTheirEntityState() {
        // risk_decision.state (byte 21): fresh with [state] and a timestamp, off without one.
        Decision d = e.decide(txn(1).build());
        assertEquals(StateStatus.FRESH, d.state());
        assertEquals("fresh", d.state().cName());
        assertEquals(StateStatus.FRESH, e.decideJson(json(2, Map.of())).state());
        List<BatchItem> items = e.decideBatch(List.of(txn(3).build(), txn(4).timestampMs(0).build()));
        assertEquals(StateStatus.FRESH, items.get(0).decision().state());
        assertEquals(StateStatus.OFF, items.get(1).decision().state());
        try (RiskEngine plain = RiskEngine.fromToml(NO_STATE_TOML, null)) {
            Decision off = plain.decide(txn(5).build());
            assertEquals(StateStatus.OFF, off.state());
            assertEquals("off", off.state().cName());
        }
        assertEquals(StateStatus.UNKNOWN, StateStatus.of(9));
    }

    @Test
    void jsonAndBatchShareTheState() {
        assertDecision(e.decideJson(json(1, Map.of())), Action.APPROVE); // card 101
        List<BatchItem> items = e.decideBatch(List.of(txn(2).entity(101).build(), txn(3).entity(101).build()));
        assertDecision(items.get(0).decision(), Action.APPROVE);
        assertDecision(items.get(1).decision(), Action.REVIEW, "VELOCITY");
    }

    // ----- lists -----

    @Test
    void listAddContainsRemove() {
        assertFalse(st.listContains("blocked_devices", "7"));
        assertDecision(e.decide(txn(1).build()), Action.APPROVE);

        st.listAdd("blocked_devices", 7L);
        assertTrue(st.listContains("blocked_devices", "7"));
        Decision d = e.decide(txn(2).build());
        assertDecision(d, Action.DECLINE, "BLOCKED");
        assertTrue(d.hardRule());

        assertTrue(st.listRemove("blocked_devices", "7"));
        assertFalse(st.listContains("blocked_devices", "7"));
        assertFalse(st.listRemove("blocked_devices", "7"));
        assertDecision(e.decide(txn(3).entity(43).build()), Action.APPROVE);

        // The file's entry serves from the start.
        assertTrue(st.listContains("blocked_devices", FILE_DEVICE));
        assertEquals(1L, num(obj(st.report().get("lists")).get("blocked_devices")));
    }

    @Test
    void anExpiredEntryIsNotLive() {
        st.listAdd("blocked_devices", "8", 1);
        assertFalse(st.listContains("blocked_devices", "8"));
        assertDecision(e.decide(txn(1).device(8).build()), Action.APPROVE);
        st.listAdd("blocked_devices", "8", EntityState.NEVER);
        assertTrue(st.listContains("blocked_devices", "8"));
        st.listAdd("blocked_devices", "9", -5); // negative: never expires, as in C
        assertTrue(st.listContains("blocked_devices", "9"));
    }

    @Test
    void unknownListsAndBadValuesAreStateErrors() {
        RiskException ex = expectState(() -> st.listAdd("no_such_list", "1"));
        assertTrue(ex.detail().contains("no_such_list"), ex.detail());
        expectState(() -> st.listContains("no_such_list", "1"));
        expectState(() -> st.listRemove("no_such_list", "1"));
        // A device list holds decimal ids.
        expectState(() -> st.listAdd("blocked_devices", "nine"));
        assertThrows(IllegalArgumentException.class, () -> st.listAdd("blocked_devices", "7\0"));
        assertThrows(IllegalArgumentException.class, () -> st.listAdd(null, "7"));
        assertThrows(IllegalArgumentException.class, () -> st.listContains("blocked_devices", null));
    }

    @Test
    void reloadOfABadFileNamesItsLineAndKeepsServing() throws IOException {
        st.listAdd("blocked_devices", "7");
        Files.writeString(dir.resolve("blocked_devices.txt"), FILE_DEVICE + "\nnine\n");
        RiskException ex = expectState(st::reloadLists);
        assertTrue(ex.detail().contains("blocked_devices.txt:2"), ex.detail());
        assertTrue(ex.detail().contains("nine"), ex.detail());
        assertTrue(st.listContains("blocked_devices", FILE_DEVICE));
        assertTrue(st.listContains("blocked_devices", "7"));
        assertDecision(e.decide(txn(1).build()), Action.DECLINE, "BLOCKED");

        Files.writeString(dir.resolve("blocked_devices.txt"), "5\n6,1\n");
        st.reloadLists();
        assertTrue(st.listContains("blocked_devices", "5"));
        assertFalse(st.listContains("blocked_devices", "6")); // expired in 1970
    }

    // ----- labels and the state report -----

    @Test
    void reportLabel() {
        e.decide(txn(1).merchant("m-1").build());
        e.decide(txn(2).merchant("m-1").build());
        assertTrue(st.reportLabel(1, true, T0 + 2 * MINUTE) >= 1);
        assertTrue(st.reportLabel(1, false, T0 + 3 * MINUTE) >= 1); // a retraction
        RiskException ex = expectState(() -> st.reportLabel(999_999, true, T0));
        assertTrue(ex.detail().contains("999999"), ex.detail());
        expectState(() -> st.reportLabel(2, true, T0)); // before the transaction

        Map<String, Object> stats = obj(st.report().get("stats"));
        assertEquals(2L, num(stats.get("labels")));
        assertEquals(1L, num(stats.get("labels_unknown")));
    }

    @Test
    void theReportCountsDecisionsWithATimestamp() {
        int n = 5;
        for (int i = 1; i <= n; i++) {
            e.decide(txn(i).entity(i).merchant("m-" + (i % 2)).build());
        }
        e.decide(txn(n + 1).timestampMs(0).entity(500).build()); // no event time: no state
        st.listAdd("blocked_devices", "7");
        e.decide(txn(n + 2).entity(501).build()); // a list hit

        String text = st.json();
        Map<String, Object> r = st.report();
        assertTrue(r.keySet().containsAll(List.of("stats", "memory", "pending_labels", "lists")), text);
        Map<String, Object> stats = obj(r.get("stats"));
        // The counters risk.h documents (a library may add more, e.g. a store's).
        Map<String, Long> want = Map.of("updates", (long) n + 1, "no_time", 1L, "late", 0L, "labels", 0L,
            "labels_unknown", 0L);
        want.forEach((k, v) -> assertEquals(v, stats.get(k), () -> k + " in " + text));
        assertTrue(num(stats.get("list_hits")) >= 1, text);
        assertEquals(0L, num(stats.getOrDefault("degraded", 0L)), text); // the in-process store never fails
        assertEquals(Map.of("blocked_devices", 2L, "blocked_merchants", 0L, "blocked_ips", 0L, "blocked_emails", 0L),
            r.get("lists"));
        Map<String, Long> keys = new HashMap<>();
        for (Object m : list(r.get("memory"))) {
            assertTrue(num(obj(m).get("bytes_per_key")) > 0, text);
            keys.put((String) obj(m).get("source"), num(obj(m).get("keys")));
        }
        assertEquals((long) n + 1, keys.get("entity"), text);
        assertEquals(2L, keys.get("merchant"), text);
        assertTrue(num(r.get("pending_labels")) >= 1, text);
    }

    // ----- snapshots -----

    @Test
    void snapshotWritesAFileANewEngineRestores() throws IOException {
        e.decide(txn(1).build());
        e.decide(txn(2).build());
        Path path = dir.resolve("state.bin");
        st.snapshot(path);
        assertTrue(Files.isRegularFile(path));
        assertTrue(Files.size(path) > 0);
        expectState(st::snapshot); // no path given and none configured
        expectState(() -> st.snapshot(dir.resolve("no/such/dir/s.bin")));

        // An engine configured with the snapshot starts from it: card 42 already has two
        // transactions in the hour.
        String toml = TOML.replace("[state]\n", "[state]\nsnapshot = " + Json.quote(path.toString()) + "\n");
        try (RiskEngine again = RiskEngine.fromToml(toml, dir)) {
            assertDecision(again.decide(txn(3).build()), Action.REVIEW, "VELOCITY");
            again.state().snapshot(); // the configured path
        }
    }

    // ----- merchant / ip / email -----

    static String json(long i, Map<String, String> keys) {
        StringBuilder b = new StringBuilder("{\"id\":").append(i).append(",\"entity\":").append(100 + i)
            .append(",\"timestamp_ms\":").append(T0 + i * MINUTE)
            .append(",\"amount\":25.0,\"currency\":\"USD\",\"device\":7");
        keys.forEach((k, v) -> b.append(',').append(Json.quote(k)).append(':').append(Json.quote(v)));
        return b.append('}').toString();
    }

    static Map<String, String> keys(String merchant, String ip, String email) {
        Map<String, String> m = new HashMap<>();
        if (merchant != null) {
            m.put("merchant", merchant);
        }
        if (ip != null) {
            m.put("ip", ip);
        }
        if (email != null) {
            m.put("email", email);
        }
        return m;
    }

    @ParameterizedTest
    @ValueSource(strings = {"struct", "json", "batch"})
    void merchantIpAndEmailReachTheEngine(String path) {
        Function<Long, Function<Map<String, String>, Decision>> decide = i -> k -> switch (path) {
            case "json" -> e.decideJson(json(i, k));
            default -> {
                Transaction t = txn(i).entity(100 + i).merchant(k.get("merchant")).ip(k.get("ip"))
                    .email(k.get("email")).build();
                assertEquals(k.get("merchant"), t.merchant());
                assertEquals(k.get("ip"), t.ip());
                assertEquals(k.get("email"), t.email());
                if (path.equals("struct")) {
                    yield e.decide(t);
                }
                BatchItem item = e.decideBatch(List.of(t)).get(0);
                assertNotNull(item.decision(), () -> String.valueOf(item.error()));
                yield item.decision();
            }
        };
        Map<String, String> all = keys("m-77", "203.0.113.9", "Jo@Example.com");
        assertDecision(decide.apply(1L).apply(all), Action.APPROVE);
        // One list per key, each holding that key's value: only the right field hits it.
        st.listAdd("blocked_ips", "203.0.113.9");
        assertDecision(decide.apply(2L).apply(all), Action.DECLINE, "IP");
        st.listAdd("blocked_emails", "jo@example.com"); // trimmed and lower-cased
        assertDecision(decide.apply(3L).apply(keys("m-77", null, " JO@example.COM ")), Action.DECLINE, "EMAIL");
        st.listAdd("blocked_merchants", "m-77");
        assertDecision(decide.apply(4L).apply(keys("m-77", null, null)), Action.DECLINE, "MERCHANT");
        assertDecision(decide.apply(5L).apply(keys(null, null, null)), Action.APPROVE);
    }

    @Test
    void keyFieldsRefuseNul() {
        assertThrows(IllegalArgumentException.class, () -> txn(1).merchant("a\0b").build());
        assertThrows(IllegalArgumentException.class, () -> txn(1).ip("a\0b").build());
        assertThrows(IllegalArgumentException.class, () -> txn(1).email("a\0b").build());
    }

    // ----- an engine without [state]; a closed engine -----

    @Test
    void anEngineWithoutStateRefusesEveryStateCall() {
        try (RiskEngine plain = RiskEngine.fromToml(NO_STATE_TOML, null)) {
            EntityState s = plain.state();
            RiskException ex = expectState(() -> s.listAdd("blocked_devices", "1"));
            assertTrue(ex.detail().contains("[state]"), ex.detail());
            expectState(() -> s.listRemove("blocked_devices", "1"));
            expectState(() -> s.listContains("blocked_devices", "1"));
            expectState(s::reloadLists);
            expectState(s::json);
            expectState(() -> s.snapshot(dir.resolve("s.bin")));
            expectState(() -> s.reportLabel(1, true, T0));
            // The key fields are accepted (and unused) without state.
            Decision d = plain.decide(Transaction.builder().amount(1.0, "USD").merchant("m").ip("::1").email("a@b.c").build());
            assertEquals(Action.APPROVE, d.action());
        }
    }

    @Test
    void stateCallsAfterCloseThrowIllegalState() {
        e.close();
        assertThrows(IllegalStateException.class, () -> st.listAdd("blocked_devices", "1"));
        assertThrows(IllegalStateException.class, () -> st.reportLabel(1, true, T0));
        assertThrows(IllegalStateException.class, st::json);
        assertThrows(IllegalStateException.class, () -> e.state().reloadLists());
    }
}
