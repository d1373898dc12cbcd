"""The plan's plain data types: what lmsat.planning builds from a validated config.

`ModelEntry` (one model of a suite, its revisions resolved) and `Plan` (the validated config
and its models) import nothing of lmsat but its path names (lmsat.core.names), so every
layer can take them as arguments: the loaders and fetchers (lmsat.checkpoints.loading,
lmsat.checkpoints.fetch, lmsat.checkpoints.validation) as much as the workflow, which
passes a ModelEntry to its jobs as a param (as a dict of these fields).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class ModelEntry:
    """One model of a suite, with its revisions resolved."""

    name: str  # short name used in paths
    suite: str  # suite it belongs to
    source: str  # hub | local | toy
    id: str  # hub id, or directory for local models
    hidden_size: int  # d, checked when the model is loaded
    vocab_size: int  # head rows incl. padding (0 = unknown)
    n_params: int  # for the scaling law (0 = count from the model)
    tokenizer: str  # key of config["tokenizers"]
    tokens_per_step: int  # training tokens per optimizer step
    revisions: tuple[str, ...]  # revision names, in training order
    steps: tuple[int, ...]  # training step of each revision
    allow_pickle: bool  # allow .bin weights
    trust_remote_code: bool  # run the repository's own code
    key: str  # config key of this model, by name (suites.s.models[name=x]), for error messages
    num_layers: int = 0  # transformer blocks, checked when loaded (0 = unknown; sizes jobs)
    # The hub cache holding its checkpoints, "{revision}" where a revision's own goes; set by
    # the workflow, which decides where files go ("" = a local directory, or the default cache).
    hub_cache: str = ""
    gated: str = ""  # license to accept on the hub before downloading ("" = not gated)
    tied_head: bool | None = None  # head is the input embedding (None = not stated)
    # The commit holding each revision, for checkpoints that are commits on one branch, not
    # branches (lmsat.checkpoints.pins; () = each revision is itself the hub's name for it).
    commits: tuple[str, ...] = ()

    @property
    def hub_page(self) -> str:
        """The repository's hub page (where a gated repository's license is accepted)."""
        return f"https://huggingface.co/{self.id}"

    def cache_dir(self, revision: str) -> str | None:
        """Hub cache holding `revision` (`hub_cache` formatted); None: a local directory, or
        an entry the workflow gave no cache (from_pretrained's default one)."""
        return self.hub_cache.format(revision=revision) if self.hub_cache else None

    def hub_revision(self, revision: str) -> str:
        """What the hub and its cache call `revision`: its pinned commit, or the name itself."""
        if not self.commits:
            return revision
        self.step(revision)  # a revision not of this model names itself
        return self.commits[self.revisions.index(revision)]

    def at(self, revision: str) -> "ModelEntry":
        """This entry narrowed to one revision (a job's param: adding revisions to a suite
        must not rerun the jobs of those it already had)."""
        commits = (self.hub_revision(revision),) if self.commits else ()
        return replace(self, revisions=(revision,), steps=(self.step(revision),), commits=commits)

    def pretrained_source(self, revision: str, cache_dir: str | None = None) -> tuple[str, dict]:
        """(target, kwargs) for `from_pretrained(target, **kwargs)` to load `revision` offline:
        jobs never download weights (toy, local and fetched hub checkpoints are on disk).
        A local model's revision is a directory or file in its run folder; a hub/toy model is its id at `revision` in
        its hub cache (`cache_dir` overrides it, e.g. the copy fetched for a best revision)."""
        if self.source == "local":
            from lmsat.core.names import checkpoint_path  # a leaf: a file named unlike its revision (Lightning's)

            return str(checkpoint_path(self.id, revision)), dict(local_files_only=True)
        return self.id, dict(revision=self.hub_revision(revision), cache_dir=cache_dir or self.cache_dir(revision),
                             local_files_only=True)

    def step(self, revision: str) -> int:
        if revision not in self.revisions:
            raise ValueError(
                f"model {self.name}: revision {revision!r} is not one of its revisions ({', '.join(self.revisions)}); "
                "a table naming it (e.g. best_final.csv) was edited or made from another config: delete it and rerun"
            )
        return self.steps[self.revisions.index(revision)]

    @property
    def final_revision(self) -> str:
        return self.revisions[self.steps.index(max(self.steps))]

    @property
    def size(self) -> tuple[int, int, str]:
        """Sort key by size: non-embedding parameters (n_params when the config gives it, else
        12 L d^2 with L = num_layers, or a guessed max(6, d/64)), then d, then the name.
        Pythia's 1b and 1.4b share d = 2048 and differ by depth (16 vs 24 blocks)."""
        d = self.hidden_size
        blocks = self.n_params or int(12 * (self.num_layers or max(6, d / 64)) * d * d)
        return (blocks, d, self.name)


@dataclass(frozen=True)
class Plan:
    """The validated config (defaults filled) and the models it names."""

    config: dict
    models: dict[str, ModelEntry]
    # each model as it is trained (toy suite): its revisions before `select` cut them, so
    # that training depends only on what it trains, not on which revisions a slice reads
    trained: dict[str, ModelEntry] | None = None
    # what planning left out of the config and why (lmsat.planning.load.load_plan), for the user
    notes: tuple[str, ...] = ()
    # model -> optimizer steps per epoch of its training data, where its checkpoints record it
    # (a local run's trainer_state.json: lmsat.planning.discovery.steps_per_epoch); not in the
    # entries, which reach every job as a param: the tables that say what epochs mean read it
    steps_per_epoch: dict[str, float] = field(default_factory=dict)

    @property
    def run(self) -> str:
        return self.config["run"]

    def checkpoints(self) -> list[tuple[str, str]]:
        """Every (model, revision) pair, suite by suite, in training order."""
        return [(m.name, r) for m in self.models.values() for r in m.revisions]
