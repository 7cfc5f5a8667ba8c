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

/** Deciding through the binding: one transaction, JSON, batches, bad inputs. */
class DecideTest extends TestSupport {
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
    void explainGivesTheModelsReasonsOnRequest() {
        Transaction t = base(1).build();
        Decision d = engine.decide(t);
        List<Reason> why = engine.explain(t);
        assertFalse(why.isEmpty(), "the example's model explains every transaction on request");
        assertTrue(why.size() <= 8);
        for (Reason r : why) {
            assertTrue(r.name().startsWith("xgb:"), r.name());
        }
        // The decision's model reasons, when it carried them, are the same ones in order.
        List<Reason> model = new ArrayList<>();
        for (Reason r : d.reasons()) {
            if (r.name().startsWith("xgb:")) {
                model.add(r);
            }
        }
        assertEquals(model, why.subList(0, model.size()));
        RiskException e = riskError(RiskException.ERR_TRANSACTION,
            () -> engine.explain(base(5).amount(Double.NaN, "USD").build()));
        assertTrue(e.detail().contains("amount"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> engine.explain(null));
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
}
