package dev.risk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Operations of a live engine: health and the kill switch ({@code forceOpen}), the monitors
 * ({@code monitorJson}, {@code monitorTick}) and fallback drills ({@code drill},
 * {@code drillReportJson}).
 */
class ObserveTest {
    /**
     * A constant rule tier (0.1: approve) and a constant fast tier (0.9: decline) with the
     * largest deadline the library allows: every decision is the fast tier's whatever the
     * machine's load, unless a switch or a fault takes it out.
     */
    static final String TOML = Configs.load("fast_constant.toml", Map.of("FAST_SCORE", "0.9"));

    /** The same with monitors judged only on monitorTick, on every decision. */
    static final String MONITOR_TOML = TOML + "[monitor]\nsample_every = 1\nmin_samples = 10\ninterval_ms = 0\n";

    RiskEngine e;

    @BeforeEach
    void open() {
        e = RiskEngine.fromToml(TOML, null);
    }

    @AfterEach
    void close() {
        e.close();
    }

    static Transaction txn(long id) {
        return Transaction.builder().id(id).entity(id % 7).amount(10.0 + id, "USD").build();
    }

    static String txnJson(long id) {
        return "{\"id\":" + id + ",\"entity\":" + (id % 7) + ",\"amount\":" + (10.0 + id) + ",\"currency\":\"USD\"}";
    }

    static String txnsJson(long... ids) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < ids.length; i++) {
            b.append(i == 0 ? "" : ",").append(txnJson(ids[i]));
        }
        return b.append(']').toString();
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

    /** A [[name, count], ...] list as the count of {@code name} (0 when absent). */
    static long count(Object pairs, String name) {
        for (Object p : list(pairs)) {
            List<Object> pair = list(p);
            if (name.equals(pair.get(0))) {
                return num(pair.get(1));
            }
        }
        return 0;
    }

    static RiskException expectRisk(int code, org.junit.jupiter.api.function.Executable x) {
        RiskException ex = assertThrows(RiskException.class, x);
        assertEquals(code, ex.code(), ex.getMessage());
        return ex;
    }

    // ----- health and the kill switch -----

    @Test
    void healthIsReadyWithAConstantFastTier() {
        Map<String, Object> h = e.health();
        assertEquals(Health.READY, h.get("status"));
        assertEquals(List.of(), h.get("reasons"));
        Map<String, Object> fast = obj(h.get("fast"));
        assertEquals(true, fast.get("present"));
        assertEquals(Health.CLOSED, fast.get("state"));
        assertEquals("constant", obj(fast.get("serving")).get("name"));
        assertEquals("0.9", obj(fast.get("serving")).get("version"));
        Map<String, Object> deep = obj(h.get("deep"));
        assertEquals(false, deep.get("present"));
        assertEquals(Health.ABSENT, deep.get("state"));
        assertNull(deep.get("serving"));
        assertEquals(List.of(), h.get("deploying"));
        assertTrue(e.healthJson().contains("\"status\":\"ready\""));
    }

    @Test
    void forceOpenFastHandsDecisionsToTheRulesAndBack() {
        Decision d = e.decide(txn(1));
        assertEquals(Tier.FAST, d.tier());
        assertEquals(Action.DECLINE, d.action());

        e.forceOpen(Health.FAST, true);
        for (long i = 2; i < 6; i++) {
            d = e.decide(txn(i));
            assertEquals(Tier.RULES, d.tier());
            assertEquals(Fallback.CIRCUIT_OPEN, d.fallback());
            assertEquals(Action.APPROVE, d.action());
        }
        Map<String, Object> h = e.health();
        assertEquals(Health.DEGRADED, h.get("status"));
        assertEquals(Health.FORCED_OPEN, obj(h.get("fast")).get("state"));
        assertTrue(list(h.get("reasons")).stream().anyMatch(r -> ((String) r).contains("force_open")),
            h.get("reasons").toString());

        e.forceOpen(Health.FAST, false);
        h = e.health();
        assertEquals(Health.READY, h.get("status"));
        assertEquals(Health.CLOSED, obj(h.get("fast")).get("state"));
        d = e.decide(txn(6));
        assertEquals(Tier.FAST, d.tier());
        assertEquals(Fallback.NONE, d.fallback());
    }

    @Test
    void forceOpenRejectsAnUnknownTier() {
        for (String bad : new String[] {"rules", "FAST", "", "fast "}) {
            RiskException ex = expectRisk(RiskException.ERR_INVALID, () -> e.forceOpen(bad, true));
            assertEquals("RISK_ERR_INVALID", ex.codeName());
        }
        assertThrows(IllegalArgumentException.class, () -> e.forceOpen(null, true));
        assertEquals(Health.READY, e.health().get("status"));
    }

    @Test
    void healthAfterShutdownAndClose() {
        e.shutdown(java.time.Duration.ZERO);
        assertEquals(Health.SHUT_DOWN, e.health().get("status"));
        e.close();
        assertThrows(IllegalStateException.class, e::healthJson);
        assertThrows(IllegalStateException.class, () -> e.forceOpen(Health.FAST, true));
        assertThrows(IllegalStateException.class, e::monitorTick);
        assertThrows(IllegalStateException.class, () -> e.drill(Drill.FAST_DOWN, txnsJson(1), null));
    }

    // ----- monitors -----

    @Test
    void monitorFiresOnModelRulesDisagreement() {
        try (RiskEngine m = RiskEngine.fromToml(MONITOR_TOML, null)) {
            Map<String, Object> r = m.monitorReport();
            assertEquals(0L, num(r.get("windows")));
            assertEquals(List.of(), r.get("firing"));
            for (long i = 1; i <= 50; i++) {
                assertEquals(Tier.FAST, m.decide(txn(i)).tier());
            }
            int raised = m.monitorTick();
            assertTrue(raised >= 1, "raised " + raised);
            r = m.monitorReport();
            assertTrue(list(r.get("firing")).contains("agreement:agreement"), r.get("firing").toString());
            List<Object> agreement = list(r.get("agreement"));
            assertTrue(((Number) agreement.get(0)).doubleValue() < 0.95, agreement.toString());
            assertTrue(num(agreement.get(1)) >= 10, agreement.toString());
            Map<String, Object> alert = list(r.get("recent")).stream().map(ObserveTest::obj)
                .filter(a -> "agreement".equals(a.get("subject"))).reduce((a, b) -> b).orElseThrow();
            assertEquals("agreement", alert.get("kind"));
            assertEquals(true, alert.get("firing"));
            assertEquals(0.95, ((Number) alert.get("threshold")).doubleValue(), 1e-12);
            // Edge-triggered: judging again raises nothing new while it stays bad.
            assertEquals(0, m.monitorTick());
            assertTrue(m.monitorJson().contains("\"agreement:agreement\""));
        }
    }

    @Test
    void monitorReportNeedsAMonitorTable() {
        expectRisk(RiskException.ERR_INVALID, e::monitorJson);
        expectRisk(RiskException.ERR_INVALID, e::monitorReport);
        assertEquals(0, e.monitorTick());
    }

    // ----- drills -----

    @Test
    void drillFastDownHandsEveryDecisionToTheRules() {
        String json = e.drill(Drill.FAST_DOWN, txnsJson(1, 2), Drill.labels(false, true));
        Map<String, Object> r = obj(Json.parse(json));
        assertEquals(Map.of("kind", "fast_down"), r.get("fault"));
        assertEquals(2L, num(r.get("decisions")));
        assertEquals(0L, num(r.get("errors")));
        assertEquals(2L, count(r.get("by_tier"), "rules"));
        assertEquals(0L, count(r.get("by_tier"), "fast"));
        assertEquals(1, list(r.get("fallbacks")).size());
        assertEquals(2L, count(r.get("fallbacks"), "error"));
        Map<String, Object> st = obj(r.get("switch_time"));
        assertTrue(((Number) st.get("max_us")).doubleValue() >= ((Number) st.get("p50_us")).doubleValue());
        // Labelled: the model (decline both) against the rules (approve both).
        assertEquals(1.0, ((Number) obj(r.get("model_quality")).get("recall")).doubleValue(), 1e-12);
        assertEquals(0.0, ((Number) obj(r.get("drill_quality")).get("recall")).doubleValue(), 1e-12);
        assertNotNull(r.get("circuit_after"));
        assertEquals(List.of(0L, 0L), r.get("deep_verdicts"));
        assertEquals(json, e.drillReportJson());
    }

    @Test
    void drillOtherFaults() {
        Map<String, Object> r = obj(Json.parse(e.drill(Drill.FAST_NAN, txnsJson(1, 2, 3), null)));
        assertEquals(Map.of("kind", "fast_nan"), r.get("fault"));
        assertEquals(3L, count(r.get("by_tier"), "rules"));
        assertEquals(3L, count(r.get("fallbacks"), "invalid_score"));
        assertNull(r.get("model_quality"));
        assertNull(r.get("drill_quality"));
        r = obj(Json.parse(e.drill(Drill.fastSlow(1), txnsJson(4), null)));
        assertEquals(Map.of("kind", "fast_slow", "delay_ms", 1L), r.get("fault"));
        assertEquals(1L, count(r.get("by_tier"), "fast"));
        assertEquals(List.of(), r.get("fallbacks"));
    }

    @Test
    void drillRefusesBadArguments() {
        RiskException empty = expectRisk(RiskException.ERR_EMPTY, e::drillReportJson);
        assertEquals("RISK_ERR_EMPTY", empty.codeName());
        for (String fault : new String[] {"fast_up", "fast_slow", "fast_slow:abc", ""}) {
            expectRisk(RiskException.ERR_INVALID, () -> e.drill(fault, txnsJson(1), null));
        }
        RiskException ex = expectRisk(RiskException.ERR_INVALID,
            () -> e.drill(Drill.FAST_DOWN, txnsJson(1, 2), Drill.labels(true)));
        assertTrue(ex.detail().contains("labels"), ex.detail());
        ex = assertThrows(RiskException.class, () -> e.drill(Drill.FAST_DOWN, "[{\"id\":1,\"currency\":\"USD\"}]", null));
        assertTrue(ex.code() == RiskException.ERR_JSON || ex.code() == RiskException.ERR_TRANSACTION, ex.getMessage());
        assertTrue(ex.detail().contains("txns_json[0]"), ex.detail());
        expectRisk(RiskException.ERR_JSON, () -> e.drill(Drill.FAST_DOWN, "[{", null));
        expectRisk(RiskException.ERR_JSON, () -> e.drill(Drill.FAST_DOWN, txnsJson(1), "[1]"));
        assertThrows(IllegalArgumentException.class, () -> e.drill(null, txnsJson(1), null));
        assertThrows(IllegalArgumentException.class, () -> e.drill(Drill.FAST_DOWN, null, null));
        assertThrows(IllegalArgumentException.class, () -> Drill.fastSlow(-1));
        // None of these ran a drill.
        expectRisk(RiskException.ERR_EMPTY, e::drillReportJson);
        assertFalse(e.isClosed());
    }
}
