"""A page whose whole text is ``<!-- include: PATH -->`` shows the repository
file PATH (CHANGELOG.md, CONTRIBUTING.md, bench/RESULTS.md keep living at the
root, where GitHub and contributors look for them). Their links are written
for the repository's root, so each is mapped to the site's page for it."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

INCLUDE = re.compile(r"^\s*<!--\s*include:\s*(\S+)\s*-->\s*$")
LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)#\s]+)(#[^)\s]*)?\)")
# Repository paths that have a page of their own in the site.
PAGES = {
    "README.md": "index.md",
    "CHANGELOG.md": "changelog.md",
    "CONTRIBUTING.md": "contributing.md",
    "bench/RESULTS.md": "results.md",
}


def _site_target(repo_path: str) -> str | None:
    if repo_path in PAGES:
        return PAGES[repo_path]
    if repo_path.startswith("docs/"):
        inside = repo_path[len("docs/") :]
        return inside + "README.md" if inside.endswith("/") or inside == "" else inside
    return None


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    match = INCLUDE.match(markdown)
    if not match:
        return markdown
    source = match.group(1)
    root = Path(config["config_file_path"]).parent
    text = (root / source).read_text()
    page_dir = posixpath.dirname(page.file.src_uri)

    def relink(link: re.Match[str]) -> str:
        label, target, anchor = link.group(1), link.group(2), link.group(3) or ""
        if "://" in target or target.startswith("mailto:"):
            return link.group(0)
        repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(source), target))
        if target.endswith("/"):
            repo_path += "/"
        site = _site_target(repo_path)
        if site is None:  # a file of the repository that is no page: named, not linked
            return f"{label} (`{repo_path}`)"
        return f"[{label}]({posixpath.relpath(site, page_dir or '.')}{anchor})"

    return LINK.sub(relink, text)
