"""Units of `llmcli.bench`: statistics, sweep parsing, the runner on a fake backend, traffic, bandwidth."""

from __future__ import annotations

import math
import os
import statistics
import threading
from types import SimpleNamespace

import pytest
from benchfake import FakeBackend

from llmcli.bench import membw, stats, sweep, traffic
from llmcli.bench.results import BenchRun
from llmcli.bench.runner import Options, context_sizes, run_interruptible, run_tests
from llmcli.errors import UsageError

# -- statistics ------------------------------------------------------------------------------


def test_mean_stdev_cv_match_the_standard_library():
    values = [71.2, 72.9, 70.4, 73.3, 72.0]
    assert stats.mean(values) == pytest.approx(statistics.fmean(values))
    assert stats.stdev(values) == pytest.approx(statistics.stdev(values))
    assert stats.cv(values) == pytest.approx(statistics.stdev(values) / statistics.fmean(values))
    assert stats.stdev([5.0]) == 0.0 and stats.mean([]) == 0.0 and stats.cv([0.0, 0.0]) == 0.0


@pytest.mark.parametrize(
    ("t", "df", "p"),
    [
        (2.228138852, 10, 0.05),  # Student's t tables, two-sided
        (12.70620474, 1, 0.05),
        (3.169272673, 10, 0.01),
        (2.776445105, 4, 0.05),
        (1.959963985, 1e9, 0.05),  # the normal limit
        (0.0, 7, 1.0),
    ],
)
def test_t_distribution_p_values(t, df, p):
    assert stats.t_two_sided_p(t, df) == pytest.approx(p, rel=1e-6, abs=1e-12)
    assert stats.t_two_sided_p(-t, df) == pytest.approx(p, rel=1e-6, abs=1e-12)


def test_welch_against_a_worked_example():
    # scipy.stats.ttest_ind(a, b, equal_var=False): t = 1.1428571, df = 6.4521330, p = 0.29372549
    a, b = [1, 2, 3, 4, 5], [2, 3, 4, 5, 9]
    w = stats.welch(a, b)
    assert w.t == pytest.approx(1.1428571428, rel=1e-9)
    assert w.df == pytest.approx(6.452133019, rel=1e-9)
    assert w.p_value == pytest.approx(0.29372549, rel=1e-6)
    assert not w.significant(0.05)


def test_welch_edge_cases():
    assert stats.welch([1.0], [1.0, 2.0]) is None
    same = stats.welch([5.0, 5.0], [5.0, 5.0])
    assert same.p_value == 1.0 and not same.significant(0.05)
    apart = stats.welch([5.0, 5.0], [6.0, 6.0])
    assert apart.p_value == 0.0 and apart.significant(0.05) and math.isinf(apart.t)
    clear = stats.welch([100, 101, 99, 100, 100.5], [110, 111, 109, 110, 110.5])
    assert clear.p_value < 1e-6


def test_incomplete_beta_identities():
    assert stats.betainc(1, 1, 0.3) == pytest.approx(0.3)  # uniform
    assert stats.betainc(2, 3, 0.4) + stats.betainc(3, 2, 0.6) == pytest.approx(1.0)
    assert stats.betainc(2, 2, 0.0) == 0.0 and stats.betainc(2, 2, 1.0) == 1.0


# -- sweep parsing ---------------------------------------------------------------------------


def test_lists_and_ranges():
    assert sweep.parse_ints("-p", ["128,256", "512-2048*2"], [1]) == [128, 256, 512, 1024, 2048]
    assert sweep.parse_ints("-t", ["1-4"], [1]) == [1, 2, 3, 4]
    assert sweep.parse_ints("-t", ["2-8+3"], [1]) == [2, 5, 8]
    assert sweep.parse_ints("-d", None, [0]) == [0]
    assert sweep.parse_ints("-p", ["64,64"], [1]) == [64]
    assert sweep.parse_ints("-p", [" 64 , 128 "], [1]) == [64, 128]


def test_pairs_flash_attention_cache_types_models():
    assert sweep.parse_pairs("-pg", ["512,128", "1024,256"]) == [(512, 128), (1024, 256)]
    with pytest.raises(UsageError, match="-pg: malformed value .512."):
        sweep.parse_pairs("-pg", ["512"])
    assert sweep.parse_flash_attn("-fa", ["0,1,auto"]) == [False, True, None]
    with pytest.raises(UsageError, match="expected 0, 1 or auto"):
        sweep.parse_flash_attn("-fa", ["maybe"])
    assert sweep.parse_cache_types("-ctk", ["F16,q8_0"]) == ["f16", "q8_0"]
    with pytest.raises(UsageError, match="unknown KV cache type 'q3'"):
        sweep.parse_cache_types("-ctk", ["q3"])
    assert sweep.parse_models(None) == [None]
    assert sweep.parse_models(["a.gguf,b.gguf", "a.gguf"]) == ["a.gguf", "b.gguf"]


def test_test_names_match_llama_bench():
    assert sweep.TestSpec(512, 0).name == "pp512"
    assert sweep.TestSpec(0, 128).name == "tg128"
    assert sweep.TestSpec(512, 128).name == "pp512+tg128"
    assert sweep.TestSpec(512, 0, 4096).name == "pp512 @ d4096"
    assert sweep.TestSpec(512, 128, 4096).context_needed == 4736


def test_expand_orders_for_sharing():
    s = sweep.Sweep(models=["m"], n_prompt=[8, 0], n_gen=[4], pg=[(2, 1)], depth=[0, 16], threads=[1, 2])
    cases = sweep.expand(s)
    assert [(c.context.n_threads, c.test.name) for c in cases] == [
        (t, name)
        for t in (1, 2)
        for name in ("pp8", "tg4", "pp2+tg1", "pp8 @ d16", "tg4 @ d16", "pp2+tg1 @ d16")
    ]


def test_ubatch_is_capped_at_the_batch():
    s = sweep.Sweep(n_batch=[128, 1024], n_ubatch=[512])
    assert [(c.n_batch, c.n_ubatch) for c in s.contexts()] == [(128, 128), (1024, 512)]


# -- the runner ------------------------------------------------------------------------------


def _setup(backend: FakeBackend, **kw):
    s = sweep.Sweep(models=["m.gguf"], threads=[1], **kw)
    cases = sweep.expand(s)
    models = {"m.gguf": backend.inspect("m.gguf", "m")}
    return cases, models, BenchRun({}, {}, len(cases), "now")


def test_runner_times_only_the_measured_part():
    backend = FakeBackend(pp_ns=2_000_000.0, tg_ns=20_000_000.0)
    cases, models, run = _setup(backend, n_prompt=[100], n_gen=[10], depth=[50])
    run_tests(cases, models, backend, run, Options(reps=3))
    pp, tg = run.results
    assert pp.timing.samples_ns == [200_000_000] * 3  # the depth fill is not timed
    assert tg.timing.samples_ns == [200_000_000] * 3
    assert pp.timing.avg_ts == pytest.approx(500.0) and tg.timing.avg_ts == pytest.approx(50.0)
    assert backend.depth_fills == [50]
    assert run.complete and run.finished_at


def test_runner_stops_between_runs_when_asked():
    backend = FakeBackend()
    cases, models, run = _setup(backend, n_prompt=[8], n_gen=[4])
    stop = threading.Event()
    stop.set()
    run_tests(cases, models, backend, run, Options(reps=2), stop=stop)
    assert run.results == [] and run.interrupted and not run.complete


def test_ctrl_c_sets_stop_and_interrupts_the_backend():
    import _thread

    backend = FakeBackend()

    def work(stop):
        threading.Timer(0.2, _thread.interrupt_main).start()  # Ctrl-C reaches the main thread
        return "stopped" if stop.wait(10) else "ran on"

    assert run_interruptible(work, backend) == "stopped"
    assert backend.interrupted


def test_ctrl_c_goes_through_the_engines_wakeup_fd_watcher(monkeypatch):
    """The same mechanism as generate: `signals.interrupt_on_sigint` and its `SignalWatcher`."""
    import _thread

    from llmcli import signals

    watchers = []
    real = signals.SignalWatcher

    def watcher(on_signal):
        watchers.append(real(on_signal))
        return watchers[-1]

    monkeypatch.setattr(signals, "SignalWatcher", watcher)
    backend = FakeBackend()

    def work(stop):
        threading.Timer(0.2, _thread.interrupt_main).start()
        return "stopped" if stop.wait(10) else "ran on"

    assert run_interruptible(work, backend) == "stopped" and backend.interrupted
    assert len(watchers) == 1 and watchers[0].thread is not None  # the helper thread on the wakeup fd


def test_a_second_ctrl_c_raises_at_once():
    import _thread
    import time

    def work(stop):
        _thread.interrupt_main()  # the first: sets stop, raises nothing
        assert stop.wait(10)
        _thread.interrupt_main()  # the second
        time.sleep(10)

    started = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run_interruptible(work, FakeBackend())
    assert time.perf_counter() - started < 5


def test_a_second_ctrl_c_inside_the_runner_is_not_swallowed():
    backend = FakeBackend(interrupt_at=1)  # KeyboardInterrupt during the first (warm-up) run
    cases, models, run = _setup(backend, n_prompt=[8], n_gen=[4])
    stop = threading.Event()
    first = lambda event: stop.set()  # noqa: E731 - the first Ctrl-C arrived before the warm-up
    with pytest.raises(KeyboardInterrupt):
        run_tests(cases, models, backend, run, Options(reps=2), first, stop)
    backend = FakeBackend(interrupt_at=1)
    cases, models, run = _setup(backend, n_prompt=[8], n_gen=[4])
    run_tests(cases, models, backend, run, Options(reps=2), stop=threading.Event())
    assert run.interrupted and not run.complete  # without a first one, it is the run's Ctrl-C


def test_worker_errors_reach_the_caller():
    def work(stop):
        raise UsageError("boom")

    with pytest.raises(UsageError, match="boom"):
        run_interruptible(work, FakeBackend())
    assert run_interruptible(lambda stop: 42, FakeBackend()) == 42


def test_context_sizes_round_up_and_refuse_overflow():
    backend = FakeBackend(n_ctx_train=1024)
    cases, models, _ = _setup(backend, n_prompt=[300], n_gen=[10], depth=[0, 200])
    assert set(context_sizes(cases, models, None).values()) == {512}
    assert set(context_sizes(cases, models, 2000).values()) == {2000}
    with pytest.raises(UsageError, match=r"pp300 @ d200 needs 500 tokens .* but --ctx-size is 400"):
        context_sizes(cases, models, 400)
    cases, models, _ = _setup(backend, n_prompt=[300], n_gen=[0], depth=[800])
    with pytest.raises(UsageError, match="was trained with 1024"):
        context_sizes(cases, models, None)


# -- traffic and bandwidth -------------------------------------------------------------------


def _header(tensors, metadata=None, arch="llama"):
    meta = {"general.architecture": arch, **(metadata or {})}
    return SimpleNamespace(
        tensors=[SimpleNamespace(name=n, n_bytes=b, shape=s) for n, b, s in tensors],
        architecture=arch,
        get_int=lambda key: meta.get(key),
    )


def test_tied_embeddings_are_read_whole():
    header = _header([("token_embd.weight", 1000, (10, 100)), ("blk.0.ffn_up.weight", 500, (10, 50))])
    assert traffic.weight_bytes_per_token(header) == 1500


def test_separate_output_reads_one_embedding_row():
    header = _header([("token_embd.weight", 1000, (10, 100)), ("output.weight", 1000, (10, 100)),
                      ("blk.0.ffn_up.weight", 500, (10, 50))])  # fmt: skip
    assert traffic.weight_bytes_per_token(header) == 1000 + 500 + 10


def test_experts_count_by_routing():
    header = _header(
        [("blk.0.ffn_up_exps.weight", 800, (10, 8)), ("blk.0.attn_q.weight", 100, (10, 10))],
        {"qwen3moe.expert_used_count": 2, "qwen3moe.expert_count": 8},
        arch="qwen3moe",
    )
    assert traffic.weight_bytes_per_token(header) == 200 + 100


def test_effective_bandwidth_and_roofline():
    assert traffic.effective_gbps(246_587_904, 72.0) == pytest.approx(17.754, rel=1e-3)
    assert traffic.roofline_fraction(10.0, 20.0) == 0.5
    assert traffic.roofline_fraction(None, 20.0) is None and traffic.roofline_fraction(1.0, None) is None


def test_bandwidth_probe_runs_on_a_small_buffer():
    bw = membw.measure(threads=2, buffer_bytes=1 << 20, reps=2)
    assert bw.read_gbps > 0 and bw.copy_gbps > 0
    assert bw.threads == 2 and bw.reps == 2 and bw.buffer_bytes <= 1 << 20
    assert set(bw.as_dict()) == {"read_gbps", "copy_gbps", "threads", "buffer_bytes", "reps", "method"}


# -- machine load ----------------------------------------------------------------------------


def test_other_share_subtracts_our_own_cpu_time():
    from llmcli.engine.cpu_load import Snapshot, other_share

    ticks = os.sysconf("SC_CLK_TCK")
    before = Snapshot(busy=1000, total=4000, own=1.0)
    after = Snapshot(
        busy=1000 + 300, total=4000 + 1000, own=1.0 + 100 / ticks
    )  # we used 100 of 300 busy ticks
    assert other_share(before, after) == pytest.approx(0.2)
    assert other_share(before, None) is None and other_share(after, before) is None
    idle = Snapshot(busy=1000 + 100, total=5000, own=1.0 + 150 / ticks)  # clock granularity: never below 0
    assert other_share(before, idle) == 0.0


def test_snapshot_reads_proc_stat():
    from llmcli.engine.cpu_load import snapshot

    snap = snapshot()
    if os.path.exists("/proc/stat"):
        assert snap is not None and snap.total >= snap.busy > 0
