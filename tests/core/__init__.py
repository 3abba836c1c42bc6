"""The gateway core behind the façade: intake, policy, takeover, decisions, execution,
lanes, runs, plans, interlocks, quotas, federation."""
