"""Sphinx configuration of gluon-sparse's documentation.

Build it with ``sphinx-build -W -b html docs docs/_build/html`` (``-W``: every
warning is an error, as in CI through ``tests/test_docs.py``).
"""
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Document the checkout next to these sources, also when another copy of
# gluon-sparse is installed.
sys.path.insert(0, ROOT)

import gluon_sparse  # noqa: E402

project = "gluon-sparse"
author = "gluon-sparse contributors"
copyright = "gluon-sparse contributors"
release = gluon_sparse.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    # MyST-NB renders Markdown pages and the tutorial notebooks; unlike
    # nbsphinx it needs no pandoc binary, so `pip install -e .[dev]` is all a
    # docs build needs.
    "myst_nb",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = ["_build", "**/.ipynb_checkpoints", "api/generated/*.md"]

# --- API reference -----------------------------------------------------------
# autosummary writes one page per object into api/generated/ (git-ignored).
# Start from an empty folder so that a page of an object that was renamed or
# removed does not linger and fail the build as "not in any toctree".
shutil.rmtree(os.path.join(HERE, "api", "generated"), ignore_errors=True)
autosummary_generate = True
autosummary_imported_members = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"
# numpydoc renders Parameters/Returns; autosummary's stub pages list the
# members themselves, so numpydoc must not add a second, unresolvable table.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# --- Notebooks and Markdown ---------------------------------------------------
# The tutorials are committed with the outputs of a full-size run (see
# tutorials/README in the guide); executing them here would take minutes and
# change the published numbers. tests/test_tutorials.py executes them.
nb_execution_mode = "off"
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3
# Notebook outputs carry MIME types Sphinx has no use for (widgets state etc.);
# showing the best available one is the intent, not a problem to report.
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
suppress_warnings = [
    "mystnb.unknown_mime_type",
    # numpydoc links an "Attributes" entry that names a property to
    # ``.name``; for a property inherited from a documented base class
    # (LibSVMDataset.num_features from CSRDataset) Sphinx then finds several
    # ``num_features`` and warns that the link is ambiguous. The link is still
    # made; the ambiguity is not an error in the docstrings.
    "ref.python",
]

# --- HTML ---------------------------------------------------------------------
html_theme = "furo"
html_title = "gluon-sparse %s" % release
html_static_path = []


def _skip_sklearn_request_methods(app, what, name, obj, skip, options):
    """Leave out the ``set_*_request`` methods scikit-learn generates on every estimator.

    They are metadata-routing plumbing whose docstrings point into
    scikit-learn's own documentation (glossary terms, labels), which does not
    exist here.
    """
    if name.startswith("set_") and name.endswith("_request"):
        return True
    return None


_GLUON_SECTIONS = ("Inputs", "Outputs")


def _is_section_header(lines, i):
    return (i + 1 < len(lines) and lines[i].strip() and set(lines[i + 1].strip()) == {"-"}
            and len(lines[i + 1].strip()) >= len(lines[i].strip()))


def _gluon_sections_to_rubrics(app, what, name, obj, options, lines):
    """Keep Gluon's "Inputs" / "Outputs" sections, which numpydoc does not know.

    Gluon blocks document the arrays their forward pass takes and returns in
    sections named Inputs and Outputs (as MXNet's own blocks do). numpydoc
    drops unknown sections, so they are moved, as rubrics with one bullet per
    entry, to the end of the extended summary, which numpydoc passes through.
    Runs before numpydoc (lower priority number).
    """
    extracted, kept, i = [], [], 0
    while i < len(lines):
        if lines[i].strip() in _GLUON_SECTIONS and _is_section_header(lines, i):
            extracted += ["", ".. rubric:: " + lines[i].strip(), ""]
            i += 2
            while i < len(lines) and not _is_section_header(lines, i):
                text = lines[i].strip()
                if text and not lines[i].startswith((" ", "\t")):
                    entry, _, kind = text.partition(" : ")
                    extracted.append("- ``%s``: %s" % (entry, kind) if kind else "- " + text)
                elif text:
                    extracted.append("  " + text)
                i += 1
            continue
        kept.append(lines[i])
        i += 1
    if not extracted:
        return
    first_section = next((j for j in range(len(kept)) if _is_section_header(kept, j)), len(kept))
    lines[:] = kept[:first_section] + extracted + [""] + kept[first_section:]


_RELATIVE_MD_LINK = re.compile(r"\[([^\]]+)\]\((?!https?://|mailto:|#)([^)\s]+)\)")


def _unlink_relative_paths_in_results(app, relative_path, parent_docname, content):
    """Show relative links of the included benchmarks/RESULTS.md as plain text.

    RESULTS.md is written for reading on GitHub, where a link such as
    ``[bench_adam.py](bench_adam.py)`` opens the script. Here that file is not
    a page of the documentation and MyST would warn (an error under ``-W``),
    so the link text is kept and the target dropped.
    """
    if os.path.basename(str(relative_path)) == "RESULTS.md":
        content[0] = _RELATIVE_MD_LINK.sub(r"\1", content[0])


def setup(app):
    app.connect("include-read", _unlink_relative_paths_in_results)
    app.connect("autodoc-skip-member", _skip_sklearn_request_methods)
    app.connect("autodoc-process-docstring", _gluon_sections_to_rubrics, priority=100)
