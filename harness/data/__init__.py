"""Checks on the data sets themselves: evaluation captions and images found in training
(contamination)."""
