"""The simulated bench (sim_instruments/)."""
