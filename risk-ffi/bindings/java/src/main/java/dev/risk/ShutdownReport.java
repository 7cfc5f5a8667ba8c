package dev.risk;

/** What {@link RiskEngine#shutdown} did with the queued deep-tier work. */
public record ShutdownReport(long drained, long abandoned) {}
