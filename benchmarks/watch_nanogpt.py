"""Check: docs/callback.md's patch of nanoGPT's train.py watches it without changing a bit of
training, and its numbers are `lmsat analyse`'s on the files it saves.

    git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT      # read at 3adf61e1
    .venv/bin/python benchmarks/watch_nanogpt.py --nanogpt /tmp/nanoGPT --out /tmp/watch-nanogpt

Takes the patch from docs/callback.md's "nanoGPT and other hand-written loops" block (so the
docs and this check cannot drift apart), applies it to nanoGPT's own train.py, and trains a
tiny GPT (dropout 0.1: training draws from torch's RNG) on a tokenized test text twice, one
process each, 8 iterations, an eval and a save every 4: once patched, once with the two
`saved` lines alone. Prints whether every tensor of every saved file (and the optimizer
state in ckpt.pt) is equal, the watch's tables, and the largest relative difference between
the watch's values and `lmsat analyse` on ckpt_0000008.pt. Needs lmsat.load_saved_step
(the checkpoint readers, issue 51 items 1-2), which turns nanoGPT's file into the
GPT2LMHeadModel of the same maths.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANCHORS = {  # the docs' comment line -> the line of train.py (3adf61e1) the part goes after
    "# after `raw_model": "raw_model = model.module if ddp else model # unwrap DDP container if needed\n",
    "# in the eval block": "                torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))\n",
    "# after the loop": "    if iter_num > max_iters:\n        break\n",
}
ARGS = ["--dataset=tiny", "--device=cpu", "--compile=False", "--dtype=float32", "--n_layer=2", "--n_head=2", "--n_embd=32",
        "--block_size=64", "--batch_size=4", "--dropout=0.1", "--bias=True", "--max_iters=8", "--eval_interval=4",
        "--eval_iters=2", "--log_interval=1", "--always_save_checkpoint=True", "--gradient_accumulation_steps=1",
        "--warmup_iters=1", "--lr_decay_iters=8"]


def docs_patch() -> dict[str, str]:
    """The three parts of docs/callback.md's nanoGPT block, by their comment line."""
    text = (ROOT / "docs" / "callback.md").read_text()
    section = text[text.index("## nanoGPT and other hand-written loops"):]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    parts, current = {}, None
    for line in block.splitlines(keepends=True):
        key = next((k for k in ANCHORS if line.startswith(k)), None)
        if key is not None:
            current = key
            parts[key] = ""
        elif current is not None:
            parts[current] += line
    assert set(parts) == set(ANCHORS), f"docs/callback.md's nanoGPT block changed: parts {sorted(parts)}"
    return parts


def patched(source: str, parts: dict[str, str], watch: bool) -> str:
    for key, anchor in ANCHORS.items():
        assert source.count(anchor) == 1, f"nanoGPT's train.py changed: {anchor!r} is not where the docs say"
        part = parts[key] if watch else "".join(line for line in parts[key].splitlines(keepends=True)
                                                if line.lstrip().startswith(("saved =", "torch.save(")))
        source = source.replace(anchor, anchor + part)
    return source


def prepare(out: Path, nanogpt: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    import numpy as np

    from test_own_run import train_tokenizer, write_text

    text = write_text(out / "train.txt", 600, seed=0)
    write_text(out / "eval.txt", 300, seed=1)
    tokenizer = train_tokenizer(text)
    tokenizer.save_pretrained(out / "gpt2-tokenizer")  # the name the docs use; here the test text's own tokenizer
    ids = [i for line in text.read_text().splitlines() for i in tokenizer(line)["input_ids"] + [tokenizer.eos_token_id]]
    (out / "data" / "tiny").mkdir(parents=True, exist_ok=True)
    cut = len(ids) * 9 // 10
    np.asarray(ids[:cut], dtype=np.uint16).tofile(out / "data" / "tiny" / "train.bin")
    np.asarray(ids[cut:], dtype=np.uint16).tofile(out / "data" / "tiny" / "val.bin")
    (out / "data" / "tiny" / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": len(tokenizer)}))
    parts, source = docs_patch(), (nanogpt / "train.py").read_text()
    for module in ("model.py", "configurator.py"):
        (out / module).write_text((nanogpt / module).read_text())
    (out / "train_watched.py").write_text(patched(source, parts, watch=True))
    (out / "train_plain.py").write_text(patched(source, parts, watch=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nanogpt", type=Path, required=True, help="a clone of karpathy/nanoGPT")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import lmsat

    if "load_saved_step" not in lmsat.PUBLIC:
        sys.exit("lmsat.load_saved_step is missing: this lmsat has no checkpoint readers (issue 51, items 1-2)")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    prepare(out, args.nanogpt)
    source = str(Path(lmsat.__file__).parents[1])  # this lmsat, for train.py's `import lmsat` and `lmsat analyse`
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])}
    for name in ("plain", "watched"):
        subprocess.run([sys.executable, f"train_{name}.py", *ARGS, f"--out_dir=out_{name}"], cwd=out, env=env, check=True,
                       stdout=subprocess.DEVNULL)
    import torch

    for name in ("ckpt_0000004.pt", "ckpt_0000008.pt", "ckpt.pt"):
        a, b = (torch.load(out / f"out_{run}" / name, weights_only=False) for run in ("plain", "watched"))
        same = a["model"].keys() == b["model"].keys() and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
        line = f"{name}: every model tensor equal: {same}"
        if "optimizer" in a:
            sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
            line += f"; optimizer state equal: {all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i])}"
        print(line)
    from lmsat.products.table_files import read_table
    from lmsat.standalone.monitor import DEFAULT_METRICS, scalars

    loss = read_table(out / "out_watched" / "lmsat" / "tables" / "loss.csv")
    print(loss[["revision", "step", "tokens", "loss", "on_disk", "measure_failed"]].to_string(index=False))
    done = subprocess.run([sys.executable, "-m", "lmsat", "analyse", "out_watched/ckpt_0000008.pt", "--text", "eval.txt",
                           "--tokenizer", "gpt2-tokenizer", "--metrics", *DEFAULT_METRICS, "--json"], cwd=out, env=env,
                          capture_output=True, text=True, check=True)
    analysed = json.loads(done.stdout)["metrics"]
    theirs = scalars(analysed)
    records = out / "out_watched" / "lmsat" / "metrics"
    ours = scalars({m: json.loads((records / m / "out_watched" / "ckpt_0000008.pt.json").read_text())
                    for m in ("loss", "anisotropy", "effective_rank")})
    pairs = [(ours[k], theirs[k]) for k in theirs if k in ours]
    tables = out / "out_watched" / "lmsat" / "tables"
    for table, metric in (("singular_entropy", "spectra"), ("gradient_bottleneck", "gradient_bottleneck")):
        row = read_table(tables / f"{table}.csv").query("step == 8").iloc[0]  # the weights metrics' values, as tabled
        pairs += [(float(row[k]), float(v)) for k, v in analysed[metric].items() if k in row.index and isinstance(v, float)]
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in pairs)
    print(f"lmsat analyse on ckpt_0000008.pt: {len(pairs)} values, largest relative difference {worst:.2e}")


if __name__ == "__main__":
    main()
