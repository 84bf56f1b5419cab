"""The Sphinx documentation builds without a single warning and covers the API.

One ``sphinx-build -W`` (warnings are errors) into a temporary directory is
shared by the tests of this file; they then read what it produced: the object
inventory (every public object documented), the benchmarks page (RESULTS.md
included, not copied) and the rendered tutorials (with their outputs).
"""
import importlib
import os
import pkgutil
import re
import subprocess
import sys

import pytest

import gluon_sparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
TUTORIALS = os.path.join(ROOT, "tutorials")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def html_dir(tmp_path_factory):
    """Build the HTML documentation once; fail with Sphinx's output on any warning."""
    out = tmp_path_factory.mktemp("docs")
    html = out / "html"
    # A separate process: Sphinx imports every documented module and the
    # extensions' state must not leak into the other tests.
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-q",
         "-d", str(out / "doctrees"), DOCS, str(html)],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, ("sphinx-build -W failed (exit %d):\n%s\n%s"
                                  % (proc.returncode, proc.stdout[-5000:], proc.stderr[-10000:]))
    return html


def _public_modules():
    """Every importable gluon_sparse module whose dotted name has no private part."""
    modules = [gluon_sparse]
    for info in pkgutil.walk_packages(gluon_sparse.__path__, "gluon_sparse."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        modules.append(importlib.import_module(info.name))
    return modules


def _documented_names(html_dir):
    from sphinx.util.inventory import InventoryFile

    with open(html_dir / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", os.path.join)
    names = set()
    for kind, entries in inventory.items():
        if kind.startswith("py:"):
            names.update(entries)
    return names


def test_every_public_object_is_in_the_api_reference(html_dir):
    documented = _documented_names(html_dir)
    missing = []
    for module in _public_modules():
        for name in getattr(module, "__all__", ()):
            if name.startswith("__"):
                continue
            # Documented under the module itself or any package re-exporting it.
            parts = module.__name__.split(".")
            owners = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
            if not any("%s.%s" % (owner, name) in documented for owner in owners):
                missing.append("%s.%s" % (module.__name__, name))
    assert not missing, ("public objects missing from docs/api/index.rst: %s"
                         % ", ".join(sorted(missing)))


def test_api_pages_render_numpydoc_sections(html_dir):
    page = (html_dir / "api" / "generated" / "gluon_sparse.data.SparseDataLoader.html").read_text()
    # numpydoc turned "Parameters" into a field list with the parameter names.
    assert "Parameters" in page and "batch_size" in page and "prefetch" in page


def _text(html):
    return re.sub(r"<[^>]+>", " ", html)


def test_benchmarks_page_includes_results_md(html_dir):
    with open(os.path.join(ROOT, "benchmarks", "RESULTS.md")) as f:
        headings = [line.lstrip("#").strip() for line in f if line.startswith("## ")]
    assert headings
    page = _text((html_dir / "benchmarks.html").read_text())
    for heading in headings:
        # Sphinx keeps the words; only markup (code spans, links) differs.
        words = re.findall(r"[A-Za-z]{4,}", heading)
        assert all(word in page for word in words), heading


def test_tutorials_are_rendered_with_their_outputs(html_dir):
    notebooks = sorted(n for n in os.listdir(TUTORIALS) if n.endswith(".ipynb"))
    assert len(notebooks) == 5, notebooks
    for notebook in notebooks:
        page = html_dir / "notebooks" / notebook.replace(".ipynb", ".html")
        html = page.read_text()
        assert "cell_output" in html, "%s was rendered without outputs" % notebook
        with open(os.path.join(TUTORIALS, notebook)) as f:
            has_plots = '"image/png"' in f.read()
        if has_plots:
            assert "<img" in html, "%s: its plots are missing from the page" % notebook
