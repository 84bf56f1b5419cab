"""Sphinx configuration of gluon-sparse's documentation.

Build it with ``sphinx-build -W -b html docs docs/_build/html`` (``-W``: every
warning is an error, as in CI through ``tests/test_docs.py``).
"""
import os
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
suppress_warnings = ["mystnb.unknown_mime_type"]

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


def setup(app):
    app.connect("autodoc-skip-member", _skip_sklearn_request_methods)
