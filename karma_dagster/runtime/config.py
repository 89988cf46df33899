"""backbones.yaml, read once into typed specs: what each backbone is, whether it can run here, and the judge.

The one reader of that file and the one place a backbone setting's default is declared: the Dagster resource
mirrors `BackboneSettings` field by field (resources/backbones.py), the LLM client and the backbone builders
take it as it is. A key is never in the file: `api_key_env` names the environment variable that holds it.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from karma_dagster.runtime import paths

BACKBONE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")  # it prefixes asset keys, names KG namespaces and folders
DEFAULT_JUDGE = "local"
BACKBONE_KINDS = ("local", "litellm")
BACKBONE_MODES = ("multi_agent", "single_agent", "tools")
# KARMA's Table 2 ablations: the agents a backbone's chain may switch off (stages.py gives the stage a
# pass-through; the asset graph keeps its shape).
Ablation = Literal["summarizer", "conflict_resolution", "evaluator"]
ABLATIONS: tuple[str, ...] = get_args(Ablation)


class ConfigError(ValueError):
    """A configuration file is wrong; the message names the file, the key and what to do."""


MAX_DEBATE_ROUNDS = 5  # the debate's budget: at most 2 x 5 + 1 calls per clash


class BackboneSettings(BaseModel):
    """How one backbone answers: the kind, and for an LLM its litellm model string and call parameters."""

    model_config = ConfigDict(extra="forbid")
    kind: str = Field("local", description="'local' (offline classic NLP) or 'litellm'")
    model: str = Field("", description="litellm model string, e.g. openai/gpt-4o, deepseek/deepseek-chat")
    api_base: str | None = Field(None, description="OpenAI-compatible server, e.g. an Ollama or vLLM URL")
    api_key: str | None = Field(None, description="set with EnvVar; never written to files or metadata")
    temperature: float = 0.0
    max_tokens: int = 1024
    timeout: float = Field(60.0, description="seconds: the total deadline of one LLM call attempt (connect and all "
                           "reads; a slow-dripping server cannot stretch it); retries get their own")
    max_retries: int = 4
    concurrency: int = Field(4, description="concurrent calls to this backbone")
    response_format: Literal["auto", "json_schema", "json_object_schema", "ollama_format", "json_object", "none"] = \
        Field("auto", description="how an answer's JSON schema travels to the model (backbones/llm/structured.py): "
              "json_schema (OpenAI, vLLM, llama-server), json_object_schema (llama-cpp-python), ollama_format, "
              "json_object (JSON mode, no schema), none; auto tries them strongest first and falls back on refusal")
    seed: int | None = Field(None, ge=0, description="sampling seed sent with each request (llama.cpp, vLLM and OpenAI "
                             "take it): a sampled answer is then reproducible; sample i of MedKGent's N uses seed+i")
    context_tokens: int | None = Field(None, ge=256, description="the model's context window in tokens; a request "
                                       "that cannot fit with room for max_tokens is split where the agent can, else "
                                       "fails naming the agent and the sizes (never truncated). None: the server's "
                                       "own refusal is reported the same way")
    domain: str = Field("general biomedicine", description="genomics, proteomics, metabolomics, general biomedicine")
    mode: str = Field("multi_agent", description="'multi_agent' (the KARMA chain), 'single_agent' (the paper's "
                      "baseline: one generation extracts all triples; see backbones/single_agent.py) or 'tools' "
                      "(an LLM grows the KG through the validated KG tools by function calling; kg_tools/chain.py)")
    ablate: list[Ablation] = Field(default_factory=list, description="agents switched off in this backbone's chain "
                                   "(KARMA's ablations): summarizer, conflict_resolution, evaluator; each runs a "
                                   "pass-through instead (stages.py)")
    debate_rounds: int = Field(2, ge=1, le=MAX_DEBATE_ROUNDS, description="an LLM backbone's conflict resolution: "
                               "the rounds its two advocates (the new triple's, the KG's) argue before the judge "
                               "decides; each round is two calls, the verdict one more (the local backbone's rule "
                               "debate ignores it)")
    uncalibrated_admission: Literal["review", "theta"] = Field(
        "review", description="an LLM backbone whose evaluator scores were never calibrated (karma calibrate): "
        "'review' holds its triples for review (its scores are no probabilities); 'theta' admits by KARMA's "
        "mean(C, Cl, R) >= Theta, stored as uncalibrated scores")
    single_agent_chunk_chars: int = Field(
        32000, ge=1000, description="single_agent mode: a paper longer than this many characters is cut into "
        "paper-sized chunks (one generation each) so each fits the model's context with room for the answer")

    @model_validator(mode="after")
    def _ablations_fit_the_mode(self) -> "BackboneSettings":
        if len(set(self.ablate)) != len(self.ablate):
            raise ValueError(f"ablate lists an agent twice: {self.ablate}")
        if self.mode == "tools" and self.kind != "litellm":
            raise ValueError("mode 'tools' needs an LLM backbone (kind litellm): the local backbone calls no tools")
        if self.ablate and self.mode != "multi_agent":
            raise ValueError(f"ablate {self.ablate} applies to the multi_agent chain; mode {self.mode!r} has no "
                             "summarizer, conflict resolution or evaluator to switch off")
        return self


class BackboneEntry(BackboneSettings):
    """One entry of backbones.yaml: the settings, whether it is enabled, and where its key comes from."""

    enabled: bool = True
    api_key_env: str | None = Field(None, description="environment variable that holds the key")

    def key_missing(self) -> bool:
        return key_missing(self.api_key_env)

    def settings(self) -> BackboneSettings:
        """The settings without the file-only fields (the key is added by whoever reads the environment)."""
        return BackboneSettings(**self.model_dump(include=set(BackboneSettings.model_fields) - {"api_key"}))

    def keyed_settings(self, name: str) -> BackboneSettings:
        """The settings with the key read from `api_key_env` now, for a call outside a Dagster run (`karma ask`,
        the LLM controller; a run reads it through EnvVar: resources/backbones.config_of). An unset variable is
        the error `karma run --backbone` gives, naming it: never a fallback to another provider's variable."""
        if self.key_missing():
            raise ConfigError(not_configured(name, self.api_key_env))
        settings = self.settings()
        if self.api_key_env:
            settings = settings.model_copy(update={"api_key": os.environ[self.api_key_env]})
        return settings


class BackboneStatus(BaseModel):
    name: str
    kind: str
    model: str = ""
    mode: str = "multi_agent"
    ablate: list[str] = []  # the agents its chain switches off (KARMA's ablations)
    enabled: bool
    key_env: str | None = None
    configured: bool  # runnable here (no key needed, or its variable is set)

    @property
    def status(self) -> str:
        if not self.enabled:
            return "disabled"
        if not self.configured:
            return f"NOT CONFIGURED: set {self.key_env}"
        return "ok"

    @property
    def runnable(self) -> bool:
        return self.enabled and self.configured


class BackbonesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    judge: str = DEFAULT_JUDGE
    # the Central Controller's utility U (KARMA Eq. 4): an LLM backbone's name = U estimated by that LLM from each
    # pending paper's title; None or a local backbone = the rule-based U (scheduling/controller.py)
    controller: str | None = None
    backbones: dict[str, BackboneEntry] = Field(default_factory=dict)

    def enabled(self) -> dict[str, BackboneEntry]:
        return {name: entry for name, entry in self.backbones.items() if entry.enabled}

    def runnable(self) -> dict[str, BackboneEntry]:
        """Enabled backbones whose key (if they need one) is set: the ones that get a chain."""
        return {name: entry for name, entry in self.enabled().items() if not entry.key_missing()}

    def statuses(self) -> list[BackboneStatus]:
        return [
            BackboneStatus(name=name, kind=e.kind, model=e.model, mode=e.mode, ablate=list(e.ablate),
                           enabled=e.enabled, key_env=e.api_key_env, configured=not e.key_missing())
            for name, e in self.backbones.items()
        ]

    def judge_entry(self) -> tuple[str, BackboneEntry | None, str]:
        """(judge name, its entry when it is an LLM that can run, why it cannot judge: '' when it can)."""
        name = self.judge
        if name == DEFAULT_JUDGE:
            return name, None, ""
        entry = self.backbones.get(name)
        if entry is None:
            return name, None, f"judge {name!r} is not a backbone in backbones.yaml"
        if entry.kind != "litellm":
            return name, None, ""
        if entry.key_missing():
            return name, None, f"judge {name!r} NOT CONFIGURED: set {entry.api_key_env}"
        return name, entry, ""


    def controller_entry(self) -> tuple[str | None, BackboneEntry | None, str]:
        """(controller name, its entry when it is an LLM that can run, why it cannot: '' when it can or when no
        LLM controller is asked for)."""
        name = self.controller
        if not name:
            return None, None, ""
        entry = self.backbones.get(name)
        if entry is None:
            return name, None, f"controller {name!r} is not a backbone in backbones.yaml"
        if entry.kind != "litellm":
            return name, None, ""
        if entry.key_missing():
            return name, None, f"controller {name!r} NOT CONFIGURED: set {entry.api_key_env}"
        return name, entry, ""


def not_configured(name: str, key_env: str | None) -> str:
    """What `karma run --backbone` and `karma ask` say about a backbone whose key variable is unset."""
    return f"--backbone {name} (set {key_env}): NOT CONFIGURED"


def key_missing(key_env: str | None) -> bool:
    return bool(key_env) and not os.environ.get(key_env or "")


def _closest(word: str, options: list[str]) -> str:
    match = difflib.get_close_matches(word, options, n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _key_lines(node: yaml.Node | None, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """1-based line of every mapping key in the composed YAML, by key path, so errors can point at the line."""
    out: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            where = (*prefix, str(key.value))
            out[where] = key.start_mark.line + 1
            out.update(_key_lines(value, where))
    return out


def _at(lines: dict[tuple[str, ...], int], loc: tuple[Any, ...]) -> str:
    """'line N: ' of the deepest key of `loc` the file has, '' when none."""
    for n in range(len(loc), 0, -1):
        line = lines.get(tuple(str(p) for p in loc[:n]))
        if line is not None:
            return f"line {line}: "
    return ""


def _explain(path: Path, error: ValidationError, key_lines: dict[tuple[str, ...], int] | None = None) -> str:
    messages = []
    for err in error.errors():
        where = ".".join(str(p) for p in err["loc"])
        at = _at(key_lines or {}, err["loc"])
        if err["type"] == "extra_forbidden":
            known = list(BackboneEntry.model_fields) if len(err["loc"]) == 3 else list(BackbonesFile.model_fields)
            messages.append(f"{at}unknown key {where!r}{_closest(str(err['loc'][-1]), known)}")
        elif "ablate" in err["loc"] and err["type"] in ("literal_error", "list_type"):
            where = ".".join(str(p) for p in err["loc"][: err["loc"].index("ablate") + 1])
            what = (f"unknown ablation {err['input']!r}{_closest(str(err['input']), list(ABLATIONS))}"
                    if err["type"] == "literal_error" else f"expected a list such as [summarizer], got {err['input']!r}")
            messages.append(f"{at}{where}: {what}; ablatable agents: {', '.join(ABLATIONS)}")
        else:
            messages.append(f"{at}{where}: {err['msg']}")
    return f"{paths.display_path(path)}: " + "; ".join(messages)


_read_listener: Callable[[Path], None] | None = None


def listen_to_reads(listener: Callable[[Path], None] | None) -> Callable[[Path], None] | None:
    """Call `listener` with the path of every backbones.yaml read from now on (the CLI says which one it read);
    None stops. Returns the previous listener, to restore."""
    global _read_listener
    previous, _read_listener = _read_listener, listener
    return previous


def read_backbones(path: Path | str | None = None) -> BackbonesFile:
    """Parse and validate backbones.yaml (default: the project's, else the package's; paths.backbones_file);
    errors name the file, key and line."""
    path = Path(path) if path is not None else paths.backbones_file()
    shown = paths.display_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{shown}: cannot be read: {exc}") from exc
    if _read_listener is not None:
        _read_listener(path)
    try:
        data: Any = yaml.safe_load(text) or {}
        lines = _key_lines(yaml.compose(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{shown}: not valid YAML{where}: {what}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{shown}: line 1: expected a mapping with 'backbones:' (and optionally 'judge:'), "
                          f"got a {type(data).__name__}")
    if not isinstance(data.get("backbones") or {}, dict):
        raise ConfigError(f"{shown}: line {lines.get(('backbones',), 1)}: 'backbones' must be a mapping of name -> "
                          f"settings, got a {type(data['backbones']).__name__}")
    for name, entry in (data.get("backbones") or {}).items():
        if not isinstance(name, str) or not BACKBONE_NAME.match(name):
            raise ConfigError(f"{shown}: line {lines.get(('backbones', str(name)), '?')}: backbone name {name!r} must start with a letter or digit and use only "
                              "a-z, 0-9, '.', '-', '_'")
        if not isinstance(entry, dict):
            raise ConfigError(f"{shown}: line {lines.get(('backbones', name), '?')}: backbone {name!r} must be a mapping")
        if "api_key" in entry:
            raise ConfigError(f"{shown}: line {lines.get(('backbones', name, 'api_key'), '?')}: backbone {name!r} has an api_key: never put a key in a file; name the "
                              "environment variable that holds it in api_key_env")
    try:
        return BackbonesFile.model_validate({**data, "backbones": data.get("backbones") or {}})
    except ValidationError as exc:
        raise ConfigError(_explain(path, exc, lines)) from None


def state(status: BackboneStatus, loaded: Collection[str] | None = None) -> str:
    """enabled, disabled or NOT CONFIGURED (which variable to set); an enabled backbone that this code location
    did not load (`karma run --backbone ...`) says so."""
    if not status.runnable:
        return status.status
    return "enabled" if loaded is None or status.name in loaded else "enabled, not in this run (--backbone)"


def statuses_markdown(statuses: list[BackboneStatus], judge: str, loaded: Collection[str] | None = None) -> str:
    """A row per backbone of backbones.yaml; `loaded`: the backbones with a chain here (None: all runnable)."""
    lines = ["| backbone | state | mode | ablated | model |", "|---|---|---|---|---|"]  # state first: in sight
    for s in statuses:
        lines.append(f"| {s.name} | {state(s, loaded)} | {s.mode} | {', '.join(s.ablate) or '-'} | "
                     f"{s.model or s.kind} |")
    lines += ["", f"judge: {judge}"]
    return "\n".join(lines)
