"""Every tutorial notebook runs top to bottom (small sizes) and says what its text claims.

The notebooks are executed with nbclient in a fresh kernel, from the
``tutorials/`` directory as a reader would run them, with
``GLUON_SPARSE_TUTORIAL_SMALL=1`` so that each finishes in seconds (about two
minutes for the four on a loaded 2-core machine). The committed copies are not
modified. The same checks of the printed results (equalities the tutorials
demonstrate, learning above chance, plots drawn) are applied to the small run
and to the committed full-size outputs.
"""
import os
import re

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUTORIALS = os.path.join(ROOT, "tutorials")
NOTEBOOKS = sorted(name for name in os.listdir(TUTORIALS) if name.endswith(".ipynb"))

# Per cell; the slowest small-mode cell (a two-worker parameter-server job)
# takes a few seconds on an idle 2-core machine.
CELL_TIMEOUT_S = 300


def _read(name):
    return nbformat.read(os.path.join(TUTORIALS, name), as_version=4)


def _stdout(notebook):
    return "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                   for out in cell.get("outputs", []) if out.output_type == "stream")


def _numbers(pattern, text):
    found = [float(value) for value in re.findall(pattern, text)]
    assert found, "no output matches %r" % pattern
    return found


def _check_01(text):
    # The three first layers compute the same thing...
    assert all(gap <= 1e-6 for gap in _numbers(r"to row_sparse variant: ([-+.e\d]+)", text))
    # ...and the row_sparse gradient stores the batch's feature rows only.
    stored = re.search(r"stype=row_sparse stores \((\d+), \d+\)", text).group(1)
    assert "features in this batch: %s" % stored in text
    assert _numbers(r"CSR is (\d+)x smaller", text)[0] > 1
    assert _numbers(r"held-out accuracy ([.\d]+)", text)[-1] > 0.6  # chance: 0.5


def _check_02(text):
    assert "SparseAdam == MXNet standard Adam, bitwise: True" in text
    assert _numbers(r"standard and the deferred curves: ([-+.e\d]+)", text)[0] <= 1e-6


def _check_03(text):
    assert _numbers(r"fit: .* held-out accuracy ([.\d]+)", text)[0] > 0.5  # chance: 0.25
    # The estimator and the command line agree on the same files and model.
    in_python = _numbers(r"held-out accuracy from the LibSVM files: ([.\d]+)", text)[0]
    on_cli = _numbers(r"samples  accuracy ([.\d]+)", text)[0]
    assert abs(in_python - on_cli) <= 1e-3, (in_python, on_cli)
    assert re.search(r"\d+ predictions written to", text)


def _check_04(text):
    assert _numbers(r"on 1 and on 2 devices: ([-+.e\d]+)", text)[0] <= 1e-5
    assert re.search(r"exit code 0 after", text)
    assert _numbers(r"largest difference between the loss curves: ([-+.e\d]+)", text)[0] <= 1e-5


def _check_05(text):
    # The gradient stores the candidates' rows, no more.
    candidates = re.search(r"candidates of this batch: (\d+) of", text).group(1)
    assert "stype=row_sparse stores (%s, " % candidates in text
    p1 = _numbers(r"held-out P@1 ([.\d]+)", text)[0]
    assert p1 > _numbers(r"P@1 of the most popular label: ([.\d]+)", text)[0] + 0.3
    assert _numbers(r"score\(\) is precision@1: ([.\d]+)", text)[0] == p1
    assert _numbers(r"samples  P@1 ([.\d]+)", text)[0] > 0.5  # the command line's model
    assert re.search(r"\d+ predictions written to", text)


CHECKS = {"01_sparse_data.ipynb": _check_01, "02_standard_vs_lazy_adam.ipynb": _check_02,
          "03_sklearn_quickstart.ipynb": _check_03, "04_scaling_out.ipynb": _check_04,
          "05_extreme_multilabel.ipynb": _check_05}


def _plots(notebook):
    return sum("image/png" in out.get("data", {}) for cell in notebook.cells
               if cell.cell_type == "code" for out in cell.get("outputs", []))


def test_every_tutorial_has_its_output_checks():
    assert NOTEBOOKS == sorted(CHECKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_with_outputs_of_a_full_run(name):
    notebook = _read(name)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count for cell in code), \
        "%s: every code cell must have been run (commit it with the outputs of a full run)" % name
    counts = [cell.execution_count for cell in code]
    assert counts == sorted(counts), "%s: cells were not run top to bottom" % name
    errors = [out for cell in code for out in cell.get("outputs", []) if out.output_type == "error"]
    assert not errors, "%s was committed with an error output" % name
    # The committed run is the full-size one, not the small one CI makes.
    text = "".join(out.get("text", "") for cell in code for out in cell.get("outputs", [])
                   if out.output_type == "stream")
    assert "small sizes" not in text, "%s was committed from a GLUON_SPARSE_TUTORIAL_SMALL run" % name
    CHECKS[name](text)


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_runs_top_to_bottom_in_small_mode(name, monkeypatch):
    # The kernel process inherits this environment.
    monkeypatch.setenv("GLUON_SPARSE_TUTORIAL_SMALL", "1")
    notebook = _read(name)
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": TUTORIALS}})
    # Raises CellExecutionError, with the failing cell and its traceback, on any error.
    client.execute()
    text = _stdout(notebook)
    assert "small sizes" in text, "%s did not announce its small mode" % name
    CHECKS[name](text)
    assert _plots(notebook) == _plots(_read(name)), "%s: a plot was not drawn" % name
