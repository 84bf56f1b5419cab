"""The ImportError advice for a numpy too new for MXNet must not break other packages."""
import configparser
import os
from importlib import metadata

from gluon_sparse import _compat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _FakeDistribution:
    def __init__(self, name, requires):
        self.metadata = {"Name": name}
        self.requires = requires


def test_fix_pins_the_packages_that_need_a_newer_numpy(monkeypatch):
    installed = [_FakeDistribution("matplotlib", ["contourpy>=1.0.1", "numpy>=1.25"]),
                 _FakeDistribution("contourpy", ["numpy>=1.25", "pytest; extra == 'test'"]),
                 _FakeDistribution("scipy", ["numpy<2.3,>=1.21"]),  # accepts 1.23: not named
                 _FakeDistribution("tool", ["numpy>=2; extra == 'fast'"]),  # optional: not named
                 _FakeDistribution("other-lib", ["numpy>=2.0"])]
    monkeypatch.setattr(metadata, "distributions", lambda: installed)
    fix = _compat._numpy_fix()
    assert fix.startswith("pip install 'numpy>=1.21,<1.24' ")
    # One command: pip then picks releases of matplotlib and contourpy that accept numpy 1.23.
    assert "'matplotlib>=3.9,<3.11'" in fix and "'contourpy<1.3.3'" in fix
    assert "'other-lib'" in fix and "scipy" not in fix and "tool" not in fix


def test_fix_is_the_plain_pin_when_nothing_needs_a_newer_numpy(monkeypatch):
    monkeypatch.setattr(metadata, "distributions",
                        lambda: [_FakeDistribution("scipy", ["numpy>=1.21"])])
    assert _compat._numpy_fix() == "pip install 'numpy>=1.21,<1.24'"


def test_matplotlib_pin_is_the_tutorials_extra():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    tutorials = config["options.extras_require"]["tutorials"].split()
    assert _compat._COMPATIBLE_PINS["matplotlib"] in tutorials
