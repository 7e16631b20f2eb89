"""The pipeline's stages, one module each (dvc.yaml runs `harness STAGE`; docs/contracts.md
lists every file). Each stage is a thin command: it reads the files named on its command line,
calls pure functions of `prh/` or `harness/`, and writes its outputs atomically, so an
interrupted stage leaves nothing DVC or the next stage would take as complete.
"""
