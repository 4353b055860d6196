"""`llmcli bench --scenario spec` on the fake backend and FakeEngine (scripted acceptance: every
target pass drafts k tokens and accepts 2 of them), with an injected clock."""

from __future__ import annotations

import csv
import io
import json

import pytest
from benchfake import FakeBackend, FakeClock
from helpers import bench_in, run

from llmcli import defaults
from llmcli.engine.fake import FakeEngine

ACCEPT = 2  # FakeEngine.spec_accept


@pytest.fixture
def backend(monkeypatch, tmp_path):
    fake = FakeBackend(clock=FakeClock(step_ns=1_000_000))  # every clock read is 1 ms later
    return bench_in(tmp_path, monkeypatch, fake, ("a.gguf", "b.gguf", "draft.gguf", "other.gguf"))


def _bench(*args: str) -> dict:
    result = run("bench", "--scenario", "spec", "-t", "1", "-o", "json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _table(stdout: str) -> list[list[str]]:
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for i, line in enumerate(lines) if i != 1]


def test_default_is_plain_then_prompt_lookup_with_counts_per_repetition(backend):
    doc = _bench("-n", "12", "-r", "2")
    k = defaults.SPEC_DRAFT_N_MAX
    plain, lookup = doc["results"]
    assert [r["test"] for r in doc["results"]] == ["spec plain tg12", f"spec lookup k={k} tg12"]
    assert plain["spec_type"] == "none" and plain["spec_draft_n_max"] == 0
    assert plain["drafted"] == [0, 0] and plain["accepted"] == [0, 0] and plain["acceptance"] is None
    assert plain["vs_plain"] is None and plain["text_matches_plain"] is None
    passes = -(-12 // (ACCEPT + 1))  # each pass gives the accepted tokens and one of the target's
    assert lookup["completion_tokens"] == [12, 12]
    assert lookup["target_passes"] == [passes, passes]
    assert lookup["drafted"] == [k * passes] * 2 and lookup["accepted"] == [ACCEPT * passes] * 2
    assert lookup["acceptance"] == pytest.approx(ACCEPT / k)
    assert lookup["tokens_per_pass"] == pytest.approx(12 / passes)
    assert plain["target_passes"] == plain["completion_tokens"]  # one pass a token
    assert plain["tokens_per_pass"] == 1.0
    assert lookup["k_chosen"] == {str(k): 2 * passes} and lookup["mean_k"] == k
    settings = {k: lookup[k] for k in ("spec_draft_n_min", "spec_ngram_max", "spec_ngram_min",
                                       "spec_adaptive", "spec_exact", "model_draft")}  # fmt: skip
    assert settings == {"spec_draft_n_min": 1, "spec_ngram_max": 4, "spec_ngram_min": 1,
                        "spec_adaptive": True, "spec_exact": False, "model_draft": None}  # fmt: skip
    assert lookup["exact_positions"] is None  # only with --spec-exact
    assert lookup["text_matches_plain"] is True
    # one clock read between building the prompt and the first token, then one per token
    assert all(r["samples_ttft_ns"] == [1_000_000, 1_000_000] for r in doc["results"])
    assert all(r["samples_ts"] == [1000.0, 1000.0] for r in doc["results"])
    assert lookup["vs_plain"] == 1.0
    assert doc["settings"]["scenario"] == "spec" and doc["settings"]["prompt"] == "default"
    assert "The same file again, unchanged:" in doc["settings"]["prompt_text"]
    # greedy, the length asked, the cache cleared before every run (warm-up + 2 per case)
    engine_plain, engine_lookup = backend.engines
    assert engine_plain.options.speculative.enabled is False
    assert engine_lookup.options.speculative.kind == "lookup"
    for engine in backend.engines:
        assert len(engine.history) == 3
        assert all(r.params.temperature == 0 and r.params.max_tokens == 12 for r in engine.history)
        assert all(r.cached_tokens == 0 for r in engine.history)
        assert "The same file again, unchanged:" in engine.history[0].prompt


def test_vs_plain_is_against_the_plain_case_with_the_same_length(backend, monkeypatch):
    original = FakeEngine.stream

    def stream(self, prompt, params):  # plain decoding takes 3 ms per token, speculation 1 ms
        for event in original(self, prompt, params):
            if type(event).__name__ == "Token" and not self.options.speculative.enabled:
                backend.clock.advance(2_000_000)
            yield event

    monkeypatch.setattr(FakeEngine, "stream", stream)
    doc = _bench("-n", "4,8", "-r", "1", "--spec-draft-n-max", "4")
    rows = {r["test"]: r for r in doc["results"]}
    assert list(rows) == ["spec plain tg4", "spec plain tg8", "spec lookup k=4 tg4", "spec lookup k=4 tg8"]
    for n in (4, 8):
        plain, spec = rows[f"spec plain tg{n}"], rows[f"spec lookup k=4 tg{n}"]
        assert spec["vs_plain"] == pytest.approx(spec["avg_ts"] / plain["avg_ts"], rel=1e-4)
        assert spec["vs_plain"] == pytest.approx(3.0, rel=0.02)


def test_sweep_expands_like_the_other_flags_and_k_0_is_the_plain_case(backend):
    doc = _bench("-n", "6", "-r", "1", "--no-warmup", "--spec-draft-n-max", "0,2-6+2",
                 "--spec-adaptive", "0,1", "--spec-exact", "0,1")  # fmt: skip
    rows = doc["results"]
    assert len(rows) == 1 + 3 * 2 * 2
    assert rows[0]["test"] == "spec plain tg6"
    points = [(r["spec_draft_n_max"], r["spec_adaptive"], r["spec_exact"]) for r in rows[1:]]
    assert points == [(k, a, e) for k in (2, 4, 6) for a in (False, True) for e in (False, True)]
    assert len({r["test"] for r in rows}) == len(rows)
    assert "spec lookup k=2 fixed tg6" in {r["test"] for r in rows}
    assert doc["settings"]["sweep"]["spec_draft_n_max"] == [0, 2, 4, 6]
    assert doc["planned"] == doc["finished"] == len(rows)
    # k = 0 with a proposer is the plain case, measured once
    assert [r["spec_type"] for r in rows].count("none") == 1


def test_ngram_lengths_draft_min_and_generate_style_off_flags(backend):
    doc = _bench("-n", "6", "-r", "1", "--spec-draft-n-max", "2,4", "--spec-draft-n-min", "3",
                 "--spec-ngram-max", "2,4", "--spec-ngram-min", "3", "--no-spec-adaptive",
                 "--no-spec-exact")  # fmt: skip
    rows = doc["results"][1:]
    # n-gram min 3 > max 2 is left out; n-min is capped at k
    assert [(r["spec_draft_n_max"], r["spec_draft_n_min"], r["spec_ngram_max"]) for r in rows] == [
        (2, 2, 4), (4, 3, 4)
    ]  # fmt: skip
    assert all(r["spec_adaptive"] is False and r["spec_exact"] is False for r in rows)
    assert all(r["exact_positions"] is None for r in rows)


def test_table_and_progress(backend):
    result = run("bench", "--scenario", "spec", "-n", "6", "-t", "1", "-r", "1", "--spec-draft-n-max", "4")
    assert result.exit_code == 0, result.stderr
    table = _table(result.stdout)
    assert table[0] == ["model", "threads", "n_gen", "spec", "k", "adaptive", "exact", "prompt", "ttft ms",
                        "pp t/s", "t/s", "vs plain", "drafted", "accepted", "accept", "tok/pass", "k used",
                        "= plain"]  # fmt: skip
    plain, lookup = table[1:]
    assert plain[:7] == ["fake 2M Q4_K_M", "1", "6", "plain", "", "", ""]
    assert plain[11:] == ["", "", "", "", "", "", ""]
    assert lookup[:7] == ["fake 2M Q4_K_M", "1", "6", "lookup", "4", "1", "0"]
    assert lookup[10:] == ["1000.00 ± 0.00", "1.00x", "8", "4", "50%", "3.00", "4.0", "yes"]
    assert "prompt: the built-in copy-heavy prompt (through the chat template), greedy" in result.stdout
    assert result.stderr.splitlines() == [
        "llmcli bench: [1/2] spec plain tg6: 1000.00 ± 0.00 t/s",
        "llmcli bench: [2/2] spec lookup k=4 tg6: 1000.00 ± 0.00 t/s (1.00x plain), accepted 4/8 (50%)",
    ]


def test_draft_model_columns_and_record(backend):
    doc = _bench("-n", "6", "-r", "1", "-md", "draft.gguf", "-cd", "512", "--spec-draft-n-max", "3")
    plain, draft = doc["results"]
    assert plain["spec_type"] == "none" and draft["spec_type"] == "draft"
    assert draft["model_draft"] == "draft.gguf" and draft["model_draft_path"].endswith("draft.gguf")
    assert draft["n_ctx_draft"] == 512 and draft["spec_ngram_max"] is None
    assert draft["test"] == "spec draft k=3 tg6"
    spec = backend.engines[1].options.speculative
    assert spec.kind == "draft" and spec.model_draft.endswith("draft.gguf") and spec.ctx_size_draft == 512
    table = _table(run("bench", "--scenario", "spec", "-n", "6", "-r", "1", "-md", "draft.gguf").stdout)
    assert "draft" in table[0] and table[2][table[0].index("draft")] == "draft.gguf"
    doc = _bench("-n", "6", "-r", "1", "--spec-draft-model", "draft.gguf", "--spec-draft-ngl", "0")
    assert doc["results"][1]["model_draft"] == "draft.gguf" and doc["results"][1]["spec_type"] == "draft"
    assert backend.engines[-1].options.speculative.gpu_layers_draft == 0


def test_prompt_and_prompt_file(backend, tmp_path):
    doc = _bench("-n", "4", "-r", "1", "--prompt", "copy this: abc abc abc")
    assert doc["settings"]["prompt"] == "--prompt" and doc["results"][0]["prompt"] == "--prompt"
    assert "copy this: abc abc abc" in backend.engines[0].history[0].prompt
    (tmp_path / "p.txt").write_text("from a file\n", encoding="utf-8")
    doc = _bench("-n", "4", "-r", "1", "-f", "p.txt")
    assert doc["settings"]["prompt"] == "p.txt"
    assert _bench("-n", "4", "-r", "1", "--file", "p.txt")["settings"]["prompt"] == "p.txt"
    assert "from a file" in backend.engines[-1].history[0].prompt


def test_csv_jsonl_and_compare(backend, tmp_path):
    args = ("bench", "--scenario", "spec", "-n", "6", "-t", "1", "-r", "2", "--spec-draft-n-max", "2,4")
    rows = list(csv.DictReader(io.StringIO(run(*args, "-o", "csv").stdout)))
    assert [r["test"] for r in rows] == ["spec plain tg6", "spec lookup k=2 tg6", "spec lookup k=4 tg6"]
    assert json.loads(rows[1]["k_chosen"]) == {"2": 4} and rows[1]["spec_type"] == "lookup"
    lines = run(*args, "-o", "jsonl").stdout.splitlines()
    assert [json.loads(line)["drafted"] for line in lines] == [[0, 0], [4, 4], [8, 8]]
    (tmp_path / "old.json").write_text(run(*args, "-o", "json").stdout)
    (tmp_path / "new.json").write_text(run(*args, "-o", "json").stdout)
    result = run("bench", "compare", "old.json", "new.json", "-o", "json")
    assert result.exit_code == 0, result.stderr
    compared = json.loads(result.stdout)["comparisons"]
    assert [c["test"] for c in compared] == ["spec plain tg6", "spec lookup k=2 tg6", "spec lookup k=4 tg6"]
    assert all(c["ratio"] == 1.0 for c in compared)
    assert [(c["old_acceptance"], c["new_acceptance"]) for c in compared] == [(None, None), (1.0, 1.0),
                                                                             (0.5, 0.5)]  # fmt: skip
    table = _table(run("bench", "compare", "old.json", "new.json").stdout)
    assert table[0][-2:] == ["old accept", "new accept"] and table[3][-2:] == ["50%", "50%"]


def test_ctrl_c_keeps_finished_cases(backend, monkeypatch):
    original = FakeEngine.stream
    calls = []

    def stream(self, prompt, params):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        yield from original(self, prompt, params)

    monkeypatch.setattr(FakeEngine, "stream", stream)
    result = run("bench", "--scenario", "spec", "-n", "4", "-t", "1", "-r", "1", "-o", "json")
    assert result.exit_code == 130
    doc = json.loads(result.stdout)
    assert doc["complete"] is False and doc["planned"] == 2 and doc["finished"] == 1
    assert doc["results"][0]["test"] == "spec plain tg4"


def test_an_error_after_some_cases_keeps_what_finished(backend, monkeypatch):
    """A later case that cannot run (its draft model's context does not fit, say) ends the run
    with its own error and exit code, after the finished results are written, marked incomplete."""
    from llmcli.errors import LlmcliError

    real, made = backend.chat_engine, []

    def chat_engine(model, options):
        made.append(options)
        if len(made) == 2:
            raise LlmcliError("llama.cpp could not create the draft model's context of 1100000 tokens")
        return real(model, options)

    monkeypatch.setattr(backend, "chat_engine", chat_engine)
    result = run("bench", "--scenario", "spec", "-n", "4", "-t", "1", "-r", "1", "-o", "json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["complete"] is False and doc["finished"] == 1 and doc["planned"] == 2
    assert doc["results"][0]["test"] == "spec plain tg4"
    assert result.stderr.splitlines()[-2:] == [
        "llmcli: warning: stopped: 1 of 2 results finished; they are marked incomplete",
        "llmcli: error: llama.cpp could not create the draft model's context of 1100000 tokens",
    ]

    def no_room(model, options):
        raise LlmcliError("no room")

    monkeypatch.setattr(backend, "chat_engine", no_room)
    result = run("bench", "--scenario", "spec", "-n", "4", "-t", "1", "-r", "1", "-o", "json")
    assert result.exit_code == 1 and result.stdout == ""  # nothing finished: the error alone
    assert result.stderr.strip().splitlines() == ["llmcli: error: no room"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--spec-draft-n-max", "-1"), "--spec-draft-n-max must be >= 0, got -1"),
        (("--spec-draft-n-max", "65"), "--spec-draft-n-max must be in [0, 64], got 65"),
        (("--spec-draft-n-max", "4,x"), "--spec-draft-n-max: malformed value 'x'"),
        (("--spec-type", "lookahead"), "--spec-type must be one of none, lookup, draft"),
        (("--spec-type", "draft"), "--spec-type draft needs a draft model: -md/--model-draft REF"),
        (("--spec-type", "lookup", "-md", "draft.gguf"), "-md/--model-draft is given but --spec-type"),
        (("-cd", "512"), "-ngld, -cd, -ctkd and -ctvd set up the draft model: give it with -md"),
        (("-md", "draft.gguf", "-cd", "-1"), "-cd/--ctx-size-draft must be >= 0 (0: the target's), got -1"),
        (("--spec-adaptive", "2"), "--spec-adaptive: expected 0 or 1 (a comma list sweeps), got '2'"),
        (("--spec-exact", "1", "--no-spec-exact"), "give --spec-exact or --no-spec-exact, not both"),
        (("--spec-ngram-max", "2", "--spec-ngram-min", "3"), "--spec-ngram-min must not exceed"),
        (("--spec-draft-n-max", "0,4", "--spec-draft-n-min", "6"), "--spec-draft-n-min 6 exceeds every"),
        (("--spec-ngram-max", "17"), "--spec-ngram-max must be in [1, 16], got 17"),
        (("-f", "missing.txt"), "cannot read missing.txt: No such file or directory"),
        (("--prompt", "x", "-f", "p.txt"), "give --prompt or -f/--file, not both"),
        (("--prompt", "  "), "--prompt is empty"),
        (("-p", "512"), "-p, -pg and -d do not apply to --scenario spec"),
        (("-n", "0"), "--scenario spec needs an answer length: -n must be >= 1"),
        (("-md", "nowhere.gguf"), "draft model: no such model file: nowhere.gguf"),  # resolved like -m
        (("-md", "other.gguf"), "the draft model other.gguf does not share the vocabulary of a.gguf"),
    ],
)
def test_bad_input_is_one_line_before_anything_runs(backend, args, message):
    backend.foreign_vocab = {"other.gguf"}
    length = () if "-n" in args else ("-n", "4")
    result = run("bench", "--scenario", "spec", *length, "-r", "1", *args)
    assert result.exit_code == (3 if "nowhere.gguf" in message else 2), result.stderr  # 3: model not found
    assert message in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert backend.engines == []  # nothing loaded, nothing measured


def test_spec_flags_belong_to_the_spec_scenario(backend):
    result = run("bench", "-n", "4", "--spec-draft-n-max", "4", "--no-spec-exact")
    assert result.exit_code == 2
    assert "--spec-draft-n-max, --no-spec-exact: only for --scenario spec" in result.stderr
    result = run("bench", "-m", "http://127.0.0.1:9/v1#m", "--spec-type", "lookup")
    assert result.exit_code == 2
    assert "--spec-type: not for a served model" in result.stderr
    assert backend.engines == []


def test_a_prompt_longer_than_the_context_is_refused_before_measuring(backend):
    result = run("bench", "--scenario", "spec", "-n", "64", "-r", "1", "--ctx-size", "100")
    assert result.exit_code == 2
    assert "do not fit the context of 100 tokens" in result.stderr
    assert all(engine.history == [] for engine in backend.engines)


def test_footer_says_when_spec_exact_caps_k(backend, monkeypatch):
    original = FakeEngine._decode

    def decode(self, reply, params, stats):
        for event in original(self, reply, params, stats):
            if type(event).__name__ == "Done" and event.stats.speculative:
                event.stats.speculative["exact_positions"] = {"short": 3, "long": 1}
            yield event

    monkeypatch.setattr(FakeEngine, "_decode", decode)
    result = run("bench", "--scenario", "spec", "-n", "6", "-t", "1", "-r", "1", "--spec-exact", "0,1")
    assert result.exit_code == 0, result.stderr
    notes = [line for line in result.stdout.splitlines() if line.startswith("--spec-exact:")]
    assert len(notes) == 1
    assert "at most 3 positions" in notes[0] and "so k is capped at 2 / 0" in notes[0]


def test_markdown_delimiter_cells_are_valid_for_one_character_columns():
    from llmcli.render.tables import markdown

    table = markdown(["k", "t/s"], [["8", "1.0"]], [True, True])
    rule = table.splitlines()[1]
    cells = [c.strip() for c in rule.strip("|").split("|")]
    assert all("-" in c and len(c) >= 3 for c in cells), rule
