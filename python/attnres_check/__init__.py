"""attnres-check's Python side.

  attnres_check.binding  how a Python entry point's parameters are bound to the AttnRes contract
  attnres_check.capture  captures a serving engine's AttnRes calls as case files
  attnres_check.pytest_plugin  the cases as pytest items (pytest --attnres-cases ...)

Importing the package imports none of them: attnres_check.capture wraps entry points as soon as it
is imported where ATTNRES_CAPTURE_DIR is set.
"""
