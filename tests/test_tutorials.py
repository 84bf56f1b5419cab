"""Every tutorial notebook runs top to bottom (small sizes) and is committed with outputs.

The notebooks are executed with nbclient in a fresh kernel, from the
``tutorials/`` directory as a reader would run them, with
``GLUON_SPARSE_TUTORIAL_SMALL=1`` so that each finishes in seconds. The
committed copies are not modified.
"""
import os

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


def test_the_four_tutorials_exist():
    assert NOTEBOOKS == ["01_sparse_data.ipynb", "02_standard_vs_lazy_adam.ipynb",
                         "03_sklearn_quickstart.ipynb", "04_scaling_out.ipynb"]


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
    text = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                   for out in cell.get("outputs", []) if out.output_type == "stream")
    assert "small sizes" in text, "%s did not announce its small mode" % name
