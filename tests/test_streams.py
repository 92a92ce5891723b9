"""Seed streams are registered once (zofl/streams.py): a duplicate value fails at import, every module's
STREAM_* constant is a registered stream, and availability no longer draws the attack's numbers."""
import importlib
import pkgutil

import numpy as np
import pytest

import zofl
from zofl import streams
from zofl.algorithms.smoothing import seed_sequence


def test_a_value_registered_twice_is_refused():
    with pytest.raises(ValueError, match="0x2 is registered twice"):
        streams.stream(2, "another purpose")
    assert streams.STREAMS[2] == "client minibatches (every method)"  # the first registration stands


def test_a_new_stream_is_registered_with_its_purpose(monkeypatch):
    monkeypatch.setattr(streams, "STREAMS", dict(streams.STREAMS))  # the registry as it was after the test
    assert streams.stream(0xBEEF, "a test's draws") == 0xBEEF
    assert streams.STREAMS[0xBEEF] == "a test's draws"
    with pytest.raises(ValueError, match="0xbeef is registered twice: \"a test's draws\" and 'again'"):
        streams.stream(0xBEEF, "again")


def test_every_module_stream_constant_is_registered_and_purposes_are_distinct():
    found = {}
    for info in pkgutil.walk_packages(zofl.__path__, "zofl."):
        if info.name.startswith(("zofl.tasks.torch", "zofl.tasks.relunet")):  # torch: not needed for the constants
            continue
        mod = importlib.import_module(info.name)
        for name, value in vars(mod).items():
            if name.startswith("STREAM_") and isinstance(value, int):
                found[f"{info.name}.{name}"] = value
    assert len(found) >= 15
    unregistered = {k: hex(v) for k, v in found.items() if v not in streams.STREAMS}
    assert not unregistered
    assert len(set(streams.STREAMS.values())) == len(streams.STREAMS)


def test_availability_and_attack_draw_different_numbers():
    """They shared 0x73 with the same words (seed, task or round, client): a hostile client's attack signs
    were its availability draws. Now each has its own stream."""
    assert streams.AVAILABILITY != streams.ATTACK
    from zofl.core.sampling import STREAM_AVAILABILITY
    from zofl.faults import STREAM_ATTACK
    assert (STREAM_AVAILABILITY, STREAM_ATTACK) == (0x75, 0x73)
    a = np.random.default_rng(seed_sequence(0, 5, 1, STREAM_AVAILABILITY)).random(8)
    b = np.random.default_rng(seed_sequence(0, 5, 1, STREAM_ATTACK)).random(8)
    assert not np.allclose(a, b)
