"""Pytest plugin exposing the scripted LLM server as the ``llm_server`` fixture.

Why a plugin module and not conftest code: conftest.py has another owner; registering this
module with ``pytest_plugins = ["tests.fakellm_fixtures"]`` keeps the fixture in one place.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakellm import ScriptedLLM


@pytest.fixture
def llm_server() -> Iterator[ScriptedLLM]:
    """A fresh scripted OpenAI-compatible server on a free 127.0.0.1 port, stopped after the test."""
    server = ScriptedLLM().start()
    try:
        yield server
    finally:
        server.stop()
