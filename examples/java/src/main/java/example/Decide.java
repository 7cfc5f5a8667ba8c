package example;

import dev.risk.Decision;
import dev.risk.RiskEngine;
import dev.risk.Transaction;
import java.nio.file.Path;

/** Builds an engine from a risk.toml and decides one card-present transaction. */
public final class Decide {
    private Decide() {}

    /** {@code Decide path/to/risk.toml}. */
    public static void main(String[] args) {
        if (args.length != 1) {
            System.err.println("usage: Decide path/to/risk.toml");
            System.exit(2);
        }
        try (RiskEngine engine = RiskEngine.fromPath(Path.of(args[0]))) {
            Transaction t = Transaction.builder()
                .id(1).entity(42).timestampMs(System.currentTimeMillis())
                .amount(129.90, "USD").mcc(5411).country("US").channel("pos")
                .feature("txn_count_1h", 3).feature("hour", 23)
                .build();
            Decision d = engine.decide(t);
            System.out.println("risk " + RiskEngine.version() + ": " + d.action() + " score " + d.score()
                + " via " + d.tier() + " reasons " + d.reasons());
        }
    }
}
