"""The prompt store: versioned prompt files are the only place prompt text lives.

Layout (see prompts/README.md): `prompts/<agent>/<agent>.vN.jinja`, an optional YAML front matter between `---`
lines, then a `=== system ===` part and a `=== user ===` part, each a Jinja template rendered with
StrictUndefined. A change of wording is a new version file; the file's sha256 is part of every prompt id, of the
response-cache key and of the `code_version` the assets report, so a change can never replay stale answers.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import yaml

from karma_dagster.runtime import paths

_FILE_RE = re.compile(r"^(?P<agent>[a-z][a-z0-9_]*)\.v(?P<version>\d+)\.jinja$")
_FRONT_RE = re.compile(r"\A---[ \t]*\n(?P<meta>.*?)\n---[ \t]*\n", re.S)
_PART_RE = re.compile(r"^===[ \t]*(system|user)[ \t]*===[ \t]*$", re.M)


class PromptError(ValueError):
    """A prompt file is missing or malformed, or a render lacks a variable."""


def default_prompt_root() -> Path:
    """The project's `prompts/` folder (the checkout's, or the copy bundled in a wheel)."""
    return paths.prompts_dir()


def _json_filter(value: Any) -> str:
    # jinja's own `tojson` HTML-escapes <, >, & and ': models should see the text as it is.
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class RenderedPrompt:
    """What the client sends: the messages plus the identity that keys caches and recordings."""

    agent: str
    version: int
    prompt_id: str  # "reader.v1"
    sha256: str  # first 12 hex of the file's sha256
    messages: list[dict[str, str]]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def versioned_id(self) -> str:
        return f"{self.prompt_id}@{self.sha256}"


@dataclass(frozen=True)
class PromptFile:
    agent: str
    version: int
    path: Path
    text: str

    @property
    def prompt_id(self) -> str:
        return f"{self.agent}.v{self.version}"

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:12]

    @cached_property
    def _parts(self) -> tuple[dict[str, Any], str, str]:
        body, meta = self.text, {}
        front = _FRONT_RE.match(body)
        if front:
            try:
                meta = yaml.safe_load(front.group("meta")) or {}
            except yaml.YAMLError as exc:
                raise PromptError(f"prompt {self.path.name}: front matter is not valid YAML: {exc}") from exc
            if not isinstance(meta, dict):
                raise PromptError(f"prompt {self.path.name}: front matter must be a YAML mapping")
            body = body[front.end():]
        pieces = _PART_RE.split(body)
        # pieces: [preamble, 'system', text, 'user', text]
        names = pieces[1::2]
        if names != ["system", "user"]:
            raise PromptError(
                f"prompt {self.path.name}: needs exactly one '=== system ===' then one '=== user ===' line, "
                f"found {names or 'none'}"
            )
        if pieces[0].strip():
            raise PromptError(f"prompt {self.path.name}: text before '=== system ===' (put metadata in front matter)")
        return meta, pieces[2].strip("\n"), pieces[4].strip("\n")

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self._parts[0])


class PromptStore:
    """Reads `root/<agent>/<agent>.vN.jinja`; `render` gives the chat messages for one call."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_prompt_root()
        if not self.root.is_dir():
            raise PromptError(f"prompt root {self.root} is not a directory")
        self._env = jinja2.Environment(
            undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False,
            trim_blocks=True, lstrip_blocks=True,
        )
        self._env.filters["json"] = _json_filter
        self._templates: dict[tuple[str, str, str], jinja2.Template] = {}

    # ------------------------------------------------------------------ discovery
    def agents(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and self.versions(p.name))

    def versions(self, agent: str) -> list[int]:
        folder = self.root / agent
        if not folder.is_dir():
            return []
        found = []
        for path in folder.iterdir():
            m = _FILE_RE.match(path.name)
            if m and m.group("agent") == agent:
                found.append(int(m.group("version")))
        return sorted(found)

    def latest(self, agent: str) -> PromptFile:
        versions = self.versions(agent)
        if not versions:
            raise PromptError(f"no prompt files for agent {agent!r} under {self.root / agent}")
        return self.get(agent, versions[-1])

    def get(self, agent: str, version: int | None = None) -> PromptFile:
        if version is None:
            return self.latest(agent)
        path = self.root / agent / f"{agent}.v{version}.jinja"
        if not path.is_file():
            raise PromptError(f"prompt {agent}.v{version} not found (expected {path}); have {self.versions(agent)}")
        return PromptFile(agent=agent, version=version, path=path, text=path.read_text(encoding="utf-8"))

    # ------------------------------------------------------------------ rendering
    def render(self, agent: str, version: int | None = None, **variables: Any) -> RenderedPrompt:
        prompt = self.get(agent, version)
        meta, system_src, user_src = prompt._parts
        messages = []
        for role, source in (("system", system_src), ("user", user_src)):
            template = self._template(prompt, role, source, variables)
            try:
                content = template.render(**variables)
            except jinja2.UndefinedError as exc:
                raise PromptError(f"prompt {prompt.prompt_id} ({role}): {exc}") from exc
            messages.append({"role": role, "content": content.strip()})
        return RenderedPrompt(agent=agent, version=prompt.version, prompt_id=prompt.prompt_id,
                              sha256=prompt.sha256, messages=messages, metadata=meta)

    def _template(self, prompt: PromptFile, role: str, source: str, variables: dict[str, Any]) -> jinja2.Template:
        try:
            ast = self._env.parse(source)
        except jinja2.TemplateSyntaxError as exc:
            raise PromptError(f"prompt {prompt.prompt_id} ({role}): template syntax error line {exc.lineno}: {exc}") from exc
        missing = sorted(jinja2.meta.find_undeclared_variables(ast) - set(variables))
        if missing:
            raise PromptError(
                f"prompt {prompt.prompt_id} ({role}) needs variable(s) {', '.join(missing)} that were not given"
            )
        key = (prompt.prompt_id, prompt.sha256, role)
        if key not in self._templates:
            self._templates[key] = self._env.from_string(source)
        return self._templates[key]

    # ------------------------------------------------------------------ versions for Dagster
    def prompt_id(self, agent: str, version: int | None = None) -> str:
        prompt = self.get(agent, version)
        return f"{prompt.prompt_id}@{prompt.sha256}"

    def code_version_for(self, agents: list[str] | tuple[str, ...], versions: dict[str, int] | None = None) -> str:
        """A short hash of the prompt files `agents` use: a changed or new prompt version changes it."""
        versions = versions or {}
        digest = hashlib.sha256()
        for agent in sorted(set(agents)):
            prompt = self.get(agent, versions.get(agent))
            digest.update(f"{prompt.prompt_id}@{prompt.sha256}\n".encode())
        return digest.hexdigest()[:16]
