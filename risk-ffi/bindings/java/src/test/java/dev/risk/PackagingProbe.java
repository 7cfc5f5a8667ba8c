package dev.risk;

import java.nio.file.Path;

/**
 * What a user's program does with the jar: build an engine from a risk.toml and decide one
 * transaction. {@link PackagingIT} runs it in a child JVM and in separate class loaders.
 */
public final class PackagingProbe {
    private PackagingProbe() {}

    /** Decides benches/ffi.rs's transaction on the engine of {@code toml}: "action score tier". */
    public static String decideOnce(String toml) {
        try (RiskEngine engine = RiskEngine.fromPath(Path.of(toml))) {
            Decision d = engine.decide(Transaction.builder().id(7).entity(42).timestampMs(1_767_571_200_000L)
                .amount(42.5, "USD").mcc(5411).country("US").channel("pos").device(9)
                .feature("txn_count_1h", 3.0).feature("hour", 14.0).feature("device_new", 0.0).build());
            return d.action() + " " + d.score() + " " + d.tier();
        }
    }

    /** The class loader that loaded the native methods' class in this loader's world. */
    public static ClassLoader nativeLoader() {
        return RiskNative.class.getClassLoader();
    }

    /** {@code java -cp risk-jni.jar:test-classes dev.risk.PackagingProbe risk.toml}. */
    public static void main(String[] args) {
        System.out.println("decided " + decideOnce(args[0]) + " with " + RiskEngine.version());
    }
}
