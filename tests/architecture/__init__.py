"""The code's own rules, read from the source: import rules, public names."""
