package dev.risk;

/**
 * One item of {@link RiskEngine#decideBatch}: a decision, or the error for that item.
 *
 * <p>The C ABI reports one {@code risk_result} per item but keeps only one error message per
 * call, so an item's {@link RiskException#detail()} is the library's message only when it
 * was the single failed item of its call; otherwise it says which code failed and that the
 * message is not available.
 */
public record BatchItem(int index, Decision decision, RiskException error) {

    public boolean isOk() {
        return error == null;
    }

    /** The decision, or throws this item's error. */
    public Decision orThrow() {
        if (error != null) {
            throw error;
        }
        return decision;
    }
}
