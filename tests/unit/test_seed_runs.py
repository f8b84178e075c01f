"""Chapter 14's seed runs: the shipped results file holds every comparison over its seeds (six for the mixture
against the dense model, three for the rest), and its runs come
from their recipes (tools/seed_runs.py writes the file; these tests re-run first steps and compare)."""

from __future__ import annotations

import math

import pytest

import transformer_lib as tl
from transformer_lib import recipes

COMPARED = ("dense", "moe", "full", "lora r8")  # the comparisons the chapter asserts: six seeds, three, three, three


def test_the_results_file_holds_each_comparison_over_its_seeds_and_every_run_at_least_once():
    data = recipes.load_seed_runs()
    assert set(data["runs"]) == set(recipes.SEED_RUNS), "run `python tools/seed_runs.py` after changing SEED_RUNS"
    for name in COMPARED:
        seeds = recipes.MOE_SEEDS if name in ("dense", "moe") else recipes.SEEDS
        assert [r["seed"] for r in data["runs"][name]] == list(seeds), name
    for name, records in data["runs"].items():
        assert records, name
        for r in records:
            steps = recipes.SEED_RUN_STEPS if name in ("dense", "moe") else 300
            assert r["steps"] == steps and r["metric"] == recipes.SEED_RUN_METRICS[name], (name, r["seed"])
            assert math.isfinite(r["loss"]) and r["bits"] == pytest.approx(r["loss"] / math.log(2))
            assert r["seconds"] > 0 and len(r["first_losses"]) == 10
    assert 1.0 < data["base test loss"] < 2.0  # the shipped model before fine-tuning, in nats per character


def test_seed_zero_is_the_shipped_recipe():
    """Seed 0 of each run starts as its shipped recipe, and the fine-tuning runs (300 steps, as shipped) end as
    the shipped checkpoints do."""
    runs = recipes.load_seed_runs()["runs"]
    for run, checkpoint in [("dense", "shakespeare_char"), ("moe", "shakespeare_moe"), ("full", "twelfth_night_full"),
                            ("lora r8", "twelfth_night_lora")]:  # fmt: skip
        _, meta = tl.load_checkpoint(checkpoint)
        first = runs[run][0]["first_losses"]
        assert first == pytest.approx(meta["first_losses"][: len(first)], abs=1e-2 if run == "moe" else 1e-3), run
        if run in ("full", "lora r8"):
            assert runs[run][0]["loss"] == pytest.approx(meta["evals"][-1]["test loss"], abs=2e-3), run
    assert all(runs[name][1]["first_losses"] != runs[name][0]["first_losses"] for name in COMPARED)  # seeds differ


def _tool():
    import seed_runs  # tools/ is on pytest's pythonpath

    return seed_runs


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_the_tool_records_every_seed_of_every_run_keeps_what_it_has_and_refuses_unknown_runs(
    tmp_path, monkeypatch, capsys
):
    """With stand-in runs that train nothing: each (run, seed) is recorded once, a second call skips what the
    file holds, --force runs it again, and an unknown name is refused."""
    seed_runs = _tool()
    calls = []

    def stand_in(name):
        def run(seed, steps=None, progress=False):
            calls.append((name, seed))
            history = tl.History(steps=list(range(12)), losses=[float(seed + i) for i in range(12)], seconds=0.5)
            history.evals = [{recipes.SEED_RUN_METRICS[name]: 1.0 + seed}]
            return None, history, {}

        return run

    monkeypatch.setattr(recipes, "SEED_RUNS", {name: stand_in(name) for name in ("dense", "full")})
    out = tmp_path / "runs.json"
    monkeypatch.setattr(seed_runs, "lm_eval_loss", lambda *args: 1.5)  # the shipped model's test loss, not measured
    assert seed_runs.main(["--out", str(out)]) == 0
    assert calls == [("dense", 0), ("dense", 1), ("dense", 2), ("full", 0), ("full", 1), ("full", 2)]
    runs = recipes.load_seed_runs(out)["runs"]
    assert {name: [r["seed"] for r in rs] for name, rs in runs.items()} == {"dense": [0, 1, 2], "full": [0, 1, 2]}
    assert runs["full"][2]["loss"] == 3.0 and runs["full"][2]["first_losses"] == [float(2 + i) for i in range(10)]
    calls.clear()
    seed_runs.main(["--out", str(out), "--seeds", "4", "dense"])  # only seed 3 is new
    seed_runs.main(["--out", str(out), "--seeds", "1", "--force", "full"])
    assert calls == [("dense", 3), ("full", 0)]
    assert [r["seed"] for r in recipes.load_seed_runs(out)["runs"]["dense"]] == [0, 1, 2, 3]
    with pytest.raises(SystemExit):
        seed_runs.main(["no such run"])
    assert "the runs are" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dense", "moe", "lora r8"])
def test_a_seed_runs_first_losses_are_reproduced_by_its_recipe(name):
    """Re-run seed 1's first steps here and compare with the losses the file recorded.

    As for the shipped checkpoints: to 1e-3, and to 1e-2 for the mixture, whose discrete routing can
    send a near-tie token to the other expert on another CPU.
    """
    record = recipes.load_seed_runs()["runs"][name][1]
    assert record["seed"] == 1
    first = record["first_losses"]
    _, history, _ = recipes.SEED_RUNS[name](1, steps=len(first))
    assert history.losses == pytest.approx(first, abs=1e-2 if name == "moe" else 1e-3)


def test_run_seeds_fills_what_is_missing_in_seed_order_and_saves_after_each(capsys):
    seed_runs = _tool()
    records = [{"seed": 1, "value": "old"}]
    saved = []
    seed_runs.run_seeds(records, 3, False, lambda s: {"seed": s, "value": "new"}, lambda: saved.append(len(records)),
                        lambda r: f"seed {r['seed']} done")  # fmt: skip
    assert records == [{"seed": 0, "value": "new"}, {"seed": 1, "value": "old"}, {"seed": 2, "value": "new"}]
    assert saved == [2, 3] and capsys.readouterr().out.split("\n")[:2] == ["seed 0 done", "seed 2 done"]
    seed_runs.run_seeds(records, 2, True, lambda s: {"seed": s, "value": "again"}, lambda: None, lambda r: "")
    assert [r["value"] for r in records] == ["again", "again", "new"]  # force runs seeds 0 and 1 again, in place


def test_a_run_file_is_finished_with_its_time_load_and_machine(tmp_path, capsys):
    """tools/seed_runs.py's write_run_file, which the VioLA and speculative-decoding tools end with."""
    import json
    import time

    from seed_runs import write_run_file  # tools/ is on pytest's pythonpath

    start = time.perf_counter() - 2.0
    write_run_file({"runs": [1, 2]}, tmp_path / "runs.json", start)
    data = json.loads((tmp_path / "runs.json").read_text())
    assert data["runs"] == [1, 2] and 2.0 <= data["seconds"] < 60 and data["load"] >= 0
    assert "cores" in data["machine"] and "torch" in data["machine"]
    assert f"wrote {tmp_path / 'runs.json'} in 2 s" in capsys.readouterr().out
