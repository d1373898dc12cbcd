"""`lmsat init`: a config for your own training run, from its folder of checkpoints.

    python -m lmsat init out/ --text my_eval.txt -o config/mine.yaml
    snakemake -n --configfile config/mine.yaml      # what it plans (offline)
    snakemake --configfile config/mine.yaml --cores 2

Reads the checkpoint directories the common trainers write (`checkpoint-500/` of
transformers' Trainer, `checkpoint_5/`, `step500/`, `step-500/`, `iter_0000500/`; each a
save_pretrained directory), or the saved steps of OLMo-core, torchtitan, Megatron, litgpt,
nanochat, nanoGPT and Lightning (folders or files: docs/trainers.md), their steps, the
width, depth, vocabulary and tied head their config.json states (another trainer's: the
config of the transformers model it loads as, from the run's own architecture file), the
tokens per step their trainer_state.json records (never training_args.bin, a pickle), and
the tokenizer saved beside them. A folder holding two trainers' formats is refused. The config it writes
discovers the checkpoints again at every planning (a run still training gets its new
checkpoints analysed by the next `snakemake`), plans nothing that needs the network, a
scaling fit only for two model sizes or more, and is checked by planning before it is written.
The eval sample's size is chosen as `lmsat analyse --text` and SaturationCallback choose it
(lmsat.data.corpus.text_sample_size). --bottleneck adds rank-constrained heads (Figs. 6, 8) for
the models narrower than d=1000. It prints where the run writes (results/<run>/).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import textwrap
from pathlib import Path

import yaml

from lmsat.checkpoints import trainer_runs
from lmsat.core.names import PATH_NAME_PATTERN, checkpoint_path
from lmsat.errors import ConfigError
from lmsat.planning.config_files import load_yaml
from lmsat.planning.load import load_plan

REPO = Path(__file__).resolve().parents[3]  # src/lmsat/commands/init.py -> the repository
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


BOTTLENECK_WIDTH = 1000  # the paper: heads of models narrower than ~1000 are the bottleneck (Fig. 6)
BOTTLENECK_TRAIN_TOKENS = 2_000_000  # the most head-training tokens init plans (the paper: 150M; disk d x 2 B each)
BOTTLENECK_STEPS = 286  # the paper's optimizer steps (App. B)
BOTTLENECK_RANKS = 6  # ranks swept below d, at most (then d itself)


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
    parser.add_argument("--storage-url", metavar="URL",
                        help="the run will be read from this bucket prefix (s3://bucket/prefix): the config names the "
                             "run folders and the tokenizer there, and init prints the commands that upload them "
                             "(a run without a shared disk, docs/cluster.md)")
    parser.add_argument("--bottleneck", nargs="*", type=Path, metavar="TRAIN_TEXT",
                        help="also train rank-constrained heads on the final checkpoint of every model narrower than "
                             f"d={BOTTLENECK_WIDTH} (Figs. 6 and 8: is the head why it saturates?), on TRAIN_TEXT files "
                             "(best: some of the training data), or without files on the eval text outside the sample")


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
    """`name` as a safe path component (lmsat.core.names.PATH_NAME_PATTERN)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._")[:200] or "run"
    if not re.fullmatch(PATH_NAME_PATTERN, safe):
        safe = "run-" + safe
    return safe


def discover(folder: Path, glob: str):
    """trainer_runs.discover with the step regex of `glob`'s trainer."""
    return trainer_runs.discover(folder, glob, trainer_runs.step_regex_for(glob))


def checkpoint_glob(folder: Path) -> tuple[str, int]:
    """(glob, checkpoints it finds) of the trainer naming that finds the most checkpoints in
    `folder`; InitError when the folder holds the saved steps of two trainers' formats."""
    best, layouts = ("", 0), {}
    for glob in trainer_runs.TRAINER_GLOBS:
        found = discover(folder, glob)
        for kind, name in found.layouts:
            layouts.setdefault(kind, set()).add(name)
        if len(found.revisions) > best[1]:
            best = (glob, len(found.revisions))
    if len(layouts) > 1:
        listed = "; ".join(f"{kind}: {', '.join(sorted(names)[:3])}" for kind, names in sorted(layouts.items()))
        raise InitError(f"{folder} holds the saved steps of {len(layouts)} formats ({listed}); one run folder is one "
                        "run. Fix: move each format's checkpoints into a folder of its own and give those folders")
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
                f"named like {', '.join(trainer_runs.TRAINER_GLOBS[:5])} with config.json and model.safetensors "
                "(save_pretrained), or a trainer's saved step (OLMo-core, torchtitan, Megatron, litgpt, nanochat, "
                "nanoGPT, Lightning: docs/trainers.md)"
            )
        runs += nested
    return runs


def tokens_per_step(folder: Path, glob: str, given: int | None, key: str) -> tuple[int, str]:
    """The run's tokens per step from its trainer_state.json (the same in every checkpoint
    that records them), or the one given; InitError naming the key when neither is there."""
    found = discover(folder, glob).revisions
    records = {}
    for name, _ in found[-1:] + found[:1]:  # the latest and the first checkpoint
        record = trainer_runs.tokens_per_step(checkpoint_path(folder, name))
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


def sample_size(text: list[Path], tokenizer_dir: Path, context: tuple[str, int] | None):
    """The eval sample the text gives the models (lmsat.data.corpus.text_sample_size: the rule
    `lmsat analyse --text` and SaturationCallback follow too, so they draw the same sample):
    sequences of the context (at most 2048), half the text's windows, at most 50k tokens."""
    from lmsat.checkpoints.loading import load_tokenizer
    from lmsat.data.corpus import CorpusError, text_sample_size

    tokenizer = load_tokenizer(dict(source="local", id=str(tokenizer_dir), revision="main"), "own")
    try:
        return text_sample_size(text, tokenizer, context, model="the models")
    except CorpusError as error:
        raise InitError(f"--text: {error}") from None


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
        found = discover(folder, glob).revisions
        conflicts = trainer_runs.step_conflicts(folder, found)
        if conflicts:  # which step is right is the user's to say, not a guess of init's
            listed = "; ".join(f"{folder / n}: step {s} by its name, global_step {g} in its trainer_state.json"
                               for n, s, g in conflicts)
            raise InitError(
                f"checkpoints whose name and trainer state disagree on the training step ({listed}). Fix: if the "
                "trainer state is right, rename the folder after its global_step (checkpoint-<global_step>); if the "
                "name is right (a trainer_state.json copied from another checkpoint), put that checkpoint's own "
                "trainer_state.json there, or remove it and give --tokens-per-step"
            )
        last = checkpoint_path(folder, found[-1][0])
        count, how = tokens_per_step(folder, glob, args.tokens_per_step, f"suites.{suite}.tokens_per_step")
        per_step.add(count)
        notes["tokens"][name], notes["globs"][name], notes["folders"][name] = how, glob, found
        stated = trainer_runs.architecture(trainer_runs.read_config(last))
        if "hidden_size" not in stated:
            raise InitError(f"{last}/config.json states no hidden size (hidden_size, n_embd, d_model)")
        revisions = dict(discover=glob)
        if trainer_runs.step_regex_for(glob) != trainer_runs.DEFAULT_STEP_REGEX:
            revisions["step_regex"] = trainer_runs.step_regex_for(glob)
        models.append(dict(name=name, source="local", id=str(folder), revisions=revisions, **stated))
        notes.setdefault("last", last)
    if len(per_step) > 1:
        raise InitError(f"the runs record different tokens per step ({sorted(per_step)}); give each run a config of its "
                        "own, or one --tokens-per-step")
    tokenizer_dir = args.tokenizer or trainer_runs.find_tokenizer(runs[0][0], [n for n, _ in notes["folders"][models[0]["name"]]])
    if tokenizer_dir is None:
        raise InitError(f"no tokenizer saved in {runs[0][0]} or its checkpoints (tokenizer.json, tokenizer_config.json); "
                        "give its directory with --tokenizer")
    if not args.text:
        raise InitError("no eval text: give local .txt or .jsonl files with --text FILE ... (the eval token sample, "
                        "config key sample.corpus; best some text the run did not train on)")
    for path in args.text:
        if not path.is_file():
            raise InitError(f"--text {path}: no such file")
    from lmsat.checkpoints.loading import context_length

    contexts = [found for m in models
                if (found := context_length(trainer_runs.read_config(checkpoint_path(m["id"], notes["folders"][m["name"]][-1][0]))))]
    size = sample_size(args.text, Path(tokenizer_dir), min(contexts, key=lambda found: found[1], default=None))
    n_tokens, seq_len = size.n_tokens, size.seq_len
    in_checkpoint = any(Path(tokenizer_dir).resolve() == checkpoint_path(m["id"], name).resolve()
                        for m in models for name, _ in notes["folders"][m["name"]])
    notes.update(sample=size, tokenizer=Path(tokenizer_dir).resolve(), tokenizer_in_checkpoint=in_checkpoint)
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
    if args.bottleneck is not None:
        config["corpora"], config["bottleneck"] = bottleneck_section(config, args.bottleneck, size, Path(tokenizer_dir),
                                                                     notes)
    config["scaling"] = scaling_section(config)
    return config, notes


def bottleneck_section(config: dict, train_text: list[Path], size, tokenizer_dir: Path, notes: dict) -> tuple[dict, dict]:
    """(corpora, bottleneck) of a config whose models narrower than BOTTLENECK_WIDTH (all of
    them if none is) get rank-constrained heads (Figs. 6, 8), sized for what the text holds:
    the eval pairs from the eval text's windows outside the sample (a quarter of them, or
    all with `train_text`), the train pairs from `train_text` (at most
    BOTTLENECK_TRAIN_TOKENS) or the rest of those windows; ranks: powers of 2 (of 4 past
    BOTTLENECK_RANKS of them) below the narrowest model's d, and d; the paper's 286 steps,
    each of about one 286th of the train pairs, its learning-rate grid."""
    from lmsat.bottleneck.rank_grid import windows_per_shard
    from lmsat.checkpoints.loading import load_tokenizer
    from lmsat.data.corpus import document_lengths, iter_documents, pool_tokens

    models = config["suites"][config["run"]]["models"]
    narrow = [m for m in models if m["hidden_size"] < BOTTLENECK_WIDTH] or models
    seq_len = size.seq_len
    free = size.windows - size.n_seq  # the eval text's windows the sample leaves
    corpora = dict(config["corpora"])
    for path in train_text:
        if not path.is_file():
            raise InitError(f"--bottleneck {path}: no such file")
    if train_text:
        corpora["bottleneck-train"] = dict(type="text_files", files=[str(p.resolve()) for p in train_text])
        tokenizer = load_tokenizer(dict(source="local", id=str(tokenizer_dir), revision="main"), "own")
        spec = dict(type="text_files", files=[str(p) for p in train_text], text_field="text")
        pool_factor = 2  # schema default of bottleneck.pool_factor
        read = pool_tokens(document_lengths(iter_documents(spec, "bottleneck-train"), tokenizer,
                                            pool_factor * BOTTLENECK_TRAIN_TOKENS), pool_factor * BOTTLENECK_TRAIN_TOKENS)
        train_windows, eval_windows = min(read, BOTTLENECK_TRAIN_TOKENS) // seq_len, free
    else:
        eval_windows = max(1, free // 4)
        train_windows = min(free - eval_windows, BOTTLENECK_TRAIN_TOKENS // seq_len)
    if train_windows < 1 or eval_windows < 1:
        raise InitError(
            f"--bottleneck: the text gives {free} window(s) of {seq_len} tokens besides the eval sample's "
            f"{size.n_seq}, too few for the heads' train and eval pairs. Fix: give more --text, or training text: "
            "--bottleneck TRAIN_TEXT"
        )
    d = min(m["hidden_size"] for m in narrow)
    ranks = [2**k for k in range(max(d - 1, 1).bit_length()) if 2**k < d]
    if len(ranks) > BOTTLENECK_RANKS:
        ranks = [r for r in ranks if r.bit_length() % 2 == 1]  # powers of 4
    shard_tokens = 1_048_576  # schema default of bottleneck.shard_tokens
    positions = min(windows_per_shard(shard_tokens, seq_len), train_windows) * (seq_len - 1)  # of a train shard
    per_step = min(256 * 2048, max(256, math.ceil(train_windows * (seq_len - 1) / BOTTLENECK_STEPS)))  # the paper's at most
    head_seq_len = min(2048, per_step, positions)
    batch = min(256, math.ceil(per_step / head_seq_len))
    notes["bottleneck"] = dict(narrow=len(narrow) < len(models) or models[0]["hidden_size"] < BOTTLENECK_WIDTH,
                               train_text=[str(p) for p in train_text], free=free)
    section = dict(models=[m["name"] for m in narrow], ranks=ranks, full_rank=True,
                   train_corpus="bottleneck-train" if train_text else "", train_tokens=train_windows * seq_len,
                   eval_tokens=eval_windows * seq_len, seq_len=head_seq_len, batch_sequences=batch,
                   steps=BOTTLENECK_STEPS)
    return corpora, section


def scaling_section(config: dict) -> dict:
    """Fig. 1b's section: a fit of A and alpha on every model when the plan has two model
    sizes or more (B = E = 0: the published B, beta, E describe web text and 1e9+ tokens,
    not this run), else no Fig. 1b."""
    plan = load_plan(dict(config, scaling=dict(enabled=False)), SCHEMA)
    from lmsat.saturation.scaling import config_parameter_counts

    sizes = {}
    for name, model in plan.models.items():
        counts = config_parameter_counts(trainer_runs.read_config(checkpoint_path(model.id, model.final_revision)))
        if counts:  # every family lmsat.checkpoints.adapters knows
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
        "# The eval token sample (`lmsat analyse --text` and SaturationCallback choose the same):\n"
        + "".join(f"#   {line}\n" for line in textwrap.wrap(notes["sample"].describe(), 92)),
        dump({"corpora": config["corpora"], "sample": config["sample"]}),
        dump({"extraction": config["extraction"]}),
        metrics_comment(),
        "metrics: null\n",
        "# No Table 1 (lm-eval's tasks are on the hub), no n-gram W-error or ground truth (the toy\n"
        "# suite's)" + (".\n" if config["bottleneck"]["models"] else
                        ", no rank-constrained heads (`lmsat init --bottleneck` plans them).\n"),
        dump({k: config[k] for k in ("evaluation", "ngrams")}),
        bottleneck_comment(config, notes) + dump({"bottleneck": config["bottleneck"]}),
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


def metrics_comment() -> str:
    """The comment above `metrics: null`: every registered metric by name (lmsat.products.metrics)."""
    from lmsat.products.metrics import METRICS

    text = f"null: every registered metric (lmsat.products.metrics): {', '.join(METRICS)}."
    return "".join(f"# {line}\n" for line in textwrap.wrap(text, 94))


def bottleneck_comment(config: dict, notes: dict) -> str:
    """Where the bottleneck section's values came from (bottleneck_section), or how to get one."""
    bottleneck = config["bottleneck"]
    if not bottleneck["models"]:
        return ""
    found = notes["bottleneck"]
    who = (f"the models narrower than d={BOTTLENECK_WIDTH} (the paper's bottleneck)" if found["narrow"] else
           f"every model (none is narrower than d={BOTTLENECK_WIDTH}, where the paper finds the bottleneck)")
    source = (f"trained on {', '.join(found['train_text'])} (corpus bottleneck-train)" if found["train_text"] else
              f"trained on the eval text's {found['free']} windows outside the eval sample (a quarter of them "
              "are the eval pairs)")
    text = (f"Rank-constrained heads (Figs. 6, 8) on the final checkpoint of {who}, {source}. "
            f"{bottleneck['train_tokens']:,} train and {bottleneck['eval_tokens']:,} eval tokens; ranks: powers of 2 "
            "below d, and d; the paper's 286 steps and learning-rate grid, each step on one 286th of the train pairs "
            "(256 at least: a short text is gone over several times). The paper trained on 150M tokens: more text "
            "gives firmer heads.")
    return "".join(f"# {line}\n" for line in textwrap.wrap(text, 94))


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
    from lmsat.commands.init_storage import is_url, to_bucket, upload_commands

    for path in args.checkpoints:
        if is_url(str(path)):
            raise InitError(
                f"{path} is a storage URL: lmsat init reads the run on this machine (its checkpoints' configs, trainer "
                "states and tokenizer). Fix: give the run folder here, and its place in the bucket with --storage-url "
                "s3://bucket/prefix; init then writes the config for the bucket and prints the upload commands")
    config, notes = build_config(args)
    load_plan(config, SCHEMA)  # the config plans, or init fails naming the key
    uploads = ""
    if args.storage_url:
        if not str(args.storage_url).startswith("s3://"):
            raise InitError(f"--storage-url {args.storage_url}: give an s3:// URL (s3://bucket/prefix; any S3 API)")
        config, pairs = to_bucket(config, args.storage_url)
        uploads = "upload the run before planning it (planning reads its checkpoints' configs from the bucket):\n" \
            + upload_commands(pairs)
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
    return output, (f"wrote {output}: run {config['run']}, models {models}\n" + run_paths(config) + uploads
                    + next_commands(output))


def run_paths(config: dict) -> str:
    """Where the run's results and its eval sample will be (the paths rule sample_eval_tokens
    and every other rule write, results/<run>/...), relative to where snakemake runs."""
    run = config["run"]
    tokenizer = config["suites"][run]["tokenizer"]
    return (f"results: results/{run}/ (tables/, figures/, report/)\n"
            f"eval sample: results/{run}/samples/{config['sample']['corpus']}/{tokenizer}.h5 (`lmsat analyse CHECKPOINT "
            f"--sample` it; {config['sample']['n_tokens']:,} tokens in sequences of {config['sample']['seq_len']})\n")
