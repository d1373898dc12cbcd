"""lm-eval wrapper, offline tasks and Table 1 (lmsat.saturation.downstream), on a tiny saved GPT-NeoX."""

import csv
import json
import math
import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # before datasets is imported: local files only

import numpy as np
import pandas as pd
import pytest
import tokenizers
import torch
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

from lmsat.products.saturation_tables import make_table1
from lmsat.products.table_files import read_table, table_to_latex, table_to_markdown, write_csv, write_table
from lmsat.saturation.downstream import (
    METRICS,
    STORYCLOZE_2016_FILES,
    ManualDownloadRequired,
    check_tasks,
    manual_download_missing,
    run_lmeval,
    write_offline_tasks,
    write_storycloze_task,
)

EOS = "<|endoftext|>"
WORDS = [f"w{i}" for i in range(24)]


def make_docs(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(4, 14)))) for _ in range(n)]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A WordLevel tokenizer (eos = bos = <|endoftext|>, as Pythia) and a random GPT-NeoX."""
    out = tmp_path_factory.mktemp("tiny_neox")
    vocab = {word: i for i, word in enumerate(WORDS + [EOS, "<unk>"])}
    backend = tokenizers.Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    backend.add_special_tokens([EOS, "<unk>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS, bos_token=EOS, unk_token="<unk>")
    tokenizer.save_pretrained(out)
    torch.manual_seed(0)
    config = GPTNeoXConfig(
        vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64,
    )
    GPTNeoXForCausalLM(config).save_pretrained(out)
    return out


def write_storycloze_csvs(data_dir, n: int = 4, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    columns = ["InputStoryid"] + [f"InputSentence{i}" for i in range(1, 5)]
    columns += ["RandomFifthSentenceQuiz1", "RandomFifthSentenceQuiz2", "AnswerRightEnding"]
    for name in STORYCLOZE_2016_FILES.values():
        with open(data_dir / name, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(columns)
            for i in range(n):
                sentences = [" ".join(rng.choice(WORDS, size=3)) for _ in range(6)]
                writer.writerow([f"story{i}", *sentences, int(rng.integers(1, 3))])


@torch.no_grad()
def brute_force(model_dir, ppl_rows, mc_rows) -> tuple[float, float]:
    """Word perplexity (eos-prefixed rolling log-likelihood) and last-word accuracy, by hand."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = GPTNeoXForCausalLM.from_pretrained(model_dir).eval()

    def logprobs(ids):  # log p(ids[t] | ids[:t]) for t >= 1
        logits = model(torch.tensor([ids])).logits[0].double().log_softmax(-1)
        return logits[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]

    total_ll = total_words = 0.0
    for row in ppl_rows:
        ids = tokenizer(row["text"])["input_ids"]
        total_ll += logprobs([tokenizer.eos_token_id] + ids).sum().item()
        total_words += len(row["text"].split())
    correct = 0
    for row in mc_rows:
        context = tokenizer(row["context"])["input_ids"]
        scores = [logprobs(context + tokenizer(choice)["input_ids"])[-1].item() for choice in row["choices"]]
        correct += int(np.argmax(scores) == row["gold"])
    return math.exp(-total_ll / total_words), correct / len(mc_rows)


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_write_offline_tasks_builds_valid_items(tmp_path):
    docs = make_docs(12)
    names = write_offline_tasks(tmp_path, docs, n_docs=10, n_choices=4, seed=3)
    assert names == ["synthetic_ppl", "synthetic_mc"]
    ppl, mc = read_jsonl(tmp_path / "synthetic_ppl.jsonl"), read_jsonl(tmp_path / "synthetic_mc.jsonl")
    assert len(ppl) == len(mc) == 10
    for text, item in zip((row["text"] for row in ppl), mc):
        assert text in docs
        words = text.split()
        assert item["context"] == " ".join(words[:-1])
        assert item["choices"][item["gold"]] == words[-1]
        assert len(set(item["choices"])) == 4 and set(item["choices"]) <= set(WORDS)
    for name in names:
        written = (tmp_path / f"{name}.yaml").read_text()
        # relative to the YAML: a copied or moved run directory reads its own data
        assert f"test: {name}.jsonl" in written and str(tmp_path) not in written
    again = tmp_path / "again"
    write_offline_tasks(again, docs, n_docs=10, n_choices=4, seed=3)
    assert (again / "synthetic_mc.jsonl").read_text() == (tmp_path / "synthetic_mc.jsonl").read_text()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n_docs=5, n_choices=1), "at least 2 choices"),
        (dict(n_docs=50, n_choices=4), "n_docs=50"),
        (dict(n_docs=5, n_choices=40), "fewer than n_choices=40"),
    ],
)
def test_write_offline_tasks_rejects_bad_arguments(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        write_offline_tasks(tmp_path, make_docs(12) + ["lonely"], seed=0, **kwargs)


def test_synthetic_mc_fits_the_models_context_and_scores_as_lm_eval_cut_it(tiny_model_dir, tmp_path, caplog):
    """Issue 50, item 10: synthetic_mc's contexts of whole documents (255 words) exceeded the toy
    models' context (64): lm-eval cut three quarters of each from the left, with a warning per
    item (400 in `make run`). Built with context_words = the context, each item fits (the answer
    too: lm-eval feeds context + answer but its last token) and scores as the cut one did."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(5)
    docs = [" ".join(rng.choice(WORDS, size=120)) for _ in range(12)]
    whole, fitted = tmp_path / "whole", tmp_path / "fitted"
    write_offline_tasks(whole, docs, n_docs=12, n_choices=4, seed=0)
    write_offline_tasks(fitted, docs, n_docs=12, n_choices=4, seed=0, context_words=64)
    for long, short in zip(read_jsonl(whole / "synthetic_mc.jsonl"), read_jsonl(fitted / "synthetic_mc.jsonl")):
        assert short["context"].split() == long["context"].split()[-64:] and len(long["context"].split()) == 119
        assert (short["choices"], short["gold"]) == (long["choices"], long["gold"])
    accuracy = {}
    for name, task_dir in (("whole", whole), ("fitted", fitted)):
        caplog.clear()
        with caplog.at_level("WARNING"):
            out = run_lmeval(str(tiny_model_dir), "main", ["synthetic_mc"], batch_size=4, limit=None, device="cpu",
                             local_files_only=True, include_path=[str(task_dir)])
        accuracy[name] = out["results"]["synthetic_mc"]["acc,none"]
        warned = sum("exceeds model's maximum length" in record.getMessage() for record in caplog.records)
        assert warned == (12 if name == "whole" else 0), (name, warned)  # one per item (its choices in one batch)
    assert accuracy["fitted"] == accuracy["whole"]


def test_run_lmeval_offline_tasks_match_brute_force(tiny_model_dir, tmp_path):
    torch.set_num_threads(1)
    task_dir, cloze_data, cloze_dir = tmp_path / "tasks", tmp_path / "cloze_data", tmp_path / "cloze_task"
    names = write_offline_tasks(task_dir, make_docs(10), n_docs=8, n_choices=4, seed=0)
    cloze_data.mkdir()
    write_storycloze_csvs(cloze_data)
    names.append(write_storycloze_task(cloze_dir, cloze_data))

    limit = 5
    out = run_lmeval(
        str(tiny_model_dir), "main", names, batch_size=4, limit=limit, device="cpu", dtype="float32",
        local_files_only=True, include_path=[str(task_dir), str(cloze_dir)],
    )
    json.dumps(out)  # JSON-able as returned
    results = out["results"]
    assert out["n-samples"]["synthetic_ppl"]["effective"] == limit
    assert out["lmsat"]["revision"] == "main" and out["versions"]["synthetic_mc"] == 1.0
    ppl, acc = results["synthetic_ppl"]["word_perplexity,none"], results["synthetic_mc"]["acc,none"]
    assert math.isfinite(ppl) and ppl > 1 and 0 <= acc <= 1
    assert 0 <= results["storycloze_2016"]["acc,none"] <= 1

    ref_ppl, ref_acc = brute_force(
        tiny_model_dir,
        read_jsonl(task_dir / "synthetic_ppl.jsonl")[:limit],
        read_jsonl(task_dir / "synthetic_mc.jsonl")[:limit],
    )
    assert ppl == pytest.approx(ref_ppl, rel=1e-4)
    assert acc == pytest.approx(ref_acc)
    # our metric registry agrees with lm-eval on the direction of each metric
    for task in ("synthetic_ppl", "synthetic_mc", "storycloze_2016"):
        for spec in METRICS[task]:
            assert out["higher_is_better"][task][spec.metric] is spec.higher_is_better

    table = make_table1(
        [{"model": "tiny", "checkpoint": "final", "results": out}], tasks=("synthetic_ppl", "synthetic_mc")
    )
    assert table.loc[("tiny", "final"), "Synthetic (ppl.) ↓"] == pytest.approx(ppl)
    assert table.loc[("tiny", "final"), "Synthetic last word ↑"] == pytest.approx(100 * acc)


def test_storycloze_2016_requires_manual_download(tmp_path):
    # lm-eval's own task: detected from its config before any model is loaded (the model
    # path does not exist, so reaching the loader would raise a different error)
    with pytest.raises(ManualDownloadRequired) as error:
        run_lmeval(str(tmp_path / "no_model"), "main", ["storycloze_2016"], batch_size=1, limit=1,
                   device="cpu", dtype="float32")
    assert error.value.tasks == ["storycloze_2016"]
    assert "rocstories" in str(error.value) and "write_storycloze_task" in str(error.value)
    assert isinstance(error.value, ValueError)


def test_manual_download_detection_and_storycloze_files(tmp_path):
    from lm_eval.tasks import TaskManager

    base = "task: {name}\ndataset_path: LSDSem/story_cloze\ndataset_name: '2016'\noutput_type: multiple_choice\n"
    (tmp_path / "a.yaml").write_text(base.format(name="cloze_without_dir"))
    (tmp_path / "b.yaml").write_text(base.format(name="cloze_with_dir") + "dataset_kwargs:\n  data_dir: /data\n")
    (tmp_path / "d.yaml").write_text(base.format(name="tagged") + "tag: cloze_tag\n")
    (tmp_path / "c.yaml").write_text("task: plain\ndataset_path: json\noutput_type: multiple_choice\n")
    manager = TaskManager(include_path=str(tmp_path), include_defaults=False)
    missing = manual_download_missing(["cloze_without_dir", "cloze_with_dir", "plain"], manager)
    assert sorted(missing) == ["cloze_with_dir", "cloze_without_dir"]  # datasets >= 4: no scripts
    assert sorted(manual_download_missing(["cloze_tag"], manager)) == ["tagged"]
    assert "no data_dir" in missing["cloze_without_dir"] and "loader script" in missing["cloze_with_dir"]
    with pytest.raises(ManualDownloadRequired, match="cloze_test_test__spring2016"):
        write_storycloze_task(tmp_path / "out", tmp_path / "empty")
    # (through run_lmeval an unknown name would first index lm-eval's ~15k tasks: ~15 s)
    with pytest.raises(ValueError, match=r"unknown lm-eval task\(s\) \['nope'\]"):
        check_tasks(["plain", "nope"], manager)


def paper_records() -> list[dict]:
    """Table 1 of the paper as run_lmeval-shaped dicts (accuracies as fractions)."""

    def results(lambada_ppl, lambada, storycloze, wikitext, sciq, arc):
        return {
            "results": {
                "lambada_openai": {"perplexity,none": lambada_ppl, "acc,none": lambada / 100},
                "storycloze_2016": {"acc,none": storycloze / 100},
                "wikitext": {"word_perplexity,none": wikitext},
                "sciq": {"acc,none": sciq / 100},
                "arc_easy": {"acc,none": arc / 100},
            }
        }

    final = results(32.9, 38.0, 57.2, 33.4, 73.4, 43.2)
    del final["results"]["storycloze_2016"]  # e.g. skipped: no manual download
    return [
        {"model": "pythia-160m", "checkpoint": "final", "results": final},
        {"model": "pythia-160m", "checkpoint": "best", "results": results(24.6, 40.3, 59.6, 30.47, 79.6, 46.5)},
    ]


def test_make_table1_layout_and_writers(tmp_path):
    table = make_table1(paper_records())
    assert list(table.columns) == [
        "Lambada (ppl.) ↓", "Lambada ↑", "StoryCloze ↑", "WikiText (ppl.) ↓", "SciQ ↑", "ARC-e ↑",
    ]
    assert list(table.index) == [("pythia-160m", "best"), ("pythia-160m", "final")]
    np.testing.assert_allclose(table.loc[("pythia-160m", "best")].to_numpy(), [24.6, 40.3, 59.6, 30.47, 79.6, 46.5])
    assert np.isnan(table.loc[("pythia-160m", "final"), "StoryCloze ↑"])

    markdown = table_to_markdown(table)
    assert markdown.splitlines()[0] == (
        "| model | checkpoint | Lambada (ppl.) ↓ | Lambada ↑ | StoryCloze ↑ | WikiText (ppl.) ↓ | SciQ ↑ | ARC-e ↑ |"
    )
    assert "| pythia-160m | final | 32.9 | 38.0 | – | 33.40 | 73.4 | 43.2 |" in markdown
    latex = table_to_latex(table)
    assert r"Lambada (ppl.) $\downarrow$ & Lambada $\uparrow$" in latex
    assert r"pythia-160m & best & 24.6 & 40.3 & 59.6 & 30.47 & 79.6 & 46.5 \\" in latex

    write_csv(table.reset_index(), tmp_path / "t.csv")  # Table 1's CSV, as rule make_table1 writes it
    write_table(table, tmp_path / "t.md")
    write_table(table, tmp_path / "t.tex")
    back = read_table(tmp_path / "t.csv").set_index(["model", "checkpoint"])  # its checksum column checked and dropped
    pd.testing.assert_frame_equal(back, table, check_names=False, check_exact=False)
    assert (tmp_path / "t.md").read_text() == markdown
    with pytest.raises(ValueError, match="use .md or .tex"):
        write_table(table, tmp_path / "t.xlsx")


def test_make_table1_rejects_unregistered_task_and_bad_record():
    with pytest.raises(ValueError, match="no metric registered for \\['hellaswag'\\]"):
        make_table1(paper_records(), tasks=("hellaswag",))
    with pytest.raises(ValueError, match="lacks \\['checkpoint'\\]"):
        make_table1([{"model": "m", "results": {}}])


@pytest.mark.parametrize("context, continuation_words", [(" ", False), ("w1 w2", True)])
def test_a_request_that_encodes_to_no_tokens_is_a_named_error(tiny_model_dir, tmp_path, context, continuation_words):
    """lm-eval would stop on a bare AssertionError (an empty context, or a choice that encodes
    to nothing); the error names the tasks, their data files, the text and the fix."""
    from lmsat.saturation.downstream import EmptyRequestError

    torch.set_num_threads(1)
    task_dir = tmp_path / "tasks"
    write_offline_tasks(task_dir, make_docs(10), n_docs=4, n_choices=2, seed=0)
    data = task_dir / "synthetic_mc.jsonl"
    rows = read_jsonl(data)
    rows[1]["context"] = context
    if continuation_words:
        task_yaml = task_dir / "synthetic_mc.yaml"
        task_yaml.write_text(task_yaml.read_text().replace("target_delimiter: ' '", "target_delimiter: ''"))
        rows[1]["choices"] = ["", rows[1]["choices"][1]]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(EmptyRequestError) as info:
        run_lmeval(str(tiny_model_dir), "main", ["synthetic_mc"], batch_size=4, limit=None, device="cpu",
                   local_files_only=True, include_path=[str(task_dir)])
    message = str(info.value)
    assert "synthetic_mc" in message and str(data) in message and "encodes to no tokens" in message
    assert "Fix:" in message
