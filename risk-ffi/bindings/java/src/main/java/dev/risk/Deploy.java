package dev.risk;

/**
 * Names used by the model lifecycle: {@link RiskEngine#deploy}, {@link RiskEngine#deployStatus},
 * {@link RiskEngine#promote}, {@link RiskEngine#rollback}.
 *
 * <p>A deploy puts a candidate version into one part of a live engine (a target): it loads
 * and warms the candidate, runs the validation gate on a sample of recent live transactions
 * (every 16th decision is kept; by default the gate needs 32 of them), then shadows it,
 * canaries it on a sticky share of entities, or promotes it, as its rollout plan says. The
 * engine's supervisor advances the stages and rolls a deploy back when a guard breaks. A
 * refused candidate never serves ({@link RiskException#ERR_DEPLOY}, the detail says why).
 *
 * <p>A candidate is TOML: a {@code [scorer]} table as in {@code risk.toml}'s
 * {@code [fast.scorer]} (with an optional {@code [calibration]}: {@code method = "platt"},
 * {@code a}, {@code b}), a {@code [policy]} table ({@code approve_below},
 * {@code decline_at}), or {@code stored = "<16 hex key>"} (a version in the model directory):
 *
 * <pre>{@code
 * long id = engine.deploy(Deploy.FAST, "[scorer]\nkind = \"constant\"\nprobability = 0.06\n",
 *     "by = \"ci#42\"\n[[canary]]\nshare = 0.1\n", null);
 * }</pre>
 *
 * <p>A plan is TOML too: {@code by}, {@code [gate]} ({@code sample}, {@code min_sample},
 * {@code max_mean_abs_diff}, {@code min_action_agreement}, {@code max_p99_ms},
 * {@code min_auprc}), {@code [shadow]} ({@code sample}, {@code min_scored},
 * {@code min_duration_ms}, {@code budget_ms}, {@code queue}), {@code [[canary]]}
 * ({@code share}, {@code min_decisions}, {@code min_duration_ms}) and {@code [guards]}. A plan
 * without {@code [shadow]} or {@code [[canary]]} promotes as soon as the gate passes.
 */
public final class Deploy {
    private Deploy() {}

    /** Target: the rule set. */
    public static final String RULES = "rules";
    /** Target: the fast model. */
    public static final String FAST = "fast";
    /** Target: the deep model (gate-and-promote plans only). */
    public static final String DEEP = "deep";
    /** Target: the thresholds and override switch. */
    public static final String POLICY = "policy";

    /** {@code active.phase}: the candidate scores a copy of live traffic. */
    public static final String PHASE_SHADOW = "shadow";
    /** {@code active.phase}: the candidate decides for a share of entities. */
    public static final String PHASE_CANARY = "canary";

    /** {@code history[].kind}: the gate passed and the deploy started. */
    public static final String EVENT_STARTED = "started";
    /** {@code history[].kind}: refused (gate, load, warm-up, schema). */
    public static final String EVENT_REFUSED = "refused";
    /** {@code history[].kind}: a canary stage began. */
    public static final String EVENT_STAGE = "stage";
    /** {@code history[].kind}: the candidate became the serving version. */
    public static final String EVENT_PROMOTED = "promoted";
    /** {@code history[].kind}: a deploy was ended, or a serving version replaced by its predecessor. */
    public static final String EVENT_ROLLED_BACK = "rolled_back";
}
