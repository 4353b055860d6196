"""`--parallel auto`'s probe (engine/batched.py `measure_knee`): past 16 sequences only while the
aggregate speed still rises by more than the noise, and never past what the items and memory hold.
The measured steps are replaced by a curve here; tests/test_batch.py runs the real probe."""

from __future__ import annotations

import pytest

from llmcli.engine import batched


def _curve(speed_of):
    calls = []

    def probe(engine, sizes):
        calls.append(tuple(sizes))
        return {n: speed_of(n) for n in sizes}

    return probe, calls


def test_a_speed_still_rising_at_16_explores_32_and_64(monkeypatch):
    probe, calls = _curve(lambda n: 100.0 * n ** 0.8)  # every doubling pays 74%
    monkeypatch.setattr(batched, "_probe", probe)
    n, speeds = batched.measure_knee(None, batched.PROBE_SIZES, batched.PROBE_MORE)
    assert calls == [batched.PROBE_SIZES, (16, 32), (32, 64)]
    assert sorted(speeds) == [1, 2, 4, 8, 16, 32, 64]
    assert n == 64 and speeds[64] == pytest.approx(100.0 * 64 ** 0.8)


def test_a_flat_curve_stops_at_16(monkeypatch):
    probe, calls = _curve(lambda n: 100.0 * min(n, 8) + n)  # past 8: no more than noise
    monkeypatch.setattr(batched, "_probe", probe)
    n, speeds = batched.measure_knee(None, batched.PROBE_SIZES, batched.PROBE_MORE)
    assert calls == [batched.PROBE_SIZES]
    assert n == 8 and 32 not in speeds


def test_a_rise_that_stops_at_32_goes_no_further(monkeypatch):
    probe, calls = _curve(lambda n: 100.0 * min(n, 32))
    monkeypatch.setattr(batched, "_probe", probe)
    n, speeds = batched.measure_knee(None, batched.PROBE_SIZES, (32, 64))
    assert calls == [batched.PROBE_SIZES, (16, 32), (32, 64)]
    assert n == 32  # 64 measured, no faster: the smallest N within the knee of the best


def test_more_is_only_what_the_items_and_memory_hold(monkeypatch):
    seen = {}

    def knee(engine, sizes, more=()):
        seen["more"] = more
        return max(sizes), {n: float(n) for n in sizes}

    monkeypatch.setattr(batched, "measure_knee", knee)
    monkeypatch.setattr(batched, "_made", lambda engine, n, how, per_seq=None: (object(), n, how))

    class Engine:
        n_ctx = 512

    for items, room, expected in ((100, None, (32, 64)), (40, None, (32,)), (100, 40, (32,)), (12, None, ())):
        batched.respond_many(Engine(), None, items, room=room)
        assert seen.pop("more", ()) == expected, (items, room)
