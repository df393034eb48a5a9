"""`read_ahead_bytes`: unset, a stream reads ahead only on remote storage, and a resume
prefetches its buffer either way; set, the number applies everywhere."""

from __future__ import annotations

import pytest

from bagel_data.errors import ConfigError
from bagel_data.schema.settings import READ_AHEAD_BYTES, Settings


def test_unset_reads_ahead_of_remote_streams_only():
    settings = Settings()
    assert settings.read_ahead_bytes is None
    assert settings.stream_read_ahead(remote=True) == READ_AHEAD_BYTES
    assert settings.stream_read_ahead(remote=False) == 0
    assert settings.resume_read_ahead == READ_AHEAD_BYTES  # local resumes rebuild on threads too


@pytest.mark.parametrize("value", [0, 1, 5 << 20])
def test_a_set_value_wins_everywhere(value):
    settings = Settings(read_ahead_bytes=value)
    assert settings.stream_read_ahead(remote=True) == value
    assert settings.stream_read_ahead(remote=False) == value
    assert settings.resume_read_ahead == value


def test_a_negative_budget_names_the_setting():
    with pytest.raises(ConfigError, match="read_ahead_bytes"):
        Settings(read_ahead_bytes=-1)
