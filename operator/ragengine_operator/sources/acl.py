"""The metadata a source gives each of its documents: the spec's ``metadata``, ``screen_retrieved``, and
the document ACL, source-wide (``acl``) or by path (``aclRules``). Pure.

``SourceMetadata(source)(path)`` -> that metadata, or None when the source has ``aclRules`` and none of
them matches the path: the document is then not indexed at all (fail closed: a file nobody classified
is never shown to everyone), and the sync reports it as skipped with ``NO_RULE``.

Rule paths are gitignore-style globs matched through RE2 (linear time, as ``git.paths``), against the
document's path relative to the source's root: the git path, the S3 key after the prefix, the ConfigMap
key, an HTTP URL's path without its leading '/'. The first rule whose globs match wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import pathspec

from ragengine_operator.spec.sources import Source

NO_RULE = "no aclRules entry matches this path: not indexed (fail closed)"


def compile_globs(globs: list[str]) -> pathspec.PathSpec:
    return pathspec.PathSpec.from_lines("gitignore", globs, backend="re2")


class SourceMetadata:
    def __init__(self, source: Source) -> None:
        self.base: dict[str, Any] = {**(source.metadata or {}),
                                     **({"screen_retrieved": "true"} if source.screen else {})}
        if source.acl is not None:
            self.base["acl"] = list(source.acl)
        self.rules = [(compile_globs(r.paths), list(r.acl)) for r in source.acl_rules or ()]
        self.http = source.http is not None

    def rule_path(self, path: str) -> str:
        return urlsplit(path).path.lstrip("/") if self.http else path

    def __call__(self, path: str) -> Mapping[str, Any] | None:
        if not self.rules:
            return self.base
        relative = self.rule_path(path)
        for spec, acl in self.rules:
            if spec.match_file(relative):
                return {**self.base, "acl": acl}
        return None
