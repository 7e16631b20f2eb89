"""Estimators: bootstrap intervals over test pairs, seed spreads, the seeds x test pairs model
(TwoLevel), and the per-arm summaries of epoch curves."""
