package dev.risk;

/** A reason code, its name ({@code risk_reason_name}) and its weight. */
public record Reason(int code, String name, float weight) {}
