"""`lmsat init`: a config for your own training run, from its folder of checkpoints.

    python -m lmsat init out/ --text my_eval.txt -o config/mine.yaml
    snakemake -n --configfile config/mine.yaml      # what it plans (offline)
    snakemake --configfile config/mine.yaml --cores 2

Reads the checkpoint directories the common trainers write (`checkpoint-500/` of
transformers' Trainer, `checkpoint_5/`, `step500/`, `step-500/`, `iter_0000500/`; each a
save_pretrained directory), their steps, the width, depth, vocabulary and tied head their
config.json states, the tokens per step their trainer_state.json records (never
training_args.bin, a pickle), and the tokenizer saved beside them. The config it writes
discovers the checkpoints again at every planning (a run still training gets its new
checkpoints analysed by the next `snakemake`), plans nothing that needs the network, a
scaling fit only for two model sizes or more, and is checked by planning before it is written.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

from lmsat import rundir
from lmsat.config import load_plan, load_yaml
from lmsat.errors import ConfigError
from lmsat.names import PATH_NAME_PATTERN

REPO = Path(__file__).resolve().parents[3]  # src/lmsat/commands/init.py -> the repository
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
MAX_SEQ_LEN = 2048  # the paper's sequences; shorter when the model's context is
MAX_SAMPLE_TOKENS = 50000  # the paper's eval sample
POOL_FACTOR = 20  # schema default of sample.pool_factor


class InitError(Exception):
    """A problem with the run folder or the arguments, with the fix."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoints", nargs="+", type=Path, metavar="CHECKPOINTS",
                        help="run folder(s) holding checkpoint directories (one model each), "
                             "or a folder of such run folders")
    parser.add_argument("--text", nargs="+", type=Path, default=[], metavar="FILE",
                        help="local .txt (one document per line) or .jsonl files: the eval token sample")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer directory (default: the one saved beside the checkpoints)")
    parser.add_argument("-o", "--output", type=Path, help="config file to write (default: config/<run>.yaml)")
    parser.add_argument("--run", help="run name, results/<run>/ (default: the run folder's name)")
    parser.add_argument("--tokens-per-step", type=int,
                        help="training tokens per optimizer step, when trainer_state.json does not record them")
    parser.add_argument("--force", action="store_true", help="overwrite an existing config file")


def run(args: argparse.Namespace) -> int:
    try:
        output, text = write_config(args)
    except (InitError, ConfigError) as error:
        if getattr(args, "debug", False):
            raise
        print(f"lmsat init: {error}", file=sys.stderr)
        return 2
    print(text)
    return 0


def path_name(name: str) -> str:
    """`name` as a safe path component (lmsat.names.PATH_NAME_PATTERN)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._")[:200] or "run"
    if not re.fullmatch(PATH_NAME_PATTERN, safe):
        safe = "run-" + safe
    return safe


def checkpoint_glob(folder: Path) -> tuple[str, int]:
    """(glob, checkpoints it finds) of the trainer naming that finds the most checkpoints in `folder`."""
    best = ("", 0)
    for glob in rundir.TRAINER_GLOBS:
        count = len(rundir.discover(folder, glob, rundir.DEFAULT_STEP_REGEX).revisions)
        if count > best[1]:
            best = (glob, count)
    return best


def run_folders(paths: list[Path]) -> list[tuple[Path, str]]:
    """[(run folder, checkpoint glob)]: each path that holds checkpoints, else its sub-folders that do."""
    runs = []
    for path in paths:
        if not path.is_dir():
            raise InitError(f"{path} is not a directory; give the folder your trainer saved its checkpoints in")
        glob, count = checkpoint_glob(path)
        if count:
            runs.append((path.resolve(), glob))
            continue
        nested = [(sub.resolve(), checkpoint_glob(sub)[0]) for sub in sorted(path.iterdir()) if sub.is_dir()]
        nested = [(sub, glob) for sub, glob in nested if glob]
        if not nested:
            subdirs = ", ".join(sorted(p.name for p in path.iterdir() if p.is_dir())[:6]) or "none"
            raise InitError(
                f"{path} holds no checkpoint directory (sub-directories: {subdirs}); a checkpoint is a sub-directory "
                f"named like {', '.join(rundir.TRAINER_GLOBS[:5])} with config.json and model.safetensors "
                "(save_pretrained)"
            )
        runs += nested
    return runs


def tokens_per_step(folder: Path, glob: str, given: int | None, key: str) -> tuple[int, str]:
    """The run's tokens per step from its trainer_state.json (the same in every checkpoint
    that records them), or the one given; InitError naming the key when neither is there."""
    found = rundir.discover(folder, glob, rundir.DEFAULT_STEP_REGEX).revisions
    records = {}
    for name, _ in found[-1:] + found[:1]:  # the latest and the first checkpoint
        record = rundir.tokens_per_step(folder / name)
        if record:
            records[name] = record
    counts = {count for count, _ in records.values()}
    if len(counts) > 1:
        raise InitError(f"{folder}: the checkpoints record different tokens per step ({records}); set --tokens-per-step")
    if given is not None:
        if counts and given not in counts:
            (count, how), = list(records.values())[:1]
            raise InitError(f"--tokens-per-step {given}, but {how} gives {count}; drop the option or check the run")
        return given, "given with --tokens-per-step"
    if not counts:
        raise InitError(
            f"{folder}: no checkpoint records its tokens per optimizer step in plain text (trainer_state.json with "
            f"num_input_tokens_seen or total_flos); config key '{key}' needs it (T = step x tokens_per_step): rerun "
            "with --tokens-per-step N (N = per-device batch x gradient accumulation x devices x sequence length), or "
            "train with include_num_input_tokens_seen=True"
        )
    return next(iter(records.values()))


def sample_size(text: list[Path], tokenizer_dir: Path, context: int) -> tuple[int, int, int]:
    """(n_tokens, seq_len, tokens read) of an eval sample the text can give: sequences of the
    model's context (at most 2048), at most 50k tokens, and at most half the text's windows."""
    from lmsat.corpus import build_token_pool, iter_documents
    from lmsat.models import load_tokenizer

    spec = dict(type="text_files", files=[str(p) for p in text], text_field="text", max_documents=0,
                max_document_bytes=16_000_000)
    tokenizer = load_tokenizer(dict(source="local", id=str(tokenizer_dir), revision="main"), "own")
    pool = build_token_pool(iter_documents(spec, "text"), tokenizer, POOL_FACTOR * MAX_SAMPLE_TOKENS, 0, corpus="text")
    seq_len = min(MAX_SEQ_LEN, context)
    while seq_len > 16 and len(pool) // seq_len < 4:
        seq_len //= 2
    windows = len(pool) // seq_len
    if windows < 2:
        raise InitError(f"--text gives {len(pool)} tokens, too few for an eval sample of {seq_len}-token sequences; "
                        "give more text")
    return min(MAX_SAMPLE_TOKENS, (windows // 2) * seq_len), seq_len, len(pool)


def build_config(args: argparse.Namespace) -> tuple[dict, dict]:
    """(config, notes): the config of the run folders, and what init found, for the comments."""
    runs = run_folders(args.checkpoints)
    run_name = path_name(args.run or runs[0][0].name)
    suite = run_name
    models, notes = [], dict(tokens={}, globs={}, folders={})
    names = set()
    per_step = set()
    for folder, glob in runs:
        name = path_name(folder.name)
        while name in names:
            name = path_name(f"{folder.parent.name}-{name}")
        names.add(name)
        found = rundir.discover(folder, glob, rundir.DEFAULT_STEP_REGEX).revisions
        conflicts = rundir.step_conflicts(folder, found)
        if conflicts:  # which step is right is the user's to say, not a guess of init's
            listed = "; ".join(f"{folder / n}: step {s} by its name, global_step {g} in its trainer_state.json"
                               for n, s, g in conflicts)
            raise InitError(
                f"checkpoints whose name and trainer state disagree on the training step ({listed}). Fix: if the "
                "trainer state is right, rename the folder after its global_step (checkpoint-<global_step>); if the "
                "name is right (a trainer_state.json copied from another checkpoint), put that checkpoint's own "
                "trainer_state.json there, or remove it and give --tokens-per-step"
            )
        last = folder / found[-1][0]
        count, how = tokens_per_step(folder, glob, args.tokens_per_step, f"suites.{suite}.tokens_per_step")
        per_step.add(count)
        notes["tokens"][name], notes["globs"][name], notes["folders"][name] = how, glob, found
        stated = rundir.architecture(rundir.read_config(last))
        if "hidden_size" not in stated:
            raise InitError(f"{last}/config.json states no hidden size (hidden_size, n_embd, d_model)")
        models.append(dict(name=name, source="local", id=str(folder), revisions=dict(discover=glob), **stated))
        notes.setdefault("last", last)
    if len(per_step) > 1:
        raise InitError(f"the runs record different tokens per step ({sorted(per_step)}); give each run a config of its "
                        "own, or one --tokens-per-step")
    tokenizer_dir = args.tokenizer or rundir.find_tokenizer(runs[0][0], [n for n, _ in notes["folders"][models[0]["name"]]])
    if tokenizer_dir is None:
        raise InitError(f"no tokenizer saved in {runs[0][0]} or its checkpoints (tokenizer.json, tokenizer_config.json); "
                        "give its directory with --tokenizer")
    if not args.text:
        raise InitError("no eval text: give local .txt or .jsonl files with --text FILE ... (the eval token sample, "
                        "config key sample.corpus; best some text the run did not train on)")
    for path in args.text:
        if not path.is_file():
            raise InitError(f"--text {path}: no such file")
    from lmsat.models import context_length

    contexts = [context_length(rundir.read_config(Path(m["id"]) / notes["folders"][m["name"]][-1][0])) for m in models]
    context = min([found[1] for found in contexts if found] or [MAX_SEQ_LEN])
    n_tokens, seq_len, pool = sample_size(args.text, Path(tokenizer_dir), context)
    in_checkpoint = any(Path(tokenizer_dir).resolve() == (Path(m["id"]) / name).resolve()
                        for m in models for name, _ in notes["folders"][m["name"]])
    notes.update(pool=pool, tokenizer=Path(tokenizer_dir).resolve(), tokenizer_in_checkpoint=in_checkpoint)
    config = dict(
        run=run_name,
        seed=0,
        device="auto",
        threads=1,
        suites={suite: dict(tokenizer="own", tokens_per_step=per_step.pop(), models=models)},
        tokenizers=dict(own=dict(source="local", id=str(Path(tokenizer_dir).resolve()))),
        corpora=dict(text=dict(type="text_files", files=[str(p.resolve()) for p in args.text])),
        sample=dict(corpus="text", n_tokens=n_tokens, seq_len=seq_len),
        extraction=dict(batch_size=8, chunk_sequences=32, layer_sample=min(4096, n_tokens)),
        metrics=None,
        evaluation=dict(tasks=[]),
        ngrams=dict(corpora=[], ground_truth=dict(sample_sizes=[])),
        bottleneck=dict(models=[]),
    )
    config["scaling"] = scaling_section(config)
    return config, notes


def scaling_section(config: dict) -> dict:
    """Fig. 1b's section: a fit of A and alpha on every model when the plan has two model
    sizes or more (B = E = 0: the published B, beta, E describe web text and 1e9+ tokens,
    not this run), else no Fig. 1b."""
    plan = load_plan(dict(config, scaling=dict(enabled=False)), SCHEMA)
    from lmsat.scaling import config_parameter_counts

    sizes = {}
    for name, model in plan.models.items():
        counts = config_parameter_counts(rundir.read_config(Path(model.id) / model.final_revision))
        if counts:  # every family lmsat.adapters knows
            sizes[name] = counts["non_embedding"]
    if len(set(sizes.values())) < 2 or len(sizes) < len(plan.models):
        return dict(enabled=False)
    return dict(enabled=True, params="non_embedding", min_params=min(sizes.values()), fit_on="final", B=0.0, E=0.0)


HEADER = """\
# lmsat config for your own training run, written by `python -m lmsat init` ({command}).
# Keys and defaults: workflow/schemas/config.schema.yaml. Runs offline: local checkpoints,
# tokenizer and text only; no hub, no lm-eval tasks.
#   snakemake -n --configfile {config}              # dry run: what it plans
#   snakemake --configfile {config} --cores 2       # run; again after new checkpoints
"""


def commented(config: dict, notes: dict, command: str, output: Path) -> str:
    """The config as YAML, each section with a comment on where its values came from."""
    def dump(section: dict) -> str:  # one top-level key at a time: nested leaves in flow style
        return "".join(yaml.safe_dump({k: v}, sort_keys=False, width=100,
                                      default_flow_style=None if isinstance(v, (dict, list)) else False)
                       for k, v in section.items())

    found = "".join(
        f"#   {name}: {len(revs)} checkpoints ({notes['globs'][name]}, steps {revs[0][1]}..{revs[-1][1]});\n"
        f"#     tokens per step from {notes['tokens'][name]}\n"
        for name, revs in notes["folders"].items()
    )
    parts = [
        HEADER.format(command=command, config=output),
        dump({k: config[k] for k in ("run", "seed", "device", "threads")}),
        "# Found:\n" + found +
        "# `discover` finds the checkpoints again at every planning (new ones of a run still training\n"
        "# are analysed by the next snakemake); width, depth, vocabulary and tied head are read from\n"
        "# their config.json and checked against it at every planning.\n",
        dump({"suites": config["suites"]}),
        f"# The tokenizer saved beside the checkpoints ({notes['tokenizer']}).\n"
        + ("# It lives in a checkpoint: if the trainer deletes old checkpoints (save_total_limit), copy it\n"
           "# elsewhere and point `id` there.\n" if notes["tokenizer_in_checkpoint"] else ""),
        dump({"tokenizers": config["tokenizers"]}),
        f"# The eval token sample: {config['sample']['n_tokens']} tokens in sequences of {config['sample']['seq_len']} "
        f"(the model's context, at most 2048)\n# drawn from the first {notes['pool']} tokens of this text.\n",
        dump({"corpora": config["corpora"], "sample": config["sample"]}),
        dump({"extraction": config["extraction"]}),
        "# null: every registered metric (lmsat.metrics): loss, anisotropy, effective rank, head spectra, attention.\n",
        "metrics: null\n",
        "# No Table 1 (lm-eval's tasks are on the hub), no n-gram W-error or ground truth (the toy\n"
        "# suite's), no rank-constrained heads (list models under bottleneck.models to add them).\n",
        dump({k: config[k] for k in ("evaluation", "ngrams", "bottleneck")}),
    ]
    if config["scaling"]["enabled"]:
        parts.append(
            "# Fig. 1b: A/N^alpha fitted on every model's final checkpoint. B and E are 0: the published\n"
            "# B, beta, E (Hoffmann et al.) describe web text and 1e9+ tokens; set them for your data.\n"
        )
    else:
        parts.append("# No Fig. 1b: one model size gives no scaling law (add runs of other sizes to fit one).\n")
    parts.append(dump({"scaling": config["scaling"]}))
    return "\n".join(part.rstrip("\n") + "\n" for part in parts)


def next_commands(output: Path) -> str:
    snakefile = REPO / "Snakefile"
    here = Path.cwd().resolve() == REPO
    prefix = "snakemake" if here else f"snakemake -s {snakefile}"
    return (
        f"\nNext (from {'here' if here else 'the directory that should hold results/'}):\n"
        f"  {prefix} -n --configfile {output}                  # dry run: the jobs it plans, offline\n"
        f"  {prefix} --configfile {output} --cores 2           # run it; rerun after new checkpoints\n"
        f"  {prefix} --configfile {output} --cores 2 -- fig3   # one target: `--` ends --configfile's list\n"
    )


def write_config(args: argparse.Namespace) -> tuple[Path, str]:
    """Write the config (checked by planning first); returns its path and what to print."""
    config, notes = build_config(args)
    load_plan(config, SCHEMA)  # the config plans, or init fails naming the key
    output = args.output or Path("config") / f"{config['run']}.yaml"
    if output.exists() and not args.force:
        raise InitError(f"{output} exists; choose another -o, or --force to overwrite it")
    command = "lmsat init " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["init"] else "lmsat init"
    text = commented(config, notes, command, output)
    if yaml.safe_load(text) != config:
        raise RuntimeError("lmsat init: the commented config does not read back as the config (a bug)")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(text)
    load_yaml(tmp)
    tmp.replace(output)
    models = ", ".join(f"{name} ({len(revs)} checkpoints)" for name, revs in notes["folders"].items())
    return output, f"wrote {output}: run {config['run']}, models {models}" + next_commands(output)
