#!/usr/bin/env bash
# The documentation site (mkdocs.yml): the guides, the protocol and the API
# reference generated from the docstrings, built with `mkdocs build --strict`
# (a broken link or a reference to a name that does not exist fails it) into
# build/site/ (open build/site/index.html). Installs the `docs` extra.
set -euo pipefail
source "$(dirname "$0")/env.sh"
make_venv
if [ "${CAIRNQ_SKIP_INSTALL:-}" != "1" ]; then
  install_cairnq "[postgres,test,docs]"
fi
# The docs extra of the installed cairnq (already there unless the install was
# skipped), read from its metadata, whatever the distribution is called.
docs_requirements="$("$VENV/bin/python" - <<'PY'
import importlib.metadata as md

dist = md.distribution(md.packages_distributions()["cairnq"][0])
for requirement in dist.requires or ():
    spec, _, marker = requirement.partition(";")
    if marker.replace("'", '"').replace(" ", "") == 'extra=="docs"':
        print(spec.strip())
PY
)"
if [ -z "$docs_requirements" ]; then
  echo "the installed cairnq has no 'docs' extra: reinstall it (run without CAIRNQ_SKIP_INSTALL)" >&2
  exit 1
fi
# shellcheck disable=SC2086  # one requirement per word
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check $docs_requirements
rm -rf "$ROOT/build/site"
cd "$ROOT"
NO_MKDOCS_2_WARNING=1 "$VENV/bin/python" -m mkdocs build --strict --quiet --site-dir "$ROOT/build/site"
echo "== documentation site in $ROOT/build/site/index.html"
