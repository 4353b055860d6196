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


class _Binding:
    @staticmethod
    def llama_print_system_info() -> bytes:
        return b"CPU : AVX2 = 1 | "


def _engine(tmp_path, threads: int = 2):
    from llmcli.engine.speculation.exact import MeasuredStore
    from llmcli.params import EngineOptions

    model = tmp_path / "model.gguf"
    if not model.exists():
        model.write_bytes(b"GGUF" + bytes(4096))

    class Engine:
        n_ctx = 512
        adaptive = False

    engine = Engine()
    engine.threads = threads
    engine.measured = MeasuredStore(_Binding, model, EngineOptions(), gpu_layers=0, repack=True)
    return engine


def _auto_runs(monkeypatch, other_share: float | None):
    """`respond_many(auto)` with the probe replaced by a curve and the machine's other load fixed;
    returns a function running it once: (N, how, the probe's calls)."""
    from llmcli.engine import cpu_load

    monkeypatch.setattr(cpu_load, "other_share", lambda before, after: other_share)
    monkeypatch.setattr(batched, "_made", lambda engine, n, how, per_seq=None: (object(), n, how))

    def run(engine, items: int = 100):
        probe, calls = _curve(lambda n: 100.0 * min(n, 8))  # flat past 8: the knee is 8
        monkeypatch.setattr(batched, "_probe", probe)
        many = batched.respond_many(engine, None, items)
        return many.n, many.how, calls

    return run


def test_auto_stores_what_it_measured_and_a_later_run_takes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMCLI_CACHE_DIR", str(tmp_path / "cache"))
    run = _auto_runs(monkeypatch, other_share=0.02)
    n, how, calls = run(_engine(tmp_path))
    assert n == 8 and calls == [batched.PROBE_SIZES] and how.startswith("auto: measured tok/s by N 1: 100")
    n, how, calls = run(_engine(tmp_path))
    assert n == 8 and calls == []  # nothing measured: the stored speeds
    assert how == "auto: tok/s by N 1: 100, 2: 200, 4: 400, 8: 800, 16: 800, measured by an earlier run here"
    n, _, calls = run(_engine(tmp_path, threads=1))  # other settings: measured again
    assert calls == [batched.PROBE_SIZES]
    _, _, calls = run(_engine(tmp_path), items=6)  # other sizes (1, 2, 4): measured again
    assert calls == [(1, 2, 4)]


def test_a_probe_on_a_busy_machine_is_not_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMCLI_CACHE_DIR", str(tmp_path / "cache"))
    run = _auto_runs(monkeypatch, other_share=0.4)  # another process used 40% of the CPU
    for _ in range(2):
        _, how, calls = run(_engine(tmp_path))
        assert calls == [batched.PROBE_SIZES] and how.startswith("auto: measured")
    assert not list((tmp_path / "cache").rglob("*.json"))
