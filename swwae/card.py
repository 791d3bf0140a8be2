"""The model card of a model folder: ``README.md``, as the Hugging Face Hub and timm write one.
Pure Python (+ PyYAML); huggingface_hub's card tools are used when the ``hub`` extra is there.

The card opens with the Hub's YAML metadata (``library_name: swwae``, tags, license, the data
set and, when the run's ``metrics.json`` is found, a ``model-index`` with its test metrics),
then says what the network is in the paper's notation, what it scored and how to load it.
With huggingface_hub installed the card is built by its ``ModelCardData`` / ``EvalResult`` /
``ModelCard``; without it, the same text is written from the same values (a test checks that
the two agree), so a folder's card never depends on which extras the writer had.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from swwae.datasets import DATA_SETS, DataSet
from swwae.errors import Unreadable
from swwae.files import read_json
from swwae.loss_terms import weight_of
from swwae.settings import pool_mode_of
from swwae.stored import parse_metrics
from swwae.version import __version__

CARD_FILE = "README.md"
LICENSE = "mit"
PAPER_URL = "https://arxiv.org/abs/1506.02351"
TAGS = ["swwae", "autoencoder", "what-where", "unpooling", "image-reconstruction"]
# test metric -> (Hub task, Hub metric id, what the card calls it)
REPORTED = {
    "test/acc": ("image-classification", "Image Classification", "accuracy", "test accuracy"),
    "test/recon_mse": (
        "image-to-image",
        "Image Reconstruction",
        "mse",
        "test reconstruction MSE (per pixel, [0, 1] scale)",
    ),
}


@dataclass(frozen=True)
class RunMetrics:
    """Test metrics of a run, as its ``metrics.json`` reports them, and the checkpoint they were
    measured on (``values`` is empty when none are known)."""

    values: dict = field(default_factory=dict)
    checkpoint: str | None = None
    checkpoint_sha256: str | None = None  # the bytes of ``checkpoint`` measured, as metrics.json records them


NO_METRICS = RunMetrics()


@dataclass(frozen=True)
class RunFacts:
    """What the card says of the run a network comes from: its name, its data set (an entry of
    ``swwae.datasets``; None: not recorded) and its output folder (where its ``metrics.json``
    is)."""

    name: str = "swwae"
    dataset: DataSet | None = None
    output_dir: str | None = None
    trains_decoder: bool = True  # False: model.lambda_rec = 0 (a classifier alone), the decoder as initialised

    @classmethod
    def of(cls, run_config: Mapping | None) -> RunFacts:
        """The facts of a stored run config (a model folder's, a checkpoint's): the one place
        the card reads one. A data class the data-set table does not know is a ConfigError
        (one line), not a card without its data set."""
        config = run_config or {}
        target = (config.get("data") or {}).get("_target_")
        folder = (config.get("paths") or {}).get("output_dir")
        model = config.get("model")
        try:  # the image's own reconstruction term, as the loss weighs it (its default where unset)
            trains_decoder = not isinstance(model, Mapping) or weight_of(model, "lambda_rec") > 0
        except (TypeError, ValueError):  # not a number: its MSE stands as measured
            trains_decoder = True
        return cls(
            name=str(config.get("run_name") or "swwae"),
            dataset=None if target is None else DATA_SETS.of_target(target, "the run config's data._target_"),
            output_dir=folder if isinstance(folder, str) else None,
            trains_decoder=trains_decoder,
        )


NO_RUN = RunFacts()

# helpers


def run_metrics(output_dir: str | Path | None, checkpoint: str | Path | None = None) -> RunMetrics:
    """The test metrics of the run whose output folder is ``output_dir``, from its
    ``metrics.json``, if that run finished. With ``checkpoint``, only if ``metrics.json``
    reports that very file (another checkpoint of the run, ``last.ckpt`` say, scored
    something else)."""
    if output_dir is None:
        return NO_METRICS
    path = Path(output_dir) / "metrics.json"
    try:  # with bounds: the folder is named by a file
        summary = parse_metrics(read_json(path, "metrics.json"), f"metrics.json {path}")
    except Unreadable:
        return NO_METRICS
    if summary.get("status") != "ok":
        return NO_METRICS
    measured_on = summary.get("checkpoint")
    if checkpoint is not None and (measured_on is None or Path(measured_on).resolve() != Path(checkpoint).resolve()):
        return NO_METRICS
    values = {
        name: float(value)
        for name, value in (summary.get("metrics") or {}).items()
        if name in REPORTED and isinstance(value, (int, float)) and math.isfinite(value)
    }
    return RunMetrics(values, measured_on, summary.get("checkpoint_sha256")) if values else NO_METRICS


def metadata(name: str, dataset: DataSet | None, metrics: RunMetrics) -> dict:
    """The YAML block's values, in the order huggingface_hub's ``ModelCardData`` writes them;
    ``model-index`` as its ``eval_results_to_model_index`` builds it, without the empty fields."""
    data = {
        "datasets": [dataset.hub_id] if dataset and dataset.hub_id else None,
        "library_name": "swwae",
        "license": LICENSE,
        "metrics": [REPORTED[k][2] for k in metrics.values] or None,
        "tags": list(TAGS),
    }
    data = {key: value for key, value in data.items() if value is not None}
    if metrics.values and dataset and dataset.hub_id:
        data["model-index"] = [
            {
                "name": name,
                "results": [
                    {
                        "task": {"type": REPORTED[k][0], "name": REPORTED[k][1]},
                        "dataset": {"name": dataset.card_name, "type": dataset.hub_id, "split": "test"},
                        "metrics": [{"type": REPORTED[k][2], "value": round(v, 6), "name": REPORTED[k][3]}],
                    }
                    for k, v in metrics.values.items()
                ],
            }
        ]
    return data


def metadata_yaml(name: str, dataset: DataSet | None, metrics: RunMetrics) -> str:
    """The YAML block, by huggingface_hub's ``ModelCardData`` when it is installed."""
    try:
        from huggingface_hub import EvalResult, ModelCardData
    except ImportError:
        import yaml

        return yaml.dump(metadata(name, dataset, metrics), sort_keys=False, allow_unicode=True).strip()
    results = (
        [
            EvalResult(
                task_type=REPORTED[k][0],
                task_name=REPORTED[k][1],
                dataset_type=dataset.hub_id,
                dataset_name=dataset.card_name,
                dataset_split="test",
                metric_type=REPORTED[k][2],
                metric_value=round(v, 6),
                metric_name=REPORTED[k][3],
            )
            for k, v in metrics.values.items()
        ]
        if dataset and dataset.hub_id
        else []
    )
    values = metadata(name, dataset, metrics)
    card_data = ModelCardData(
        datasets=values.get("datasets"),
        library_name="swwae",
        license=LICENSE,
        metrics=values.get("metrics"),
        tags=list(TAGS),
        model_name=name if results else None,
        eval_results=results or None,
    )
    return card_data.to_yaml()


def body(net, name: str, dataset: DataSet | None, metrics: RunMetrics, trains_decoder: bool = True) -> str:
    settings = net.settings
    shape = "x".join(map(str, settings.get("image_shape") or ()))
    classes = settings.get("num_classes")
    head = (
        f"a classifier over {classes} classes" if getattr(net, "classifier", None) is not None else "no classifier head"
    )
    pooling = pool_mode_of(settings.get("pool_mode"), "the network's pool_mode")  # ConfigError if unknown
    decoder = (
        "Each decoder stage unpools with the where of its encoder stage"
        if pooling.keeps_where
        else "The decoder stages go back up without a where (a baseline)"
    )
    lines = [
        f"# {name}",
        "",
        f"A Stacked What-Where Auto-encoder (SWWAE; Zhao, Mathieu, Goroshin & LeCun, [arXiv 1506.02351]({PAPER_URL})),",
        f"written by swwae {__version__}: `config.json` (the network's settings and the run config) and",
        "`model.safetensors` (the weights: tensors only, no pickle).",
        "",
        "## Network",
        "",
        f"`{net.arch}` in the paper's notation: `(C)Kc` is a convolution with C maps and a KxK kernel,",
        f"`Pp` a PxP pooling that closes a stage, `Nfc` the classifier. {decoder}.",
        f"Pooling: {pooling.describe(settings)}. Images {shape}; {head}.",
        *(
            []
            if trains_decoder
            else [
                "The decoder was not trained (the run's `model.lambda_rec` is 0: a classifier alone), so its",
                "reconstructions are those of its initial weights, and no reconstruction error is reported.",
            ]
        ),
        "",
        "## Training data",
        "",
        (dataset.card_name if dataset else "Not recorded with this network.") + ".",
        "",
        "## Test metrics",
        "",
    ]
    if metrics.values:
        lines += ["| metric | value |", "|---|---:|"]
        lines += [f"| {REPORTED[k][3]} | {v:.4f} |" for k, v in metrics.values.items()]
        source = f" `{Path(metrics.checkpoint).name}`" if metrics.checkpoint else ""
        lines += ["", f"On the test split, for the run's checkpoint{source}, as its `metrics.json` reports them."]
    else:
        lines += ["None recorded: no `metrics.json` of its run was found that reports these very weights."]
    lines += [
        "",
        "## Use it",
        "",
        "```python",
        "import swwae",
        "",
        'net = swwae.load("path/to/this/folder")     # plain torch, eval mode; imports no Lightning, unpickles nothing',
        "out = net(images)                           # out.recon, out.logits, out.whats, out.wheres",
        "```",
        "",
        'With huggingface_hub (`pip install "swwae[hub]"`), from the Hub or a local folder:',
        "",
        "```python",
        "from swwae.hub import SWWAE",
        "",
        'net = SWWAE.from_pretrained("user/repo")    # downloads config.json and model.safetensors only',
        "```",
    ]
    return "\n".join(lines) + "\n"


# the card


def model_card(net, *, run: RunFacts = NO_RUN, metrics: RunMetrics | None = None) -> str:
    """The text of ``net``'s model card: ``run`` says its run (name, data set, output folder;
    ``RunFacts.of(run_config)``), ``metrics`` its test metrics (default: those of the run's
    ``metrics.json``, ``run_metrics``, whichever checkpoint they were measured on; a model
    folder's card has those of ``swwae.pretrained.measured_metrics``, measured on its own
    weights, or none; a run that trained no decoder reports no reconstruction error). A pooling
    mode the mode table does not know is a ConfigError (one line), as is a data set the data-set
    table does not know."""
    metrics = run_metrics(run.output_dir) if metrics is None else metrics
    if not run.trains_decoder:  # the MSE of a decoder never trained is no result of this network
        values = {k: v for k, v in metrics.values.items() if k != "test/recon_mse"}
        metrics = RunMetrics(values, metrics.checkpoint, metrics.checkpoint_sha256) if values else NO_METRICS
    text = (
        f"---\n{metadata_yaml(run.name, run.dataset, metrics)}\n---\n\n"
        f"{body(net, run.name, run.dataset, metrics, run.trains_decoder)}"
    )
    try:
        from huggingface_hub import ModelCard
    except ImportError:
        return text
    return str(ModelCard(text))  # parsed and written back by the Hub's own card class
