"""The method of Balestriero & LeCun (2026), "Proving and Improving the Platonic
Representation Hypothesis with JEPAs": text encoders trained with good views, bad views or
next-token prediction, frozen image embeddings, alignment metrics and the theory module.

`prh` never imports `harness`; it holds no global state and no file-layout policy.
"""

__version__ = "0.1.0"
