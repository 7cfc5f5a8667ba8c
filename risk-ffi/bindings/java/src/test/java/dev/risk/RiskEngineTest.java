package dev.risk;

import static org.junit.jupiter.api.Assertions.assertAll;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import org.junit.jupiter.api.function.ThrowingSupplier;

class RiskEngineTest {
    static final String CONSTANT_TOML =
        "[schema]\nfields = [{ name = \"amount\", kind = \"numeric\", required = true }]\n"
            + "[rules.scorer]\nkind = \"constant\"\nprobability = 0.1\n";

    /**
     * Every decision lands in the gray band and goes to a (constant) deep tier. Nothing in it
     * depends on how fast the machine is: the fast deadline is the largest allowed (60 s) and
     * the deep budget an hour, so no decision or verdict falls back to a timeout.
     */
    static final String DEEP_TOML = deepToml("budget_ms = 3600000\n");

    /**
     * A deep dispatcher that never takes a batch during a test: it waits for {@code maxBatch}
     * items or max_wait (an hour) after the oldest's enqueue. Fewer than {@code maxBatch}
     * queued items stay queued until shutdown, deterministically.
     */
    static String stuckDeepToml(int maxBatch) {
        return deepToml("budget_ms = 7200000\nmax_wait_ms = 3600000\nmax_batch = " + maxBatch + "\n");
    }

    static String deepToml(String deepTable) {
        return "[schema]\nfields = [{ name = \"amount\", kind = \"numeric\", required = true }]\n"
            + "[rules.scorer]\nkind = \"constant\"\nprobability = 0.5\n"
            + "[fast]\ndeadline_ms = 60000\n"
            + "[fast.scorer]\nkind = \"constant\"\nprobability = 0.5\n"
            + "[gray]\nband = [0.3, 0.7]\n"
            + "[deep]\n" + deepTable
            + "[deep.scorer]\nkind = \"constant\"\nprobability = 0.9\n";
    }

    /**
     * How long a call that must return at once, or once the test releases it, may take before
     * the test fails it as hung. A hang detector, not a performance limit.
     */
    static final Duration HANG = Duration.ofSeconds(60);
    static final Duration HOUR = Duration.ofHours(1);
    static final int HOUR_MS = 3_600_000;

    /** {@code f} on another thread; fails the test as hung when it has not returned in {@link #HANG}. */
    static <T> T noHang(String what, ThrowingSupplier<T> f) {
        return assertTimeoutPreemptively(HANG, f, () -> what + ": hung (still running after " + HANG + ")");
    }

    /** An hour-long poll that must end with RISK_ERR_CLOSED (at once, or once the deep tier stops). */
    static void expectClosed(String what, Subscription s) {
        RiskException e = riskError(RiskException.ERR_CLOSED, () -> noHang(what, () -> s.poll(HOUR)));
        assertEquals("RISK_ERR_CLOSED", e.codeName());
    }

    /** An hour-long poll that must return a verdict. */
    static Verdict nextVerdict(String what, Subscription s) {
        return noHang(what, () -> s.poll(HOUR)).orElseThrow(() -> new AssertionError(what + ": empty after an hour?"));
    }

    /** A number of the metrics JSON: {@code key} at the top level, or in the object {@code section}. */
    static long metric(String json, String section, String key) {
        String in = section == null ? json : section(json, section);
        Matcher m = Pattern.compile("\"" + key + "\":(\\d+)").matcher(in);
        assertTrue(m.find(), () -> "no \"" + key + "\" in " + json);
        return Long.parseLong(m.group(1));
    }

    /** The members of the (flat) object {@code name} of the metrics JSON. */
    static String section(String json, String name) {
        Matcher m = Pattern.compile("\"" + name + "\":\\{([^{}]*)\\}").matcher(json);
        assertTrue(m.find(), () -> "no \"" + name + "\" object in " + json);
        return m.group(1);
    }

    /** Every deep verdict the engine produced (circuit-open fallbacks too, where reported). */
    static long verdicts(String json) {
        boolean hasCircuitOpen = section(json, "gray").contains("\"circuit_open\":");
        return metric(json, "gray", "completed") + metric(json, "gray", "timed_out")
            + metric(json, "gray", "failed") + metric(json, "gray", "saturated")
            + (hasCircuitOpen ? metric(json, "gray", "circuit_open") : 0);
    }

    static Path toml;
    static RiskEngine engine;

    @BeforeAll
    static void open() {
        String p = System.getProperty("risk.example.toml");
        assertNotNull(p, "system property risk.example.toml");
        toml = Path.of(p).toAbsolutePath().normalize();
        assertTrue(Files.isRegularFile(toml), "missing " + toml);
        engine = RiskEngine.fromPath(toml);
    }

    @AfterAll
    static void shut() {
        engine.close();
    }

    static Transaction.Builder base(long id) {
        return Transaction.builder()
            .id(id)
            .entity(1000 + id % 97)
            .timestampMs(1_767_571_200_000L + id * 1000)
            .amount(42.5, "USD")
            .mcc(5411)
            .country("US")
            .channel("pos")
            .device(7)
            .feature("txn_count_1h", 3)
            .feature("hour", 23)
            .feature("device_new", 1);
    }

    static RiskException riskError(int code, Executable e) {
        RiskException ex = assertThrows(RiskException.class, e);
        assertEquals(code, ex.code(), () -> "wrong code: " + ex);
        assertEquals(RiskException.codeName(code), ex.codeName());
        return ex;
    }

    static void checkDecision(Decision d, long id) {
        assertAll(
            () -> assertEquals(id, d.txnId()),
            () -> assertEquals(1000 + id % 97, d.entity()),
            () -> assertTrue(d.action() != Action.UNKNOWN, "action"),
            () -> assertTrue(d.tier() != Tier.UNKNOWN, "tier"),
            () -> assertTrue(d.fallback() != Fallback.UNKNOWN, "fallback"),
            () -> assertTrue(d.score() >= 0f && d.score() <= 1f, "score " + d.score()),
            () -> assertTrue(d.reasons().size() <= 8),
            () -> assertTrue(d.totalNs() > 0, "total_ns"));
    }

    // ----- basics -----

    @Test
    void version() {
        assertFalse(RiskEngine.version().isBlank());
    }

    @Test
    void decideOne() {
        Decision d = engine.decide(base(1).build());
        checkDecision(d, 1);
        for (Reason r : d.reasons()) {
            assertFalse(r.name().isBlank(), "reason " + r.code() + " has a name");
            assertEquals(r.name(), ReasonNames.of(r.code()));
        }
        assertEquals(d.escalation() == Escalation.ENQUEUED, d.ticket() != 0, "ticket iff enqueued");
    }

    @Test
    void theSameTransactionDecidesTwice() {
        Transaction t = base(2).build();
        checkDecision(engine.decide(t), 2);
        checkDecision(engine.decide(t), 2);
    }

    @Test
    void reasonNamesAndFallbackNamesComeFromTheLibrary() {
        for (Fallback f : Fallback.values()) {
            if (f != Fallback.UNKNOWN) {
                assertEquals(f.cName(), RiskNative.fallbackName(f.ordinal()));
            }
        }
        assertEquals("unknown", RiskNative.fallbackName(200));
        assertThrows(IllegalArgumentException.class, () -> RiskNative.fallbackName(256));
        riskError(RiskException.ERR_INVALID, () -> RiskNative.reasonName(0xFFFFFFF0));
    }

    @Test
    void missingNumericFeatureIsAllowed() {
        checkDecision(engine.decide(base(3).missing("amount_ratio").build()), 3);
    }

    @Test
    void decideJson() {
        Decision d = engine.decideJson("{\"id\": 9, \"entity\": 5, \"timestamp_ms\": 1767571200000, \"amount\": 12.5, "
            + "\"currency\": \"GBP\", \"country\": \"GB\", \"channel\": \"ecom\", "
            + "\"features\": {\"txn_count_1h\": 1, \"hour\": null}}");
        assertEquals(9, d.txnId());
        assertEquals(5, d.entity());
        assertTrue(d.score() >= 0f && d.score() <= 1f);
    }

    @Test
    void nonAsciiTextIsRealUtf8BothWays() {
        // A non-BMP character: GetStringUTFChars' modified UTF-8 would make this RISK_ERR_UTF8.
        RiskException e = riskError(RiskException.ERR_TRANSACTION,
            () -> engine.decideJson("{\"amount\": 1, \"currency\": \"USD\", \"country\": \"\uD83D\uDE00\"}"));
        assertTrue(e.detail().contains("\uD83D\uDE00"), e.getMessage());
        e = riskError(RiskException.ERR_TRANSACTION, () -> engine.decide(base(4).country("\u00C9\u00C9").build()));
        assertTrue(e.detail().contains("\u00C9\u00C9"), e.getMessage());
    }

    // ----- batch -----

    @Test
    void batchWithABadItem() {
        List<Transaction> batch = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            batch.add((i == 2 ? base(100 + i).amount(-1.0, "USD") : base(100 + i)).build());
        }
        List<BatchItem> out = engine.decideBatch(batch);
        assertEquals(4, out.size());
        for (int i = 0; i < 4; i++) {
            BatchItem it = out.get(i);
            assertEquals(i, it.index());
            if (i == 2) {
                assertFalse(it.isOk());
                assertNull(it.decision());
                assertEquals(RiskException.ERR_TRANSACTION, it.error().code());
                assertTrue(it.error().detail().contains("amount"), it.error().getMessage());
                assertThrows(RiskException.class, it::orThrow);
            } else {
                assertTrue(it.isOk(), () -> "item " + it);
                checkDecision(it.orThrow(), 100 + i);
            }
        }
    }

    @Test
    void batchWithSeveralBadItemsSaysTheMessageIsLost() {
        List<BatchItem> out = engine.decideBatch(List.of(
            base(110).amount(Double.NaN, "USD").build(),
            base(111).build(),
            base(112).amount(1, "ZZZZ").build()));
        assertEquals(RiskException.ERR_TRANSACTION, out.get(0).error().code());
        assertTrue(out.get(1).isOk());
        assertEquals(RiskException.ERR_TRANSACTION, out.get(2).error().code());
        assertTrue(out.get(0).error().detail().contains("2 items failed"), out.get(0).error().getMessage());
    }

    @Test
    void batchEdgeCases() {
        assertTrue(engine.decideBatch(List.of()).isEmpty());
        List<Transaction> withNull = new ArrayList<>();
        withNull.add(base(120).build());
        withNull.add(null);
        assertThrows(IllegalArgumentException.class, () -> engine.decideBatch(withNull));
        assertThrows(IllegalArgumentException.class, () -> engine.decideBatch(null));
        // Items with different feature counts and categorical features in one call.
        List<BatchItem> out = engine.decideBatch(List.of(
            Transaction.builder().id(121).amount(5, "EUR").build(),
            base(122).feature("currency", "GBP").feature("secs_since_last", 12).build(),
            Transaction.builder().id(123).entity(1000 + 123 % 97).amount(7, "USD").feature("hour", 1).build()));
        out.forEach(i -> assertTrue(i.isOk(), () -> "item " + i));
        assertEquals(121, out.get(0).orThrow().txnId());
        assertEquals(122, out.get(1).orThrow().txnId());
        assertEquals(123, out.get(2).orThrow().txnId());
    }

    @Test
    void batchLongerThanTheCLimitIsSplit() {
        int n = RiskNative.MAX_BATCH + 3;
        List<Transaction> txns = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            txns.add(Transaction.builder().id(i).amount(i == n - 2 ? -1 : 1, "USD").build());
        }
        try (RiskEngine e = RiskEngine.fromToml(CONSTANT_TOML, null)) {
            List<BatchItem> out = e.decideBatch(txns);
            assertEquals(n, out.size());
            assertEquals(RiskNative.MAX_BATCH, out.get(RiskNative.MAX_BATCH).index());
            assertEquals(RiskNative.MAX_BATCH, out.get(RiskNative.MAX_BATCH).orThrow().txnId());
            assertEquals(RiskException.ERR_TRANSACTION, out.get(n - 2).error().code());
            assertTrue(out.get(n - 2).error().detail().contains("amount"), out.get(n - 2).error().getMessage());
            assertEquals(n - 1, out.get(n - 1).orThrow().txnId());
        }
    }

    // ----- bad inputs -----

    @Test
    void nanAmount() {
        RiskException e = riskError(RiskException.ERR_TRANSACTION,
            () -> engine.decide(base(5).amount(Double.NaN, "USD").build()));
        assertTrue(e.detail().contains("amount"), e.getMessage());
    }

    @Test
    void badCurrency() {
        RiskException e = riskError(RiskException.ERR_TRANSACTION,
            () -> engine.decide(base(6).amount(10, "ZZZZ").build()));
        assertTrue(e.detail().contains("currency"), e.getMessage());
    }

    @Test
    void unknownFeature() {
        RiskException e = riskError(RiskException.ERR_TRANSACTION,
            () -> engine.decide(base(7).feature("no_such_field", 1.0).build()));
        assertTrue(e.detail().contains("no_such_field"), e.getMessage());
        riskError(RiskException.ERR_TRANSACTION, () -> engine.decide(base(7).missing("no_such_field").build()));
    }

    @Test
    void badChannel() {
        riskError(RiskException.ERR_TRANSACTION, () -> engine.decide(base(8).channel("carrier-pigeon").build()));
    }

    @Test
    void malformedJson() {
        for (String bad : new String[] {"{", "[]", "", "{\"amount\": 1}",
                "{\"amount\": 1, \"currency\": \"USD\", \"bogus\": 1}",
                "{\"amount\": 1, \"currency\": \"USD\", \"features\": {\"hour\": [1]}}"}) {
            riskError(RiskException.ERR_JSON, () -> engine.decideJson(bad));
        }
        assertThrows(IllegalArgumentException.class, () -> engine.decideJson("{\"amount\": \"\uD800\"}"));
    }

    @Test
    void nullArguments() {
        assertThrows(IllegalArgumentException.class, () -> engine.decide(null));
        assertThrows(IllegalArgumentException.class, () -> engine.decideJson(null));
        assertThrows(IllegalArgumentException.class, () -> engine.shutdown(null));
        assertThrows(IllegalArgumentException.class, () -> RiskEngine.fromPath((String) null));
        assertThrows(IllegalArgumentException.class, () -> RiskEngine.fromPath((Path) null));
        assertThrows(IllegalArgumentException.class, () -> RiskEngine.fromToml(null, null));
        assertThrows(IllegalArgumentException.class, () -> Transaction.builder().feature(null, 1.0));
        assertThrows(IllegalArgumentException.class, () -> Transaction.builder().feature("x", (String) null));
        // A null currency goes to C as NULL: the library's RISK_ERR_NULL.
        RiskException e = riskError(RiskException.ERR_NULL,
            () -> engine.decide(Transaction.builder().amount(1, null).build()));
        assertTrue(e.detail().contains("currency"), e.getMessage());
        // The glue passes Java nulls on as C NULL where the ABI takes a pointer...
        riskError(RiskException.ERR_NULL, () -> RiskNative.engineNewFromPath(null));
        // (NULL with length 0 is empty text to the library: a config without [schema].)
        RiskException empty = riskError(RiskException.ERR_CONFIG, () -> RiskNative.engineNewFromToml(null, null));
        assertTrue(empty.detail().contains("schema"), empty.getMessage());
        riskError(RiskException.ERR_NULL, () -> RiskNative.decideJson(0, new byte[] {'{', '}'}, new long[32]));
        riskError(RiskException.ERR_NULL, () -> RiskNative.metricsJson(0));
        riskError(RiskException.ERR_NULL, () -> RiskNative.metricsText(0));
        // ...and refuses nulls and malformed arrays it needs itself.
        assertThrows(IllegalArgumentException.class,
            () -> RiskNative.decide(0, 1, 1, 1, 1.0, 0, 0, null, new int[3], new double[0], new long[32]));
        assertThrows(IllegalArgumentException.class,
            () -> RiskNative.decide(0, 1, 1, 1, 1.0, 0, 0, new byte[] {'U'}, new int[] {0, -1, -1}, new double[0],
                new long[32]));
        assertThrows(IllegalArgumentException.class,
            () -> RiskNative.decide(0, 1, 1, 1, 1.0, 0, 0, new byte[] {'U', 0}, new int[] {5, -1, -1},
                new double[0], new long[32]));
        assertThrows(IllegalArgumentException.class,
            () -> RiskNative.decideJson(0, new byte[] {'{', '}'}, new long[3]));
        assertThrows(IllegalArgumentException.class, () -> RiskNative.engineNewFromPath(new byte[] {'a'}));
    }

    @Test
    void whatCCannotCarryIsRefusedInJava() {
        assertThrows(IllegalArgumentException.class, () -> base(9).amount(1, "US\0D").build());
        assertThrows(IllegalArgumentException.class, () -> base(9).country("\uDC00").build());
        assertThrows(IllegalArgumentException.class, () -> base(9).mcc(70_000));
        assertThrows(IllegalArgumentException.class, () -> base(9).mcc(-1));
        assertThrows(IllegalArgumentException.class, () -> RiskEngine.fromPath("a\0b"));
    }

    @Test
    void featureOutsideTheFloatRangeIsRejected() {
        for (double v : new double[] {1e39, -3.5e38, Double.MAX_VALUE}) {
            RiskException e = riskError(RiskException.ERR_TRANSACTION,
                () -> engine.decide(base(10).feature("hour", v).build()));
            assertTrue(e.detail().contains("hour"), e.getMessage());
        }
        checkDecision(engine.decide(base(10).feature("hour", 3.4e38).build()), 10);
    }

    @Test
    void unknownCodesMapToUnknown() {
        assertEquals(Tier.UNKNOWN, Tier.of(255));
        assertEquals(Fallback.UNKNOWN, Fallback.of(255));
        assertEquals(Fallback.UNKNOWN, Fallback.of(8));
        assertEquals(Fallback.SATURATED, Fallback.of(7));
        assertEquals("unknown", RiskNative.fallbackName(255));
        assertEquals(Fallback.UNKNOWN.cName(), RiskNative.fallbackName(Verdict.CODE_UNKNOWN));
        assertEquals("RISK_ERR_CLOSED", RiskException.codeName(RiskException.ERR_CLOSED));
        assertEquals(13, RiskException.ERR_CLOSED);
        assertEquals("RISK_ERR_AUDIT", RiskException.codeName(RiskException.ERR_AUDIT));
        assertEquals(14, RiskException.ERR_AUDIT);
        assertEquals("RISK_ERR_DEPLOY", RiskException.codeName(RiskException.ERR_DEPLOY));
        assertEquals(15, RiskException.ERR_DEPLOY);
        assertEquals("RISK_ERR_STATE", RiskException.codeName(RiskException.ERR_STATE));
        assertEquals(16, RiskException.ERR_STATE);
        assertEquals("RISK_ERR_UNKNOWN(17)", RiskException.codeName(17));
        long[] raw = new long[RiskNative.DECISION_LONGS];
        raw[3] = 255;
        raw[4] = 255;
        Decision d = Decision.fromLongs(raw, 0);
        assertEquals(Tier.UNKNOWN, d.tier());
        assertEquals(Fallback.UNKNOWN, d.fallback());
    }

    @Test
    void tooManyFeaturesIsTheLibrarysInvalid() {
        Transaction.Builder b = base(10);
        for (int i = 0; i < Transaction.MAX_FEATURES + 1; i++) {
            b.feature("hour", 1);
        }
        riskError(RiskException.ERR_INVALID, () -> engine.decide(b.build()));
    }

    // ----- construction, metrics, reload -----

    @Test
    void configErrors() {
        RiskException e = riskError(RiskException.ERR_CONFIG, () -> RiskEngine.fromPath("/nonexistent/risk.toml"));
        assertTrue(e.detail().contains("/nonexistent/risk.toml"), e.getMessage());
        e = riskError(RiskException.ERR_CONFIG, () -> RiskEngine.fromToml(CONSTANT_TOML + "[gray]\nband = [0.7, 0.3]\n", null));
        assertTrue(e.detail().contains("gray.band"), e.getMessage());
        riskError(RiskException.ERR_CONFIG, () -> RiskEngine.fromToml("not toml [", null));
    }

    @Test
    void fromTomlTextWithBaseDir() throws IOException {
        String text = Files.readString(toml, StandardCharsets.UTF_8);
        try (RiskEngine e = RiskEngine.fromToml(text, toml.getParent())) {
            checkDecision(e.decide(base(11).build()), 11);
            e.reloadRules();
        }
        // Without the base dir the relative rule/model paths do not resolve (unless the
        // current directory happens to be examples/).
        if (!Path.of("").toAbsolutePath().equals(toml.getParent())) {
            riskError(RiskException.ERR_CONFIG, () -> RiskEngine.fromToml(text, Path.of("/nonexistent-dir")));
        }
    }

    @Test
    void reloadWithoutARuleFileIsReloadError() {
        try (RiskEngine e = RiskEngine.fromToml(CONSTANT_TOML, null)) {
            riskError(RiskException.ERR_RELOAD, e::reloadRules);
            Decision d = e.decide(Transaction.builder().id(12).amount(3, "USD").build());
            assertEquals(12, d.txnId());
        }
    }

    @Test
    void reloadRules() {
        assertDoesNotThrow(engine::reloadRules);
    }

    @Test
    void metricsJson() {
        engine.decide(base(13).build());
        String m = engine.metricsJson();
        assertTrue(m.startsWith("{") && m.endsWith("}"), m);
        assertTrue(m.contains("\"decisions\""), m);
        assertTrue(m.contains("\"latency\""), m);
    }

    /** CONSTANT_TOML has no fast tier: the rule tier decides every transaction. */
    @Test
    void metricsText() {
        RiskEngine e = RiskEngine.fromToml(CONSTANT_TOML, null);
        String t;
        try {
            for (int i = 1; i <= 3; i++) {
                assertEquals(Tier.RULES, e.decide(Transaction.builder().id(i).amount(10, "USD").build()).tier());
            }
            t = e.metricsText();
        } finally {
            e.close();
        }
        assertTrue(t.contains("risk_decisions_by_tier_total{tier=\"rules\"} 3\n"), t);
        assertTrue(t.contains("risk_decisions_total{action=\"approve\"} 3\n"), t);
        assertTrue(t.contains("# TYPE risk_decide_latency_seconds histogram\n"), t);
        assertTrue(t.contains("risk_decide_latency_seconds_bucket{le=\"+Inf\",stage=\"total\"} 3\n"), t);
        assertTrue(t.strip().endsWith("# EOF"), t);
        assertThrows(IllegalStateException.class, e::metricsText);
    }

    // ----- lifecycle -----

    @Test
    void shutdownThenDecideIsShutDown() {
        try (RiskEngine e = RiskEngine.fromPath(toml)) {
            checkDecision(e.decide(base(14).build()), 14);
            // examples/risk.toml has no deep tier: nothing can have been queued.
            assertEquals(new ShutdownReport(0, 0), e.shutdown(Duration.ZERO));
            riskError(RiskException.ERR_SHUT_DOWN, () -> e.decide(base(15).build()));
            assertFalse(e.isClosed());
            assertEquals(1, metric(e.metricsJson(), null, "decisions")); // refused ones not counted
            assertEquals(new ShutdownReport(0, 0), e.shutdown(Duration.ofMillis(1))); // again: harmless
        }
    }

    @Test
    void shutdownAbandonCountsExactlyTheQueuedItems() {
        try (RiskEngine e = RiskEngine.fromToml(stuckDeepToml(64), null); Subscription s = e.subscribe()) {
            for (int i = 1; i <= 5; i++) {
                assertEquals(Escalation.ENQUEUED, e.decide(Transaction.builder().id(i).amount(5, "USD").build()).escalation());
            }
            String m = e.metricsJson();
            assertEquals(List.of(5L, 5L, 0L), List.of(metric(m, "gray", "enqueued"), metric(m, "gray", "queue_len"), verdicts(m)));
            assertEquals(new ShutdownReport(0, 5), e.shutdown(Duration.ZERO));
            String after = e.metricsJson();
            assertEquals(List.of(5L, 0L, 0L),
                List.of(metric(after, "gray", "enqueued"), metric(after, "gray", "queue_len"), verdicts(after)));
            assertEquals(new ShutdownReport(0, 0), e.shutdown(Duration.ZERO)); // nothing counted twice
            expectClosed("poll after an abandoning shutdown", s);
        }
    }

    /**
     * max_batch 4 and six items: the first four go as one batch the moment the fourth is
     * queued, the last two wait for two more or an hour, so a 50 ms drain finds them still
     * queued. Exact counts whatever the machine's speed (the 50 ms only decides how long the
     * drain waits, not what it finds).
     */
    @Test
    void shutdownDrainThatTimesOutAbandonsTheRest() {
        try (RiskEngine e = RiskEngine.fromToml(stuckDeepToml(4), null); Subscription s = e.subscribe()) {
            Set<Long> firstFour = new HashSet<>();
            for (int i = 1; i <= 6; i++) {
                Decision d = e.decide(Transaction.builder().id(i).amount(5, "USD").build());
                assertEquals(Escalation.ENQUEUED, d.escalation());
                if (i <= 4) {
                    firstFour.add(d.ticket());
                }
            }
            Set<Long> got = new HashSet<>();
            for (int k = 0; k < 4; k++) {
                got.add(nextVerdict("verdict " + k + " of the first batch", s).ticket());
            }
            assertEquals(firstFour, got);
            assertEquals(2, metric(e.metricsJson(), "gray", "queue_len"));
            assertEquals(new ShutdownReport(0, 2), e.shutdown(Duration.ofMillis(50)));
            String m = e.metricsJson();
            assertEquals(List.of(6L, 0L, 4L), List.of(metric(m, "gray", "enqueued"), metric(m, "gray", "queue_len"), verdicts(m)));
            expectClosed("poll after the drain", s);
        }
    }

    /** A drain that completes: nothing abandoned, one verdict per enqueued item. */
    @Test
    void shutdownDrainFinishesQueuedWork() {
        try (RiskEngine e = RiskEngine.fromToml(DEEP_TOML, null); Subscription s = e.subscribe()) {
            Set<Long> tickets = new HashSet<>();
            for (int i = 1; i <= 5; i++) {
                Decision d = e.decide(Transaction.builder().id(i).amount(5, "USD").build());
                assertEquals(Escalation.ENQUEUED, d.escalation());
                tickets.add(d.ticket());
            }
            long before = verdicts(e.metricsJson()); // those the shutdown cannot count as drained
            // An hour-long drain: it must end because the queue emptied (else: hung).
            ShutdownReport r = noHang("draining shutdown", () -> e.shutdown(HOUR));
            assertEquals(0, r.abandoned());
            assertTrue(r.drained() <= 5 - before, () -> r + " with " + before + " verdicts before the shutdown");
            String m = e.metricsJson();
            assertEquals(List.of(5L, 0L, 5L), List.of(metric(m, "gray", "enqueued"), metric(m, "gray", "queue_len"), verdicts(m)));
            Set<Long> got = new HashSet<>();
            for (int k = 0; k < 5; k++) {
                got.add(nextVerdict("verdict " + k, s).ticket());
            }
            assertEquals(tickets, got);
            expectClosed("poll after the five verdicts", s);
        }
    }

    @Test
    void useAfterClose() {
        RiskEngine e = RiskEngine.fromToml(CONSTANT_TOML, null);
        Transaction t = Transaction.builder().amount(1, "USD").build();
        e.decide(t);
        e.close();
        assertTrue(e.isClosed());
        assertThrows(IllegalStateException.class, () -> e.decide(t));
        assertThrows(IllegalStateException.class, () -> e.decideJson("{\"amount\": 1, \"currency\": \"USD\"}"));
        assertThrows(IllegalStateException.class, () -> e.decideBatch(List.of(t)));
        assertThrows(IllegalStateException.class, () -> e.decideBatch(List.of()));
        assertThrows(IllegalStateException.class, e::metricsJson);
        assertThrows(IllegalStateException.class, e::metricsText);
        assertThrows(IllegalStateException.class, e::reloadRules);
        assertThrows(IllegalStateException.class, () -> e.shutdown(Duration.ZERO));
        assertThrows(IllegalStateException.class, e::subscribe);
    }

    @Test
    void doubleClose() {
        RiskEngine e = RiskEngine.fromToml(CONSTANT_TOML, null);
        Subscription s = e.subscribe();
        e.close();
        assertDoesNotThrow(e::close);
        assertDoesNotThrow(s::close);
        assertTrue(e.isClosed());
    }

    @Test
    void freedHandleIsRefusedByTheLibrary() {
        long h = RiskNative.engineNewFromToml(CONSTANT_TOML.getBytes(StandardCharsets.UTF_8), null);
        assertTrue(h != 0);
        RiskNative.engineFree(h);
        RiskNative.engineFree(h); // documented: harmless
        RiskNative.engineFree(0);
        riskError(RiskException.ERR_HANDLE, () -> RiskNative.metricsJson(h));
        riskError(RiskException.ERR_HANDLE, () -> RiskNative.metricsText(h));
        riskError(RiskException.ERR_HANDLE, () -> RiskNative.decideJson(h, "{}".getBytes(StandardCharsets.UTF_8), new long[32]));
        // Handles are never reused: new engines do not make the stale one live again.
        long[] others = new long[4];
        try {
            for (int i = 0; i < others.length; i++) {
                others[i] = RiskNative.engineNewFromToml(CONSTANT_TOML.getBytes(StandardCharsets.UTF_8), null);
                assertTrue(others[i] != h);
            }
            riskError(RiskException.ERR_HANDLE, () -> RiskNative.metricsJson(h));
        } finally {
            for (long o : others) {
                RiskNative.engineFree(o);
            }
        }
    }

    // ----- subscriptions -----

    @Test
    void subscriptionPollTimeoutIsEmpty() {
        try (RiskEngine e = RiskEngine.fromToml(DEEP_TOML, null); Subscription s = e.subscribe()) {
            assertEquals(Optional.empty(), s.poll(Duration.ZERO));
            // At least the timeout: a floor no machine's speed can break (there is no ceiling).
            long t0 = System.nanoTime();
            assertEquals(Optional.empty(), s.poll(Duration.ofMillis(120)));
            assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(120), "returned before the timeout");
            assertThrows(IllegalArgumentException.class, () -> s.poll(Duration.ofMillis(-1)));
            assertThrows(IllegalArgumentException.class, () -> s.poll(null));
        }
    }

    @Test
    void subscriptionWithoutADeepTierIsClosedAtOnce() {
        // examples/risk.toml has no deep tier: RISK_ERR_CLOSED, at once even for an hour-long
        // poll (one that waited it out is reported as hung).
        try (Subscription s = engine.subscribe()) {
            for (Duration d : new Duration[] {Duration.ZERO, HOUR}) {
                RiskException e = riskError(RiskException.ERR_CLOSED, () -> noHang("poll(" + d + ")", () -> s.poll(d)));
                assertEquals("RISK_ERR_CLOSED", e.codeName());
                assertFalse(e.detail().isEmpty());
            }
        }
    }

    @Test
    void subscriptionLifecycle() {
        RiskEngine e = RiskEngine.fromToml(CONSTANT_TOML, null);
        Subscription s1 = e.subscribe();
        Subscription s2 = e.subscribe();
        s1.close();
        s1.close();
        assertThrows(IllegalStateException.class, () -> s1.poll(Duration.ZERO));
        riskError(RiskException.ERR_CLOSED, () -> s2.poll(Duration.ZERO)); // no deep tier
        e.close(); // closes s2 too
        assertThrows(IllegalStateException.class, () -> s2.poll(Duration.ZERO));
    }

    /**
     * After shutdown (the engine not freed) no verdict will ever come: RISK_ERR_CLOSED, at once,
     * for a poll made after it and for one already waiting (an hour) when it happened. The
     * waiting thread signals right before its poll; whether the shutdown then lands while it
     * waits inside the library or just before it gets there, the answer is the same.
     */
    @Test
    void pollOnAShutDownEngineIsClosed() throws Exception {
        ExecutorService one = Executors.newSingleThreadExecutor();
        try (RiskEngine e = RiskEngine.fromToml(DEEP_TOML, null); Subscription s = e.subscribe();
                Subscription s2 = e.subscribe()) {
            CountDownLatch polling = new CountDownLatch(1);
            Future<Optional<Verdict>> waiting = one.submit(() -> {
                polling.countDown();
                return s2.poll(HOUR);
            });
            assertTrue(polling.await(1, TimeUnit.MINUTES));
            assertEquals(new ShutdownReport(0, 0), e.shutdown(Duration.ZERO));
            ExecutionException ex = assertThrows(ExecutionException.class,
                () -> waiting.get(HANG.toSeconds(), TimeUnit.SECONDS), "the waiting poll returned instead of RISK_ERR_CLOSED");
            RiskException closed = assertInstanceOf(RiskException.class, ex.getCause());
            assertEquals(RiskException.ERR_CLOSED, closed.code(), closed::getMessage);
            expectClosed("poll after shutdown", s);
            expectClosed("poll again after shutdown", s2);
        } finally {
            one.shutdownNow();
        }
    }

    @Test
    void afterTheEngineIsFreedBufferedVerdictsThenClosed() throws InterruptedException {
        // Raw handles: RiskEngine.close() would close its subscriptions too.
        long h = RiskNative.engineNewFromToml(DEEP_TOML.getBytes(StandardCharsets.UTF_8), null);
        long s = RiskNative.subscribe(h);
        long waiter = RiskNative.subscribe(h);
        try {
            long[] d = new long[RiskNative.DECISION_LONGS];
            RiskNative.decideJson(h, "{\"id\": 41, \"amount\": 5, \"currency\": \"USD\"}"
                .getBytes(StandardCharsets.UTF_8), d);
            long ticket = Decision.fromLongs(d, 0).ticket();
            assertTrue(ticket != 0);
            // Knowing the verdict is buffered without sleeping: a second subscription blocks
            // until it receives it. The deep tier hands a verdict to every subscriber under one
            // lock that shutdown also takes, so once the waiter has it, s has it too.
            long[] w = new long[RiskNative.VERDICT_LONGS];
            assertTrue(noHang("waiting for the verdict", () -> RiskNative.poll(waiter, HOUR_MS, w)));
            assertEquals(ticket, Verdict.fromLongs(w).ticket());
            RiskNative.engineFree(h);
            long[] v = new long[RiskNative.VERDICT_LONGS];
            assertTrue(RiskNative.poll(s, 0, v)); // already buffered: no waiting needed
            assertEquals(ticket, Verdict.fromLongs(v).ticket());
            riskError(RiskException.ERR_CLOSED, () -> noHang("poll after the buffered verdict", () -> RiskNative.poll(s, HOUR_MS, v)));
            riskError(RiskException.ERR_CLOSED, () -> noHang("the waiter after its verdict", () -> RiskNative.poll(waiter, HOUR_MS, w)));
        } finally {
            RiskNative.engineFree(h);
            RiskNative.subscriptionFree(s);
            RiskNative.subscriptionFree(waiter);
        }
    }

    /**
     * A raw poll already waiting (an hour) when the engine is freed ends with RISK_ERR_CLOSED
     * once the deep tier stops (raw handles: {@link RiskEngine#close()} would close the
     * subscription first). The poller signals right before its call; whether the free lands
     * while it waits or just before, the answer is the same.
     */
    @Test
    void aPollWaitingWhenTheEngineIsFreedIsClosed() throws Exception {
        long h = RiskNative.engineNewFromToml(DEEP_TOML.getBytes(StandardCharsets.UTF_8), null);
        long s = RiskNative.subscribe(h);
        ExecutorService one = Executors.newSingleThreadExecutor();
        try {
            CountDownLatch polling = new CountDownLatch(1);
            Future<Boolean> waiting = one.submit(() -> {
                polling.countDown();
                return RiskNative.poll(s, HOUR_MS, new long[RiskNative.VERDICT_LONGS]);
            });
            assertTrue(polling.await(1, TimeUnit.MINUTES));
            RiskNative.engineFree(h);
            ExecutionException ex = assertThrows(ExecutionException.class,
                () -> waiting.get(HANG.toSeconds(), TimeUnit.SECONDS), "the waiting poll returned instead of RISK_ERR_CLOSED");
            RiskException closed = assertInstanceOf(RiskException.class, ex.getCause());
            assertEquals(RiskException.ERR_CLOSED, closed.code(), closed::getMessage);
        } finally {
            one.shutdownNow();
            RiskNative.engineFree(h);
            RiskNative.subscriptionFree(s);
        }
    }

    @Test
    void deepVerdictArrivesOnTheSubscription() {
        try (RiskEngine e = RiskEngine.fromToml(DEEP_TOML, null); Subscription s = e.subscribe()) {
            Decision d = e.decide(Transaction.builder().id(31).entity(8).amount(5, "USD").build());
            assertEquals(Escalation.ENQUEUED, d.escalation());
            assertTrue(d.ticket() != 0);
            Verdict v = nextVerdict("waiting for the verdict", s); // returns when it arrives
            assertEquals(d.ticket(), v.ticket());
            assertEquals(31, v.txnId());
            assertEquals(8, v.entity());
            assertEquals(0.9f, v.score(), 1e-6);
            assertEquals(0, v.failure());
            assertEquals(Optional.empty(), s.poll(Duration.ZERO));
        }
    }

    /**
     * One unsliced hour-long native poll: the library holds no global lock during a call, so
     * building, using and freeing other engines meanwhile completes (else: reported as hung),
     * and the poll itself ends only when its engine is freed (RISK_ERR_CLOSED).
     *
     * <p>The poller signals right before its call; the test cannot see it enter the library.
     * If the other work ran before it got there, the test would pass without testing anything,
     * never fail spuriously; the work is repeated so that the poll is in the library for nearly
     * all of it.
     */
    @Test
    void aLongPollDoesNotStallTheRestOfTheProcess() throws Exception {
        long h = RiskNative.engineNewFromToml(DEEP_TOML.getBytes(StandardCharsets.UTF_8), null);
        long s = RiskNative.subscribe(h);
        ExecutorService one = Executors.newSingleThreadExecutor();
        try {
            CountDownLatch polling = new CountDownLatch(1);
            Future<Boolean> f = one.submit(() -> {
                polling.countDown();
                return RiskNative.poll(s, HOUR_MS, new long[RiskNative.VERDICT_LONGS]);
            });
            assertTrue(polling.await(1, TimeUnit.MINUTES));
            noHang("building, using and freeing engines during a long poll", () -> {
                for (int i = 0; i < 20; i++) {
                    try (RiskEngine other = RiskEngine.fromToml(CONSTANT_TOML, null)) {
                        other.subscribe().close();
                        other.decide(Transaction.builder().id(i).amount(1, "USD").build());
                    }
                }
                return null;
            });
            assertFalse(f.isDone(), "the hour-long poll returned before its engine was freed");
            RiskNative.engineFree(h);
            ExecutionException ex = assertThrows(ExecutionException.class,
                () -> f.get(HANG.toSeconds(), TimeUnit.SECONDS), "the poll returned instead of RISK_ERR_CLOSED");
            RiskException closed = assertInstanceOf(RiskException.class, ex.getCause());
            assertEquals(RiskException.ERR_CLOSED, closed.code(), closed::getMessage);
        } finally {
            one.shutdownNow();
            RiskNative.subscriptionFree(s);
            RiskNative.engineFree(h);
        }
    }

    // ----- threads -----

    @Test
    void sixteenThreadsShareOneEngine() throws Exception {
        int threads = 16;
        int perThread = 2000;
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        CountDownLatch start = new CountDownLatch(1);
        // The shared engine is used by other tests, but one at a time: an exact delta.
        long before = metric(engine.metricsJson(), null, "decisions");
        try {
            List<Future<Long>> fs = new ArrayList<>();
            for (int k = 0; k < threads; k++) {
                long first = 1_000_000L * (k + 1);
                fs.add(pool.submit(() -> {
                    start.await();
                    long ok = 0;
                    for (int i = 0; i < perThread; i++) {
                        long id = first + i;
                        Decision d = engine.decide(base(id).build());
                        if (d.txnId() != id || d.action() == Action.UNKNOWN) {
                            throw new AssertionError("bad decision for " + id + ": " + d);
                        }
                        ok++;
                    }
                    return ok;
                }));
            }
            start.countDown();
            long total = 0;
            for (Future<Long> f : fs) {
                total += f.get(5, TimeUnit.MINUTES);
            }
            assertEquals((long) threads * perThread, total);
        } finally {
            pool.shutdownNow();
        }
        assertEquals(before + (long) threads * perThread, metric(engine.metricsJson(), null, "decisions"));
    }

    @Test
    void closeWaitsForCallsInFlightAndLaterCallsFailCleanly() throws Exception {
        RiskEngine e = RiskEngine.fromPath(toml);
        int threads = 8;
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        CountDownLatch running = new CountDownLatch(threads);
        AtomicLong decided = new AtomicLong();
        try {
            List<Future<String>> fs = new ArrayList<>();
            for (int k = 0; k < threads; k++) {
                long first = 10_000_000L * (k + 1);
                fs.add(pool.submit(() -> {
                    for (long i = 0; ; i++) {
                        try {
                            e.decide(base(first + i).build());
                            decided.incrementAndGet();
                        } catch (IllegalStateException closed) {
                            return "closed";
                        }
                        // (No RISK_ERR_SHUT_DOWN is possible: close() takes the write lock, so
                        // no call is in flight when it frees the engine. Any RiskException
                        // fails the test.)
                        if (i == 0) {
                            running.countDown();
                        }
                    }
                }));
            }
            assertTrue(running.await(2, TimeUnit.MINUTES));
            e.close();
            for (Future<String> f : fs) {
                assertEquals("closed", f.get(2, TimeUnit.MINUTES));
            }
            assertTrue(decided.get() >= threads);
        } finally {
            pool.shutdownNow();
            e.close();
        }
    }
}
