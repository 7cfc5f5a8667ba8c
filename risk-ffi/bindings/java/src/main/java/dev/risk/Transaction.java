package dev.risk;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * An immutable transaction ({@code risk_txn}), built with {@link #builder()}. Validation is
 * the library's: a bad amount, currency, country, channel or feature is reported by
 * {@link RiskEngine#decide} as a {@link RiskException} ({@code RISK_ERR_TRANSACTION}, or
 * {@code RISK_ERR_NULL} for a missing currency), exactly as from C. The builder itself only
 * rejects what C cannot represent: an mcc outside 0..65535, a null feature name or category,
 * U+0000 inside a string, an unpaired surrogate. (More than {@link #MAX_FEATURES} features
 * is the library's {@code RISK_ERR_INVALID}.)
 *
 * <p>The C encoding (UTF-8 strings, offsets, feature values) is computed once in
 * {@link Builder#build()}, so deciding the same transaction again costs no re-encoding.
 */
public final class Transaction {
    /** {@code n_features} limit of the C ABI. */
    public static final int MAX_FEATURES = 4096;

    /** One extra feature: numeric {@code value} (NaN = missing) or categorical {@code category}. */
    public record Feature(String name, double value, String category) {
        public Feature {
            if (name == null) {
                throw new IllegalArgumentException("feature name is null");
            }
        }

        /** Whether this is a categorical feature. */
        public boolean isCategorical() {
            return category != null;
        }
    }

    private final long id;
    private final long entity;
    private final long timestampMs;
    private final double amount;
    private final String currency;
    private final int mcc;
    private final String country;
    private final String channel;
    private final long device;
    private final String merchant;
    private final String ip;
    private final String email;
    private final List<Feature> features;

    // C encoding: strings = NUL-terminated UTF-8, offsets = [currency, country, channel,
    // merchant, ip, email, (name, category) per feature], -1 for NULL; featureValues per
    // feature.
    final byte[] strings;
    final int[] offsets;
    final double[] featureValues;

    private Transaction(Builder b) {
        this.id = b.id;
        this.entity = b.entity;
        this.timestampMs = b.timestampMs;
        this.amount = b.amount;
        this.currency = b.currency;
        this.mcc = b.mcc;
        this.country = b.country;
        this.channel = b.channel;
        this.device = b.device;
        this.merchant = b.merchant;
        this.ip = b.ip;
        this.email = b.email;
        this.features = Collections.unmodifiableList(new ArrayList<>(b.features));

        int nf = features.size();
        Utf8 u = new Utf8(32 + nf * 24);
        int[] off = new int[RiskNative.TXN_FIXED_STRINGS + 2 * nf];
        double[] vals = new double[nf];
        off[0] = currency == null ? -1 : u.addZ(currency, "currency");
        off[1] = country == null ? -1 : u.addZ(country, "country");
        off[2] = channel == null ? -1 : u.addZ(channel, "channel");
        off[3] = merchant == null ? -1 : u.addZ(merchant, "merchant");
        off[4] = ip == null ? -1 : u.addZ(ip, "ip");
        off[5] = email == null ? -1 : u.addZ(email, "email");
        int f0 = RiskNative.TXN_FIXED_STRINGS;
        for (int i = 0; i < nf; i++) {
            Feature f = features.get(i);
            off[f0 + 2 * i] = u.addZ(f.name(), "feature name");
            off[f0 + 1 + 2 * i] = f.category() == null ? -1 : u.addZ(f.category(), "feature " + f.name());
            vals[i] = f.value();
        }
        this.strings = u.toArray();
        this.offsets = off;
        this.featureValues = vals;
    }

    public static Builder builder() {
        return new Builder();
    }

    /** Transaction id (an unsigned 64-bit value). */
    public long id() { return id; }
    /** Entity (card/account) key (unsigned 64-bit). */
    public long entity() { return entity; }
    public long timestampMs() { return timestampMs; }
    public double amount() { return amount; }
    /** ISO 4217 code, or null (then the library answers {@code RISK_ERR_NULL}). */
    public String currency() { return currency; }
    /** Merchant category code, 0 = unset. */
    public int mcc() { return mcc; }
    /** ISO 3166-1 alpha-2, or null = unset. */
    public String country() { return country; }
    /** pos/ecom/atm/moto/app, or null = unset. */
    public String channel() { return channel; }
    /** Device id (unsigned), 0 = unset. */
    public long device() { return device; }
    /** Merchant or terminal id, or null = unset (an entity-state key, hashed by the library). */
    public String merchant() { return merchant; }
    /** IP address, or null = unset (an entity-state key, hashed as text). */
    public String ip() { return ip; }
    /** E-mail address, or null = unset (an entity-state key, trimmed, lower-cased and hashed). */
    public String email() { return email; }
    public List<Feature> features() { return features; }

    @Override
    public String toString() {
        return "Transaction[id=" + Long.toUnsignedString(id) + ", entity=" + Long.toUnsignedString(entity)
            + ", timestampMs=" + timestampMs + ", amount=" + amount + ", currency=" + currency + ", mcc=" + mcc
            + ", country=" + country + ", channel=" + channel + ", device=" + Long.toUnsignedString(device)
            + ", merchant=" + merchant + ", ip=" + ip + ", email=" + email + ", features=" + features + "]";
    }

    /** Mutable builder; not thread-safe. */
    public static final class Builder {
        private long id;
        private long entity;
        private long timestampMs;
        private double amount;
        private String currency;
        private int mcc;
        private String country;
        private String channel;
        private long device;
        private String merchant;
        private String ip;
        private String email;
        private final List<Feature> features = new ArrayList<>();

        private Builder() {}

        public Builder id(long id) { this.id = id; return this; }
        public Builder entity(long entity) { this.entity = entity; return this; }
        public Builder timestampMs(long timestampMs) { this.timestampMs = timestampMs; return this; }

        /** Amount and ISO 4217 currency (required by the library). */
        public Builder amount(double amount, String currency) {
            this.amount = amount;
            this.currency = currency;
            return this;
        }

        /** Merchant category code, 0..65535 (0 = unset). */
        public Builder mcc(int mcc) {
            if (mcc < 0 || mcc > 0xFFFF) {
                throw new IllegalArgumentException("mcc " + mcc + " is outside 0..65535");
            }
            this.mcc = mcc;
            return this;
        }

        /** ISO 3166-1 alpha-2 country, null = unset. */
        public Builder country(String country) { this.country = country; return this; }
        /** "pos", "ecom", "atm", "moto" or "app"; null = unset. */
        public Builder channel(String channel) { this.channel = channel; return this; }
        public Builder device(long device) { this.device = device; return this; }
        /** Merchant or terminal id (an entity-state key); null = unset. */
        public Builder merchant(String merchant) { this.merchant = merchant; return this; }
        /** IP address (an entity-state key); null = unset. */
        public Builder ip(String ip) { this.ip = ip; return this; }
        /** E-mail address (an entity-state key; the library trims and lower-cases it); null = unset. */
        public Builder email(String email) { this.email = email; return this; }

        /** A numeric schema feature; NaN means missing. */
        public Builder feature(String name, double value) {
            return add(new Feature(name, value, null));
        }

        /** A categorical schema feature. */
        public Builder feature(String name, String category) {
            if (category == null) {
                throw new IllegalArgumentException("category of feature " + name + " is null (use missing(name) for a missing numeric feature)");
            }
            return add(new Feature(name, Double.NaN, category));
        }

        /** Marks a numeric feature as missing (NaN). */
        public Builder missing(String name) {
            return add(new Feature(name, Double.NaN, null));
        }

        private Builder add(Feature f) {
            features.add(f);
            return this;
        }

        public Transaction build() {
            return new Transaction(this);
        }
    }
}
