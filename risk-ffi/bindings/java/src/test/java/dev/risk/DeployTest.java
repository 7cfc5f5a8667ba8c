package dev.risk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import org.junit.jupiter.api.io.TempDir;

/**
 * Model lifecycle: {@code deploy} gates a candidate on recent traffic and promotes, canaries or
 * refuses it; {@code deployStatus} reports it; {@code promote} and {@code rollback} end a
 * deploy; {@code RISK_ERR_DEPLOY} (15) carries the library's reason.
 */
class DeployTest {
    /**
     * A constant rule tier (0.1) and a constant fast tier (0.05) with the largest deadline the
     * library allows: every decision is the fast tier's, whatever the machine's load.
     */
    static final String TOML = Configs.load("fast_constant.toml", Map.of("FAST_SCORE", "0.05"));

    /**
     * Decisions made before a deploy: the gate validates on the recent sample (every 16th
     * decision, by a hash of the txn id) and by default needs 32 of them; 1500 leave ~94.
     */
    static final int WARM = 1500;

    /** The default gate, no stages: promoted once the gate passes. */
    static final String IMMEDIATE = "by = \"test\"";
    /** One canary stage that never ends by itself during a test. */
    static final String CANARY = "by = \"test\"\n[gate]\nmin_sample = 0\n[[canary]]\nshare = 0.5\nmin_decisions = 1000000\n";
    /** No gate sample needed (tests not about the gate). */
    static final String NO_SAMPLE = "by = \"test\"\n[gate]\nmin_sample = 0\n";

    @TempDir
    Path dir;

    RiskEngine e;

    @BeforeEach
    void open() {
        e = RiskEngine.fromToml(TOML, null);
    }

    @AfterEach
    void close() {
        e.close();
    }

    static String fast(double p) {
        return "[scorer]\nkind = \"constant\"\nprobability = " + p + "\n";
    }

    static Transaction txn(long id) {
        return Transaction.builder().id(id).entity(id % 53).amount(5 + (id % 400) * 1.25, "USD").build();
    }

    void warm() {
        for (long i = 1; i <= WARM; i++) {
            assertEquals(Tier.FAST, e.decide(txn(i)).tier());
        }
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> obj(Object v) {
        return (Map<String, Object>) v;
    }

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> list(Object v) {
        return (List<Map<String, Object>>) v;
    }

    String serving(String target) {
        Map<String, Object> s = obj(e.deployStatus(target).get("serving"));
        assertNotNull(s, target + ": nothing serves");
        return (String) s.get("version");
    }

    static List<String> versions(Map<String, Object> status) {
        List<String> out = new ArrayList<>();
        for (Map<String, Object> v : list(status.get("previous"))) {
            out.add((String) v.get("version"));
        }
        return out;
    }

    static Map<String, Object> lastEvent(Map<String, Object> status) {
        List<Map<String, Object>> h = list(status.get("history"));
        assertFalse(h.isEmpty(), "no history");
        return h.get(h.size() - 1);
    }

    float modelScore(long id) {
        Decision d = e.decide(txn(id));
        assertEquals(Tier.FAST, d.tier());
        return d.modelScore();
    }

    static RiskException deployError(String mentions, Executable call) {
        RiskException ex = TestSupport.riskError(RiskException.ERR_DEPLOY, call);
        assertEquals("RISK_ERR_DEPLOY", ex.codeName());
        assertTrue(ex.detail().contains(mentions), () -> "detail does not mention \"" + mentions + "\": " + ex.detail());
        return ex;
    }

    @Test
    void deployPromotesThenRollbackRestores() {
        warm();
        Map<String, Object> st = e.deployStatus(Deploy.FAST);
        assertEquals("fast", st.get("target"));
        assertEquals("0.05", obj(st.get("serving")).get("version"));
        assertEquals("constant", obj(st.get("serving")).get("name"));
        assertNull(st.get("active"));
        assertEquals(List.of(), st.get("previous"));
        assertEquals(List.of(), st.get("history"));
        long epoch = (Long) st.get("epoch");

        long id = e.deploy(Deploy.FAST, fast(0.06), IMMEDIATE, null);
        assertTrue(id > 0, "id " + id);
        st = e.deployStatus(Deploy.FAST);
        Map<String, Object> s = obj(st.get("serving"));
        assertEquals("0.06", s.get("version"));
        assertEquals(16, ((String) s.get("hash")).length());
        assertEquals("constant@0.06#" + s.get("hash"), s.get("id"));
        assertEquals(List.of("0.05"), versions(st));
        assertNull(st.get("active"));
        assertTrue((Long) st.get("epoch") > epoch);
        Map<String, Object> ev = lastEvent(st);
        assertEquals(Deploy.EVENT_PROMOTED, ev.get("kind"));
        assertEquals(id, ev.get("deploy"));
        assertEquals("0.06", obj(ev.get("version")).get("version"));
        assertEquals(0.06f, modelScore(10_001));

        e.rollback(Deploy.FAST, "test rollback");
        st = e.deployStatus(Deploy.FAST);
        assertEquals("0.05", obj(st.get("serving")).get("version"));
        assertEquals(List.of(), versions(st));
        assertEquals(Deploy.EVENT_ROLLED_BACK, lastEvent(st).get("kind"));
        assertEquals("test rollback", lastEvent(st).get("detail"));
        assertEquals(0.05f, modelScore(10_002));

        // Nothing left to roll back to.
        RiskException ex = deployError("no previous version", () -> e.rollback(Deploy.FAST, null));
        assertTrue(ex.getMessage().startsWith("RISK_ERR_DEPLOY: "), ex.getMessage());
        assertEquals("0.05", serving(Deploy.FAST));
    }

    @Test
    void rollbackWithoutReasonRecordsTheDefault() {
        warm();
        e.deploy(Deploy.FAST, fast(0.06), IMMEDIATE, null);
        e.rollback(Deploy.FAST, null); // null: NULL
        Map<String, Object> ev = lastEvent(e.deployStatus(Deploy.FAST));
        assertEquals(Deploy.EVENT_ROLLED_BACK, ev.get("kind"));
        assertEquals("rollback requested", ev.get("detail"));
    }

    @Test
    void deployIdsGrowAndPreviousStacks() {
        warm();
        long a = e.deploy(Deploy.FAST, fast(0.06), IMMEDIATE, null);
        long b = e.deploy(Deploy.FAST, fast(0.07), IMMEDIATE, null);
        assertTrue(b > a && a > 0, a + " then " + b);
        Map<String, Object> st = e.deployStatus(Deploy.FAST);
        assertEquals("0.07", obj(st.get("serving")).get("version"));
        assertEquals(List.of("0.06", "0.05"), versions(st));
    }

    @Test
    void theGateRefusesAWildlyDifferentCandidate() {
        warm();
        RiskException ex = deployError("gate", () -> e.deploy(Deploy.FAST, fast(0.95), IMMEDIATE, null));
        assertTrue(ex.detail().contains("Disagreement"), ex.detail());
        Map<String, Object> st = e.deployStatus(Deploy.FAST);
        assertEquals("0.05", obj(st.get("serving")).get("version")); // a refused candidate never serves
        assertNull(st.get("active"));
        Map<String, Object> ev = lastEvent(st);
        assertEquals(Deploy.EVENT_REFUSED, ev.get("kind"));
        assertEquals("0.95", obj(ev.get("version")).get("version"));
        assertTrue(((String) ev.get("detail")).contains("gate"));
        assertEquals(0.05f, modelScore(10_003));
    }

    @Test
    void theGateNeedsRecentTraffic() {
        RiskException ex = deployError("gate", () -> e.deploy(Deploy.FAST, fast(0.06), IMMEDIATE, null));
        assertTrue(ex.detail().contains("32"), ex.detail());
        assertEquals("0.05", serving(Deploy.FAST));
        // min_sample = 0: validated on what there is (nothing), promoted.
        assertTrue(e.deploy(Deploy.FAST, fast(0.06), NO_SAMPLE, null) > 0);
        assertEquals("0.06", serving(Deploy.FAST));
    }

    @Test
    void aCanaryStaysActiveUntilPromoted() {
        warm();
        long id = e.deploy(Deploy.FAST, fast(0.06), CANARY, null);
        Map<String, Object> st = e.deployStatus(Deploy.FAST);
        Map<String, Object> a = obj(st.get("active"));
        assertNotNull(a, "no active deploy");
        assertEquals(id, a.get("id"));
        assertEquals(Deploy.PHASE_CANARY, a.get("phase"));
        assertEquals(0L, a.get("stage"));
        assertEquals(0.5, a.get("share"));
        assertEquals("0.06", obj(a.get("candidate")).get("version"));
        assertEquals(0L, obj(a.get("gate")).get("invalid"));
        assertEquals("0.05", obj(st.get("serving")).get("version")); // the candidate decides for a share only
        assertEquals(Deploy.EVENT_STARTED, lastEvent(st).get("kind"));

        // One deploy per target at a time.
        deployError("in progress", () -> e.deploy(Deploy.FAST, fast(0.07), NO_SAMPLE, null));
        // A tick does not end a stage short of its min_decisions.
        e.deployTick();
        assertEquals(Deploy.PHASE_CANARY, obj(e.deployStatus(Deploy.FAST).get("active")).get("phase"));

        e.promote(Deploy.FAST);
        st = e.deployStatus(Deploy.FAST);
        assertEquals("0.06", obj(st.get("serving")).get("version"));
        assertNull(st.get("active"));
        assertEquals(List.of("0.05"), versions(st));
        assertEquals(Deploy.EVENT_PROMOTED, lastEvent(st).get("kind"));
        assertEquals(0.06f, modelScore(10_004));
        deployError("no deploy in progress", () -> e.promote(Deploy.FAST));
    }

    @Test
    void rollbackEndsACanaryAndKeepsWhatServes() {
        warm();
        e.deploy(Deploy.FAST, fast(0.06), CANARY, null);
        e.rollback(Deploy.FAST, "abandoned");
        Map<String, Object> st = e.deployStatus(Deploy.FAST);
        assertNull(st.get("active"));
        assertEquals("0.05", obj(st.get("serving")).get("version"));
        assertEquals(Deploy.EVENT_ROLLED_BACK, lastEvent(st).get("kind"));
        assertEquals("abandoned", lastEvent(st).get("detail"));
        // The target is free again.
        assertTrue(e.deploy(Deploy.FAST, fast(0.07), IMMEDIATE, null) > 0);
        assertEquals("0.07", serving(Deploy.FAST));
    }

    @Test
    void aPolicyDeployChangesTheThresholds() {
        warm();
        String policy = "[policy]\napprove_below = 0.02\ndecline_at = 0.04\n";
        assertEquals(Action.APPROVE, e.decide(txn(20_001)).action());
        // Every recent decision would change action: the default agreement check refuses it.
        deployError("gate", () -> e.deploy(Deploy.POLICY, policy, IMMEDIATE, null));
        e.deploy(Deploy.POLICY, policy, "[gate]\nmin_action_agreement = 0.0\n", null);
        assertTrue(serving(Deploy.POLICY).contains("0.04"), serving(Deploy.POLICY));
        assertEquals(Action.DECLINE, e.decide(txn(20_002)).action());
    }

    @Test
    void candidatePathsResolveAgainstBaseDir() throws IOException {
        warm();
        Files.writeString(dir.resolve("cand.rules"),
            "version \"v2\"\nrule BIG { when amount > 100 score 0.3 reason \"BIG\" }\n", StandardCharsets.UTF_8);
        String cand = "[scorer]\nkind = \"rules\"\npath = \"cand.rules\"\n";
        // Not about the gate: BIG changes many recent actions, so the gate lets anything pass.
        String plan = NO_SAMPLE + "max_mean_abs_diff = 1.0\nmin_action_agreement = 0.0\n";
        // null: the working directory (the project's), which has no cand.rules.
        deployError("cand.rules", () -> e.deploy(Deploy.RULES, cand, plan, null));
        assertEquals("0.1", serving(Deploy.RULES));
        e.deploy(Deploy.RULES, cand, plan, dir.toString());
        assertEquals("v2", serving(Deploy.RULES));
        Decision d = e.decide(Transaction.builder().id(20_003).amount(500, "USD").build());
        assertEquals(0.3f, d.ruleScore());
        assertEquals("BIG", d.reasons().get(0).name());
    }

    @Test
    void everyTargetHasAStatus() {
        for (String t : List.of(Deploy.RULES, Deploy.FAST, Deploy.DEEP, Deploy.POLICY)) {
            Map<String, Object> st = e.deployStatus(t);
            assertEquals(t, st.get("target"));
            assertNull(st.get("active"));
            assertTrue(e.deployStatusJson(t).startsWith("{\"target\":\"" + t + "\""));
        }
        assertEquals("0.1", serving(Deploy.RULES));
        assertNull(e.deployStatus(Deploy.DEEP).get("serving")); // no deep tier
        deployError("no deep tier", () -> e.deploy(Deploy.DEEP, fast(0.5), NO_SAMPLE, null));
    }

    @Test
    void badArguments() {
        warm();
        // An unknown target is the library's RISK_ERR_INVALID, not a refused deploy.
        for (Executable call : List.<Executable>of(
                () -> e.deploy("nope", fast(0.06), IMMEDIATE, null),
                () -> e.deploy("", fast(0.06), IMMEDIATE, null),
                () -> e.deployStatus("nope"),
                () -> e.promote("nope"),
                () -> e.rollback("Fast", "reason"))) {
            RiskException ex = TestSupport.riskError(RiskException.ERR_INVALID, call);
            assertTrue(ex.detail().contains("is not rules, fast, deep or policy"), ex.detail());
        }
        // Candidates that do not parse, or give no single table: refused.
        for (String cand : List.of("[scorer", "", "probability = 0.06\n",
                fast(0.06) + "[policy]\napprove_below = 0.1\ndecline_at = 0.9\n", "[scorer]\nkind = \"nope\"\n")) {
            deployError("candidate failed to load", () -> e.deploy(Deploy.FAST, cand, NO_SAMPLE, null));
        }
        // A malformed plan: RISK_ERR_INVALID.
        for (String plan : List.of("[gate]\nbogus = 1\n", "[[canary]]\nshare = 1.5\n", "by = ")) {
            RiskException ex = TestSupport.riskError(RiskException.ERR_INVALID,
                () -> e.deploy(Deploy.FAST, fast(0.06), plan, null));
            assertTrue(ex.detail().contains("rollout plan"), ex.detail());
        }
        // Java-side checks: null required arguments and NUL characters.
        assertThrows(IllegalArgumentException.class, () -> e.deploy(null, fast(0.06), null, null));
        assertThrows(IllegalArgumentException.class, () -> e.deploy(Deploy.FAST, null, null, null));
        assertThrows(IllegalArgumentException.class, () -> e.deployStatus(null));
        assertThrows(IllegalArgumentException.class, () -> e.promote(null));
        assertThrows(IllegalArgumentException.class, () -> e.rollback(null, "why"));
        assertThrows(IllegalArgumentException.class, () -> e.deploy(Deploy.FAST, fast(0.06) + "\0", null, null));
        assertThrows(IllegalArgumentException.class, () -> e.rollback(Deploy.FAST, "a\0b"));

        Map<String, Object> st = e.deployStatus(Deploy.FAST);
        assertEquals("0.05", obj(st.get("serving")).get("version"));
        assertNull(st.get("active"));
    }

    @Test
    void theGlueWithARawHandle() {
        // Below the public API: a null string reaches the library as NULL (RISK_ERR_NULL for a
        // required one), and the library itself refuses a freed handle.
        long h = RiskNative.engineNewFromToml(Utf8.text(TOML, "toml"), null);
        try {
            byte[] fast = Utf8.z(Deploy.FAST, "t");
            byte[] cand = Utf8.z(fast(0.06), "c");
            RiskException ex = TestSupport.riskError(RiskException.ERR_NULL, () -> RiskNative.deploy(h, null, cand, null, null));
            assertTrue(ex.detail().contains("target"), ex.detail());
            ex = TestSupport.riskError(RiskException.ERR_NULL, () -> RiskNative.deploy(h, fast, null, null, null));
            assertTrue(ex.detail().contains("candidate_toml"), ex.detail());
            TestSupport.riskError(RiskException.ERR_NULL, () -> RiskNative.deployStatusJson(h, null));
            TestSupport.riskError(RiskException.ERR_NULL, () -> RiskNative.promote(h, null));
            TestSupport.riskError(RiskException.ERR_NULL, () -> RiskNative.rollback(h, null, null));
            // A byte[] that is not one NUL-terminated string is the glue's own refusal.
            assertThrows(IllegalArgumentException.class, () -> RiskNative.promote(h, new byte[] {'f'}));
            // A null base dir: the working directory (a constant candidate needs no file).
            assertTrue(RiskNative.deploy(h, fast, Utf8.z(fast(0.05), "c"), Utf8.z(NO_SAMPLE, "p"), null) > 0);
            RiskNative.deployTick(h);
        } finally {
            RiskNative.engineFree(h);
        }
        TestSupport.riskError(RiskException.ERR_HANDLE, () -> RiskNative.deployTick(h));
        TestSupport.riskError(RiskException.ERR_HANDLE, () -> RiskNative.deployStatusJson(h, Utf8.z(Deploy.FAST, "t")));
    }

    @Test
    void aShutDownOrClosedEngine() {
        e.shutdown(java.time.Duration.ZERO);
        TestSupport.riskError(RiskException.ERR_SHUT_DOWN, () -> e.deploy(Deploy.FAST, fast(0.06), NO_SAMPLE, null));
        assertEquals("0.05", serving(Deploy.FAST));
        e.close();
        for (Executable call : List.<Executable>of(
                () -> e.deploy(Deploy.FAST, fast(0.06), NO_SAMPLE, null),
                () -> e.deployStatus(Deploy.FAST),
                () -> e.promote(Deploy.FAST),
                () -> e.rollback(Deploy.FAST, null),
                () -> e.deployTick())) {
            assertThrows(IllegalStateException.class, call);
        }
    }

    @Test
    void theDeployCode() {
        assertEquals(15, RiskException.ERR_DEPLOY);
        assertEquals("RISK_ERR_DEPLOY", RiskException.codeName(RiskException.ERR_DEPLOY));
        RiskException ex = new RiskException(RiskException.ERR_DEPLOY, "why");
        assertEquals("RISK_ERR_DEPLOY: why", ex.getMessage());
        assertEquals("why", ex.detail());
    }
}
