"""The memory quality harness (``make eval-model``): scripted user scenarios against real models.

Not part of the installed package: it needs only what the core install has, and runs from a
checkout (``python -m bench.quality``). ``tests/test_quality_harness.py`` runs the same scenarios
against the scripted model server so the harness cannot rot.
"""
